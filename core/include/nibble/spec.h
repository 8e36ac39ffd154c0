// LinearSpec: the description of one quantized linear layer that backends decide on.
#pragma once

#include <cstdint>
#include <string>

#include "nibble/dtype.h"
#include "nibble/plugin_abi.h"

namespace nibble {

/// uint{b}: b-bit codes with per-group zero points; uint{b}b{2^(b-1)}: symmetric, code - 2^(b-1).
enum class WeightType : int32_t {
  uint4 = NIBBLE_WT_UINT4,
  uint4b8 = NIBBLE_WT_UINT4B8,
  uint8 = NIBBLE_WT_UINT8,
  uint8b128 = NIBBLE_WT_UINT8B128,
  uint2 = NIBBLE_WT_UINT2,
  uint2b2 = NIBBLE_WT_UINT2B2,
  uint3 = NIBBLE_WT_UINT3,
  uint3b4 = NIBBLE_WT_UINT3B4,
};

/// Bit width of a weight type (2, 3, 4, 8).
inline int32_t weight_type_bits(WeightType t) noexcept { return nibble_weight_type_bits(int32_t(t)); }
/// True for the symmetric types (no zero points).
inline bool weight_type_symmetric(WeightType t) noexcept { return nibble_weight_type_symmetric(int32_t(t)) != 0; }
/// The type of `bits`-bit codes (2, 3, 4 or 8), symmetric or with zero points. Throws
/// Errc::unsupported for another width.
WeightType weight_type_of(int32_t bits, bool symmetric);
/// The zero point of a symmetric type: 2^(bits-1).
inline int32_t symmetric_zero(WeightType t) noexcept { return 1 << (weight_type_bits(t) - 1); }

enum class Format : int32_t {
  unknown = NIBBLE_FORMAT_UNKNOWN,
  gptq = NIBBLE_FORMAT_GPTQ,
  gptq_v2 = NIBBLE_FORMAT_GPTQ_V2,
  awq = NIBBLE_FORMAT_AWQ,
  compressed_tensors = NIBBLE_FORMAT_COMPRESSED_TENSORS,
  autoround = NIBBLE_FORMAT_AUTOROUND,
};

enum class Parallel : int32_t {
  none = NIBBLE_PARALLEL_NONE,
  column = NIBBLE_PARALLEL_COLUMN,
  row = NIBBLE_PARALLEL_ROW,
};

const char* weight_type_name(WeightType t) noexcept;  // "uint4", "uint4b8", "uint8b128", ...
const char* format_name(Format f) noexcept;           // "gptq", "gptq_v2", "awq", ...
const char* parallel_name(Parallel p) noexcept;       // "none", "column", "row"

/// One linear layer as a kernel sees it: Y[M, n] = X[M, k] * dequant(W)[k, n] (+ bias).
struct LinearSpec {
  std::string name;                  ///< layer name, e.g. "model.layers.0.mlp.down_proj"
  int64_t k = 0;                     ///< input features of this partition
  int64_t n = 0;                     ///< output features of this partition
  int64_t full_k = 0;                ///< input features before tensor-parallel slicing (0 = k)
  int64_t full_n = 0;                ///< output features before tensor-parallel slicing (0 = n)
  Parallel parallel = Parallel::none;
  int32_t bits = 4;                  ///< 2, 3, 4 or 8: weight_type_bits(weight_type)
  int32_t group_size = 128;          ///< -1 = one group spanning K
  WeightType weight_type = WeightType::uint4b8;
  DType act_dtype = DType::f16;
  DType scale_dtype = DType::f16;
  bool act_order = false;
  bool has_bias = false;
  Format format = Format::unknown;

  /// Number of groups along K: 1 for per-channel; ceil(full_k / group_size) for a row-parallel
  /// act-order partition (it keeps every group of the full layer); else ceil(k / group_size).
  int64_t num_groups() const noexcept {
    const nibble_linear_spec s = to_abi();
    return nibble_spec_num_groups(&s);
  }
  /// Effective group size along K (k for per-channel).
  int64_t effective_group() const noexcept { return group_size <= 0 ? k : group_size; }

  /// The C view handed to plugins; valid while *this lives.
  nibble_linear_spec to_abi() const noexcept;
  /// "uint4b8 G128 f16 k=4096 n=4096 act_order bias"
  std::string summary() const;
};

}  // namespace nibble
