// LinearSpec: the description of one quantized linear layer that backends decide on.
#pragma once

#include <cstdint>
#include <string>

#include "nibble/dtype.h"
#include "nibble/plugin_abi.h"

namespace nibble {

enum class WeightType : int32_t {
  uint4 = NIBBLE_WT_UINT4,      ///< 4-bit codes with per-group zero points
  uint4b8 = NIBBLE_WT_UINT4B8,  ///< symmetric 4-bit: code - 8, no zero points
};

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

const char* weight_type_name(WeightType t) noexcept;  // "uint4", "uint4b8"
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
  int32_t bits = 4;
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
