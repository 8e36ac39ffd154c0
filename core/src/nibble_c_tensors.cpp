// DLPack tensors in and out of the C API: x and y of apply, where every property the kernels rely
// on is checked before the plugin sees them, with a message naming the layer, the tensor, what was
// expected and what was found (nothing is ever copied to make a tensor fit); and the reference
// dequantization of a layer.
#include <fmt/format.h>

#include "nibble_c_internal.h"

using namespace nibble;

namespace nibble::capi {

int32_t dlpack_device_of(const Backend& b) noexcept {
  const std::string& p = b.platform();
  if (p == "cpu") return kDLCPU;
  if (p == "cuda") return kDLCUDA;
  if (p == "rocm") return kDLROCM;
  return 0;
}

std::string device_type_name(int32_t type) {
  switch (type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLOpenCL: return "opencl";
    case kDLVulkan: return "vulkan";
    case kDLMetal: return "metal";
    case kDLVPI: return "vpi";
    case kDLROCM: return "rocm";
    case kDLROCMHost: return "rocm_host";
    case kDLExtDev: return "ext_dev";
    case kDLCUDAManaged: return "cuda_managed";
    default: return fmt::format("DLPack device type {}", type);
  }
}

}  // namespace nibble::capi

namespace {

// "cpu", "cuda:0"; host-memory types without an ordinal.
std::string device_str(DLDevice d) {
  const std::string name = capi::device_type_name(int32_t(d.device_type));
  if (d.device_type == kDLCPU || d.device_type == kDLCUDAHost || d.device_type == kDLROCMHost) return name;
  return fmt::format("{}:{}", name, d.device_id);
}

std::string dtype_str(DLDataType t) {
  const char* code = nullptr;
  switch (t.code) {
    case kDLInt: code = "int"; break;
    case kDLUInt: code = "uint"; break;
    case kDLFloat: code = "float"; break;
    case kDLBfloat: code = "bfloat"; break;
    case kDLComplex: code = "complex"; break;
    case kDLOpaqueHandle: code = "opaque"; break;
    default: return fmt::format("DLPack type code {} of {} bits x{}", int(t.code), int(t.bits), int(t.lanes));
  }
  return t.lanes == 1 ? fmt::format("{}{}", code, int(t.bits)) : fmt::format("{}{}x{}", code, int(t.bits), int(t.lanes));
}

DLDataType dlpack_dtype(DType d) {
  switch (d) {
    case DType::f16: return DLDataType{kDLFloat, 16, 1};
    case DType::bf16: return DLDataType{kDLBfloat, 16, 1};
    case DType::f32: return DLDataType{kDLFloat, 32, 1};
    default: return DLDataType{kDLOpaqueHandle, 0, 0};
  }
}

std::string dims_str(const int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", v[i]);
  return s + "]";
}

struct Checked {
  char* data;         // first byte (data + byte_offset)
  std::size_t bytes;  // of all rows x cols elements
};

// What a tensor must be: its name and layer for messages, dtype, device, rows (< 0: any) and cols.
struct Want {
  std::string layer;
  const char* name;
  DType dtype;
  DLDevice device;
  std::string device_why;  // "(where backend X prepared the layer)"
  int64_t rows, cols;
};

Checked check_tensor(const DLTensor* t, const Want& w) {
  const std::string where = fmt::format("layer '{}': tensor '{}'", w.layer, w.name);
  const std::string dims = w.rows < 0 ? fmt::format("[M, {}]", w.cols) : fmt::format("[{}, {}]", w.rows, w.cols);
  if (!t) throw Error(Errc::invalid_argument, fmt::format("{} is NULL", where));
  if (t->ndim != 2 || !t->shape)
    throw Error(Errc::invalid_argument,
                fmt::format("{}: expected 2 dimensions {}, found {} dimension(s) {}", where, dims, t->ndim,
                            t->shape && t->ndim > 0 && t->ndim <= 8 ? dims_str(t->shape, t->ndim) : std::string("")));
  if (int32_t(t->device.device_type) != int32_t(w.device.device_type) ||
      (w.device.device_type != kDLCPU && t->device.device_id != w.device.device_id))
    throw Error(Errc::invalid_argument, fmt::format("{}: expected device {}{}, found {}", where, device_str(w.device),
                                                    w.device_why, device_str(t->device)));
  const DLDataType want = dlpack_dtype(w.dtype);
  if (t->dtype.code != want.code || t->dtype.bits != want.bits || t->dtype.lanes != want.lanes)
    throw Error(Errc::invalid_argument, fmt::format("{}: expected dtype {} ({}), found {}", where, dtype_str(want),
                                                    w.rows < 0 || std::string(w.name) == "y"
                                                        ? fmt::format("the layer's activation dtype {}", dtype_name(w.dtype))
                                                        : std::string("nibble's reference dequantization"),
                                                    dtype_str(t->dtype)));
  const int64_t m = t->shape[0];
  if (t->shape[1] != w.cols || m < 0 || (w.rows >= 0 && m != w.rows))
    throw Error(Errc::invalid_argument, fmt::format("{}: expected shape {}{}, found {}", where, dims,
                                                    w.rows >= 0 && std::string(w.name) == "y" ? " (M of x)" : "",
                                                    dims_str(t->shape, 2)));
  if (t->strides) {
    const int64_t compact[2] = {w.cols, 1};
    for (int d = 0; d < 2; ++d)
      if (t->shape[d] > 1 && t->strides[d] != compact[d])
        throw Error(Errc::invalid_argument,
                    fmt::format("{}: expected a contiguous row-major tensor (strides {}), found strides {} for shape {}; "
                                "nibble never copies a tensor: make it contiguous first",
                                where, dims_str(compact, 2), dims_str(t->strides, 2), dims_str(t->shape, 2)));
  }
  char* data = static_cast<char*>(t->data) + t->byte_offset;
  const std::size_t elem = dtype_size(w.dtype);
  if (m > 0 && !t->data) throw Error(Errc::invalid_argument, fmt::format("{}: data is NULL", where));
  if (reinterpret_cast<uintptr_t>(data) % elem)
    throw Error(Errc::invalid_argument, fmt::format("{}: expected data aligned to {} bytes (its element size), found "
                                                    "address {} (data {} + byte_offset {})", where, elem,
                                                    fmt::ptr(data), fmt::ptr(t->data), t->byte_offset));
  return {data, std::size_t(m) * std::size_t(w.cols) * elem};
}

// x or y of apply on a prepared layer.
Checked check_io(const nibble_host_linear& lin, const DLTensor* t, const char* name, int64_t rows, int64_t cols) {
  const Backend& b = lin.prepared->backend();
  if (lin.device.device_type == 0)
    throw Error(Errc::unsupported, fmt::format("layer '{}': tensor '{}': backend {} runs on platform '{}', which has no "
                                               "DLPack device type nibble knows", lin.prepared->spec().name, name,
                                               b.name(), b.platform()));
  return check_tensor(t, Want{lin.prepared->spec().name, name, lin.prepared->spec().act_dtype, lin.device,
                              fmt::format(" (where backend {} prepared the layer)", b.name()), rows, cols});
}

}  // namespace

extern "C" {

nibble_host_error* nibble_host_linear_device(const nibble_host_linear* linear, DLDevice* device) {
  return capi::guarded([&] {
    constexpr const char* fn = "nibble_host_linear_device";
    capi::require(device, fn, "device") = capi::require(linear, fn, "linear").device;
  });
}

size_t nibble_host_linear_kernel(const nibble_host_linear* linear, int64_t m, char* buf, size_t cap) {
  std::string name;
  try {
    if (linear) name = linear->prepared->kernel_name(m);
  } catch (...) {
    name.clear();
  }
  if (buf && cap) {
    const std::size_t n = std::min(name.size(), cap - 1);
    std::memcpy(buf, name.data(), n);
    buf[n] = '\0';
  }
  return name.size();
}

nibble_host_error* nibble_host_linear_apply(const nibble_host_linear* linear, const DLTensor* x, DLTensor* y,
                                            void* stream) {
  return capi::guarded([&] {
    const nibble_host_linear& lin = capi::require(linear, "nibble_host_linear_apply", "linear");
    const LinearSpec& spec = lin.prepared->spec();
    const Checked cx = check_io(lin, x, "x", -1, spec.k);
    const int64_t m = x->shape[0];
    const Checked cy = check_io(lin, y, "y", m, spec.n);
    if (m == 0) return;
    if (cx.data < cy.data + cy.bytes && cy.data < cx.data + cx.bytes)
      throw Error(Errc::invalid_argument, fmt::format("layer '{}': tensor 'y' overlaps tensor 'x' (y is written while x "
                                                      "is read): expected separate memory", spec.name));
    lin.prepared->apply_device(cx.data, cy.data, m, stream);
  });
}

nibble_host_error* nibble_host_checkpoint_dequantize(const nibble_host_checkpoint* checkpoint, const char* layer,
                                                     DLTensor* weight) {
  return capi::guarded([&] {
    constexpr const char* fn = "nibble_host_checkpoint_dequantize";
    const Checkpoint& ck = *capi::require(checkpoint, fn, "checkpoint").checkpoint;
    const LayerEntry* e = ck.find_layer(&capi::require(layer, fn, "layer"));
    if (!e) throw Error(Errc::not_found, fmt::format("{}: layer '{}' is not a linear layer of {}", fn, layer, ck.dir().string()));
    const Checked out = check_tensor(weight, Want{e->name, "weight", DType::f32, DLDevice{kDLCPU, 0}, "", e->k, e->n});
    const Tensor w = dequantize(ck.load(e->name));
    if (w.nbytes() != out.bytes)
      throw Error(Errc::internal, fmt::format("{}: layer '{}': {} bytes dequantized for {} expected", fn, e->name,
                                              w.nbytes(), out.bytes));
    std::memcpy(out.data, w.data(), out.bytes);
  });
}

nibble_host_error* nibble_host_linear_apply_managed(const nibble_host_linear* linear, const DLManagedTensor* x,
                                                    DLManagedTensor* y, void* stream) {
  return nibble_host_linear_apply(linear, x ? &x->dl_tensor : nullptr, y ? &y->dl_tensor : nullptr, stream);
}

}  // extern "C"
