// Helpers shared by the format readers (core/src/formats_*.cpp): checked tensor access and the
// common tail of every conversion.
#pragma once

#include <fmt/format.h>

#include <string>

#include "nibble/error.h"
#include "nibble/formats.h"

namespace nibble::detail {

struct LayerTensors {
  const std::string& layer;
  const TensorSource& source;

  [[noreturn]] void fail(const std::string& tensor, const std::string& what) const {
    throw Error(Errc::format, fmt::format("layer '{}': tensor '{}': {}", layer, tensor, what));
  }

  /// The tensor, which must exist, have one of `dtypes` and (if given) exactly `shape`.
  Tensor need(const std::string& suffix, std::initializer_list<DType> dtypes, const Shape& shape = {}) const {
    Tensor t = source(suffix);
    if (t.empty()) fail(layer + "." + suffix, "missing from the checkpoint");
    check(suffix, t, dtypes, shape);
    return t;
  }
  /// The tensor if present (checked as need() does), else empty.
  Tensor maybe(const std::string& suffix, std::initializer_list<DType> dtypes, const Shape& shape = {}) const {
    Tensor t = source(suffix);
    if (!t.empty()) check(suffix, t, dtypes, shape);
    return t;
  }
  void check(const std::string& suffix, const Tensor& t, std::initializer_list<DType> dtypes, const Shape& shape) const {
    bool ok = false;
    std::string names;
    for (DType d : dtypes) {
      ok |= t.dtype() == d;
      names += (names.empty() ? "" : "|") + std::string(dtype_name(d));
    }
    if (!ok) fail(layer + "." + suffix, fmt::format("expected dtype {}, found {} {}", names, dtype_name(t.dtype()), shape_str(t.shape())));
    if (!shape.empty() && t.shape() != shape)
      fail(layer + "." + suffix, fmt::format("expected shape {}, found {}", shape_str(shape), shape_str(t.shape())));
  }
};

inline int64_t groups_for(int64_t k, int group_size) { return group_size <= 0 ? 1 : (k + group_size - 1) / group_size; }

/// The spec every format starts from: name, shape, group size, source format and weight type.
inline LinearSpec layer_spec(const LayerTensors& t, const LayerScheme& scheme, int64_t k, int64_t n) {
  LinearSpec s;
  s.name = t.layer;
  s.k = k;
  s.n = n;
  s.group_size = scheme.group_size;
  s.format = scheme.format;
  s.weight_type = scheme.symmetric ? WeightType::uint4b8 : WeightType::uint4;
  return s;
}

/// The common tail: g_idx (kept only if it is not the trivial k / G), bias, validation.
void finish_canonical(CanonicalLinear& w, const LayerTensors& t, const LayerScheme& scheme, Tensor g_idx, DType act_dtype,
                      const char* g_idx_name = "g_idx");

CanonicalLinear canonicalize_gptq(const LayerTensors& t, const LayerScheme& scheme, DType act_dtype);
CanonicalLinear canonicalize_awq(const LayerTensors& t, const LayerScheme& scheme, DType act_dtype);
CanonicalLinear canonicalize_compressed_tensors(const LayerTensors& t, const LayerScheme& scheme, DType act_dtype);

}  // namespace nibble::detail
