// The checkpoint formats: the tensors each tool writes for one layer, and their conversion into
// the canonical form. This is the only place in nibble that knows the formats (docs/formats.md).
#pragma once

#include <functional>
#include <utility>
#include <vector>
#include <string>

#include "nibble/canonical.h"
#include "nibble/quant_config.h"

namespace nibble {

/// Looks up one tensor of a layer by its suffix ("qweight", "scales", ...); returns an empty
/// Tensor if the checkpoint has no such tensor.
using TensorSource = std::function<Tensor(const std::string& suffix)>;

/// Reads the tensors of layer `name` stored as `scheme` says, checks every dtype and shape against
/// the format (the format decides each tensor's orientation; shapes are then checked against it),
/// and returns the canonical form. `act_dtype` is the activation dtype the layer will run with
/// (the bias is converted to it; scales keep their stored dtype). Throws Errc::format naming the
/// layer, the tensor, the expected and the found shape or value.
CanonicalLinear canonicalize(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                             DType act_dtype);

/// The tensor suffixes a layer of this packing is recognized by ("qweight", "weight_packed").
const char* primary_tensor_suffix(Packing p) noexcept;

}  // namespace nibble

namespace nibble {

/// The tensors a tool writes for layer `w` in `packing`, as (suffix, tensor) pairs: the exact
/// inverse of canonicalize(). Throws Errc::unsupported where the packing cannot hold the layer
/// (AWQ with act order, a GPTQ v1 zero point of 0, N not a multiple of 8 where words pack N).
std::vector<std::pair<std::string, Tensor>> pack_layer(const CanonicalLinear& w, Packing packing);

}  // namespace nibble
