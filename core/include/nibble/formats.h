// The checkpoint formats: the tensors each tool writes for one layer, the layer's spec from their
// headers, and the conversion into the canonical form and back. Each format is one unit of
// core/src/formats/ (docs/formats.md); these are the entry points the rest of nibble uses.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "nibble/canonical.h"
#include "nibble/quant_config.h"
#include "nibble/safetensors.h"

namespace nibble {

/// How a reader finds the tensors of one layer, by suffix ("qweight", "scales", ...): the header
/// (dtype and shape, no data read), or null if the layer has no such tensor; and the data.
struct TensorSource {
  std::function<const TensorInfo*(const std::string& suffix)> info;
  std::function<Tensor(const std::string& suffix)> get;

  /// Tensors in memory by suffix (tests, fuzzers, host programs with their own storage).
  static TensorSource from_map(std::map<std::string, Tensor> tensors);
};

/// The spec of layer `name` stored as `scheme`, from the tensor headers and the small index tensors
/// (g_idx, weight_shape) alone: every header is checked against the format (the format decides each
/// tensor's orientation; shapes are then checked against it). This is the one derivation of a
/// layer's spec: canonicalize() reads the data into exactly this spec. Throws Errc::format /
/// Errc::unsupported naming the layer, the tensor, the expected and the found value.
LinearSpec describe_layer(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                          DType act_dtype);

/// Reads the layer's data into the canonical form, for the spec describe_layer() gave (act_dtype
/// from it: the bias is converted to it; scales keep their stored dtype), and validates it.
CanonicalLinear canonicalize(const LayerScheme& scheme, const TensorSource& tensors, const LinearSpec& spec);
/// describe_layer() then canonicalize().
CanonicalLinear canonicalize(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                             DType act_dtype);

/// The tensor that marks a layer of this packing ("qweight", "weight_packed").
const char* primary_tensor_suffix(Packing p) noexcept;
/// Every tensor suffix a layer of this packing may have (bias not included).
const std::vector<std::string>& packing_tensor_suffixes(Packing p);

/// The tensors a tool writes for layer `w` in `packing`, as (suffix, tensor) pairs: the exact
/// inverse of canonicalize(). Throws Errc::unsupported where the packing cannot hold the layer
/// (AWQ with act order or another width than 4, a GPTQ v1 zero point of 0, N not a multiple of 8
/// where words pack N).
std::vector<std::pair<std::string, Tensor>> pack_layer(const CanonicalLinear& w, Packing packing);

/// One finding of `nibble lint`: what the tensors say about themselves, without a reference.
struct LintFinding {
  std::string layer;
  std::string tensor;  ///< the full tensor name, or "" for the layer as a whole
  std::string what;
};
/// What can be told from a quantized layer's tensors alone (zero-point conventions against the
/// config, transposed or too narrow zero points, corrupted v1 words, zero or non-finite scales,
/// codes that leave part of their range unused, and anything canonicalize refuses).
std::vector<LintFinding> lint_layer(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                                    DType act_dtype);

}  // namespace nibble
