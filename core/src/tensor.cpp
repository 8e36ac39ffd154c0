// Host tensors: allocation, views, conversion.
#include "nibble/tensor.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <limits>

#include "nibble/error.h"

namespace nibble {

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

int64_t checked_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw Error(Errc::limit, fmt::format("negative dimension in shape {}", shape_str(s)));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw Error(Errc::limit, fmt::format("element count of shape {} overflows 64 bits", shape_str(s)));
    n *= d;
  }
  return n;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  if (dtype_size(dtype) == 0) throw Error(Errc::invalid_argument, "Tensor::zeros: invalid dtype");
  Tensor t;
  t.numel_ = checked_numel(shape);
  const std::size_t bytes = std::size_t(t.numel_) * dtype_size(dtype);
  if (t.numel_ > (int64_t(1) << 40) / int64_t(dtype_size(dtype)))
    throw Error(Errc::limit, fmt::format("refusing to allocate a {} tensor of shape {} ({} bytes)",
                                         dtype_name(dtype), shape_str(shape), bytes));
  const std::size_t alloc = ((bytes ? bytes : 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, alloc);
  if (!p) throw Error(Errc::limit, fmt::format("out of memory allocating {} bytes", alloc));
  std::memset(p, 0, alloc);
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  t.writable_ = true;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view(const void* data, DType dtype, Shape shape, std::shared_ptr<const void> owner) {
  Tensor t;
  t.numel_ = checked_numel(shape);
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.writable_ = false;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

void* Tensor::mutable_data() {
  if (!writable_) throw Error(Errc::invalid_argument, "tensor is a read-only view; clone() it first");
  return const_cast<void*>(data_);
}

Tensor Tensor::clone() const {
  Tensor t = zeros(dtype_, shape_);
  if (nbytes()) std::memcpy(t.mutable_data(), data_, nbytes());
  return t;
}

Tensor Tensor::reshaped(Shape shape) const {
  if (checked_numel(shape) != numel_)
    throw Error(Errc::invalid_argument,
                fmt::format("cannot reshape {} to {}", shape_str(shape_), shape_str(shape)));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::as_dtype(DType dtype) const {
  if (dtype_size(dtype) != dtype_size(dtype_))
    throw Error(Errc::invalid_argument, fmt::format("cannot reinterpret {} as {}", dtype_name(dtype_), dtype_name(dtype)));
  Tensor t = *this;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (!is_float(dtype_) || !is_float(dtype))
    throw Error(Errc::invalid_argument, fmt::format("cannot convert {} to {}", dtype_name(dtype_),
                                                    dtype_name(dtype)));
  if (dtype == dtype_) return *this;
  Tensor t = zeros(dtype, shape_);
  void* out = t.mutable_data();
  for (int64_t i = 0; i < numel_; ++i) store_float(out, dtype, std::size_t(i), at(std::size_t(i)));
  return t;
}

}  // namespace nibble
