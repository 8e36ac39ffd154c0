// Tensor: a dense row-major host tensor with shared ownership of its bytes. A tensor either owns a
// fresh allocation or is a zero-copy view into memory someone else keeps alive (a memory-mapped
// checkpoint), in which case it holds a reference to that owner.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "nibble/dtype.h"

namespace nibble {

using Shape = std::vector<int64_t>;

/// "[4096, 512]"
std::string shape_str(const Shape& s);
/// Product of the dimensions; throws Errc::limit on overflow or a negative dimension.
int64_t checked_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  /// A new zero-filled host tensor, 64-byte aligned.
  static Tensor zeros(DType dtype, Shape shape);
  /// A view of `data` that keeps `owner` alive. The bytes are read-only unless the owner allows it.
  static Tensor view(const void* data, DType dtype, Shape shape, std::shared_ptr<const void> owner);

  bool empty() const noexcept { return data_ == nullptr; }
  explicit operator bool() const noexcept { return !empty(); }

  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  int64_t dim(std::size_t i) const { return shape_.at(i); }
  std::size_t ndim() const noexcept { return shape_.size(); }
  int64_t numel() const noexcept { return numel_; }
  std::size_t nbytes() const noexcept { return std::size_t(numel_) * dtype_size(dtype_); }

  const void* data() const noexcept { return data_; }
  /// Writable bytes. Only tensors made by zeros() (or copies) are writable; views are not.
  void* mutable_data();

  template <class T> const T* data_as() const noexcept { return static_cast<const T*>(data_); }
  template <class T> T* mutable_data_as() { return static_cast<T*>(mutable_data()); }
  template <class T> std::span<const T> span() const noexcept {
    return {static_cast<const T*>(data_), std::size_t(numel_)};
  }

  /// Element i (row-major) of a float tensor as double.
  double at(std::size_t i) const noexcept { return load_float(data_, dtype_, i); }

  /// A deep, writable copy.
  Tensor clone() const;
  /// The same bytes with another shape of equal element count.
  Tensor reshaped(Shape shape) const;
  /// The same bytes read as another dtype of the same element size (i32 <-> u32).
  Tensor as_dtype(DType dtype) const;
  /// Float tensor converted (with rounding) to another float dtype.
  Tensor to(DType dtype) const;

 private:
  std::shared_ptr<const void> owner_;
  const void* data_ = nullptr;
  bool writable_ = false;
  DType dtype_ = DType::invalid;
  Shape shape_;
  int64_t numel_ = 0;
};

}  // namespace nibble
