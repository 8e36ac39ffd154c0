// Layout planning of cuda_w4a16, on the host and without a GPU: what process_weights decides
// before anything is uploaded. The packed row order (act order sorts rows by group, each group
// padded to a multiple of 32 rows), the padding of K and N, the canonical group of each packed
// group, and the multiply-high constant of the kernels' group lookup. layout.h says what the packed
// arrays are; this file says which canonical row and group land where. Tested by
// test_layout_plan.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nibble/plugin_abi.h"
#include "nibble_planes.h"

namespace nibble::cuda {

/// The packed geometry of one layer.
struct LayoutPlan {
  int64_t k = 0, n = 0;          ///< logical (canonical) sizes
  int64_t k_pad = 0, n_pad = 0;  ///< packed sizes: k_pad a multiple of kTileK, n_pad of kNPad
  int32_t strips = 0;            ///< n_pad / kStripN
  int32_t ku = 0;                ///< k_pad / kUnitK (units along K)
  int32_t kt = 0;                ///< k_pad / kTileK (pipeline stages along K)
  int32_t g_eff = 0;             ///< packed rows per group, a multiple of kGroupAlign
  int32_t groups_pad = 0;        ///< packed groups: ceil(k_pad / g_eff)
  uint32_t g_magic = 0;          ///< GemmParams::g_magic for g_eff
  /// Canonical row of each packed row (-1: a zero row), [k_pad]; empty when the packed rows are
  /// the canonical rows in order (rows >= k are zero). Also the x column each packed row reads.
  std::vector<int32_t> perm;
  /// Canonical group of each packed group (-1: padding, scale 0), [groups_pad].
  std::vector<int32_t> gmap;
};

/// Group of k-unit u as the kernels compute it from g_magic (unit_group in device_ops.cuh).
inline int32_t plan_unit_group(int64_t u, uint32_t magic) {
  return magic ? int32_t((uint64_t(uint32_t(u)) * magic) >> 32) : int32_t(u);
}

/// Plans the layout of `s` (g_idx: the canonical g_idx for act order, else null). NIBBLE_OK, or a
/// status with a message naming the layer, the tensor, what was expected and what was found.
int32_t plan_layout(const nibble_linear_spec& s, const int32_t* g_idx, LayoutPlan* out, std::string* why);

/// A layer as process_weights uploads it: every width as a 4-bit layer (2 and 3 bits as one nibble
/// plane, 8 bits as two; plugins/common/nibble_planes.h), its layout plan, and the x column each
/// packed row reads.
struct PlannedLayer {
  std::optional<plugin::NibblePlanes> planes;  ///< set for widths other than 4
  nibble_linear_spec spec{};                   ///< the 4-bit layer (the real one at 4 bits)
  nibble_canonical_weights weights{};          ///< its canonical tensors (into `planes` or the caller's)
  LayoutPlan lp;                               ///< lp.perm: packed row -> row of the 4-bit layer
  /// Packed row -> column of the real x (-1: zero), [k_pad]; empty when x is read as it is.
  std::vector<int32_t> x_map;
};

/// Plans `s` with canonical weights `w` (the real layer, any declared width). NIBBLE_OK, or a
/// status with a message naming the layer, the tensor, what was expected and what was found.
int32_t plan_layer(const nibble_linear_spec& s, const nibble_canonical_weights& w, PlannedLayer* out,
                   std::string* why);

/// Whether the packed rows of an 8-bit layer's nibble planes pair up for the dense path's one-pass
/// dequantization (launch_dequant_dense_planes8): packed rows in the 4-bit layer's order (no perm),
/// packed groups of g_eff rows in pairs (the low plane, then the high plane), each low-plane row r
/// and its twin r + g_eff reading the same x column, and the low-plane rows reading every column
/// of x in [0, real.k) exactly once (padding rows: -1 in both planes). False for other widths.
bool planes8_dense_pairs(const PlannedLayer& layer, const nibble_linear_spec& real);

/// For a layer where planes8_dense_pairs holds: the x column of each low-plane row in the order the
/// tiled kernels' one-pass 8-bit instances walk the real K, [lp.ku / 2 * 32]: real unit r (32 rows)
/// is packed unit r + upg * (r / upg) (upg = g_eff / 32), whose twin upg units on reads the same x.
std::vector<int32_t> low_plane_rows(const std::vector<int32_t>& x_map, const LayoutPlan& lp);

/// Checks that every canonical scale is finite and fits the activation dtype (fp16 tops out at
/// 65504). NIBBLE_OK or NIBBLE_ERR_UNSUPPORTED with the first scale that does not.
int32_t check_scales(const nibble_linear_spec& s, const void* scales, std::string* why);

}  // namespace nibble::cuda
