// The cpu_w4a16 weight layout, made by process_weights from the canonical form.
#pragma once

#include <cstdint>
#include <vector>

#include "nibble/plugin_abi.h"

namespace nibble::cpu {

/// Prepared weights of one layer.
///
/// Rows of K are reordered so that every group is one contiguous run of rows (act order is
/// resolved here, once, by sorting rows by g_idx; apply() gathers x in the same order). Codes keep
/// the canonical packing along K (u32 [ceil(K/8), N], nibble j of word row r = permuted row 8r+j).
struct CpuWeights {
  int64_t k = 0, n = 0, groups = 0;
  int32_t act_dtype = NIBBLE_DTYPE_F16;
  std::vector<uint32_t> q;          ///< [ceil(K/8), N] codes of the permuted rows
  std::vector<float> scales;        ///< [groups, N]
  std::vector<float> zeros;         ///< [groups, N] zero point (8 for uint4b8)
  std::vector<int64_t> group_start; ///< [groups + 1] first permuted row of each group
  std::vector<int32_t> perm;        ///< permuted row i is canonical row perm[i]; empty = identity
  std::vector<float> bias;          ///< [N] or empty
};

/// Builds CpuWeights from the canonical form (host memory). Throws std::invalid_argument with a
/// message naming the tensor on inconsistent input.
CpuWeights prepare_cpu_weights(const nibble_linear_spec& spec, const nibble_canonical_weights& w);

}  // namespace nibble::cpu
