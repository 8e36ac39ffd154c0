// The packed weight layout of rocm_w4a16, made on the host by process_weights and then uploaded
// as it is. Plain C++ (no HIP types) so that it builds and is tested without hipcc
// (test_rocm_layout.cpp unpacks it back and compares with the canonical form).
//
// Rows. The kernels walk K in "padded rows" p. Rows are grouped: group g owns the padded rows
// [g * g_eff, (g + 1) * g_eff), where g_eff is a multiple of 32 (kGroupAlign) so that an 8-row
// word and a 32-row tile never straddle two groups and the group of a row is p / g_eff with no
// table. Without act order, g_eff = G (per channel: K rounded up to 32) and padded row p is
// canonical row p (rows >= K are padding). With act order, the rows of each group are gathered
// into its slot in canonical order and the slot is padded to g_eff = the largest group rounded up
// to 32; row_src[p] names the canonical row of each padded row (-1 = padding), and the kernels
// gather x through it. k_pad = groups * g_eff; padding rows hold code 0 and read x = 0.
//
// Codes. Columns are taken four at a time ("quads"; N is padded to a multiple of 4 with zero
// codes and zero scales). A record is 16 bytes: four 32-bit words, word c for column 4q + c,
// nibble j (bits 4j..4j+3) of the word holding the code of padded row 8l + j (l: the record's
// "line"). Records are stored quad-major and contiguous along K:
//     codes[((q * lines) + l) * 4 + c],  lines = k_pad / 8
// so the lanes of a wavefront that take consecutive lines of one quad read one contiguous run of
// 16 * wavefront-size bytes with 16-byte loads (1 KiB per load instruction at wave64). The order
// is the same for every wavefront width: the wave64 and wave32 (RDNA, NVIDIA) builds share it.
// Without act order and with K a multiple of 8, word (q, l, c) equals the canonical word
// qweight[l, 4q + c]: the pack is a transpose of 16-byte blocks.
//
// Scales and zero points, per (quad, group):
//     scales[(q * groups + g) * 4 + c]   f32, the canonical scale converted exactly (0 for padded
//                                        columns), one 16-byte load per record
//     zeros[q * groups + g]              u16, nibble c = zero point of column 4q + c (8 for uint4b8)
// f32 scales cost 2 bytes more per group and column than 16-bit ones (3% of the weight bytes at
// G = 128) and keep every scale dtype (f16, bf16, f32) exact under either activation dtype.
//
// Bias: f32 [quads * 4] (padded with 0), or absent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nibble/plugin_abi.h"

namespace nibble::rocm {

inline constexpr int kLineRows = 8;     ///< rows per 32-bit code word (one nibble each)
inline constexpr int kQuadCols = 4;     ///< columns per 16-byte record
inline constexpr int kGroupAlign = 32;  ///< g_eff is a multiple of this

/// Sizes of one prepared layer.
struct LayoutDims {
  int64_t k = 0;       ///< canonical input features (the K of x)
  int64_t n = 0;       ///< output features
  int64_t groups = 0;  ///< groups along K (nibble_spec_num_groups)
  int64_t g_eff = 0;   ///< padded rows per group, a multiple of kGroupAlign
  int64_t k_pad = 0;   ///< groups * g_eff
  int64_t lines = 0;   ///< k_pad / 8: records per quad
  int64_t quads = 0;   ///< ceil(n / 4)
};

/// The host image of the device layout (see the top of this file).
struct HostLayout {
  LayoutDims d;
  std::vector<uint32_t> codes;   ///< [quads][lines][4]
  std::vector<float> scales;     ///< [quads][groups][4]
  std::vector<uint16_t> zeros;   ///< [quads][groups], nibble c = column 4q + c
  std::vector<int32_t> row_src;  ///< [k_pad] canonical row or -1; empty when rows are the identity
  std::vector<float> bias;       ///< [quads * 4] or empty
};

inline std::size_t code_index(const LayoutDims& d, int64_t quad, int64_t line, int c) {
  return std::size_t((quad * d.lines + line) * kQuadCols + c);
}
inline std::size_t scale_index(const LayoutDims& d, int64_t quad, int64_t group, int c) {
  return std::size_t((quad * d.groups + group) * kQuadCols + c);
}
inline std::size_t zero_index(const LayoutDims& d, int64_t quad, int64_t group) {
  return std::size_t(quad * d.groups + group);
}

/// Canonical weights -> the layout above. A layer of another width is laid out as its nibble
/// planes (plugins/common/nibble_planes.h): the layout of the equivalent 4-bit layer, row_src
/// composed with the planes' row map, d.k the real layer's K (the columns of x). Throws
/// std::invalid_argument naming the tensor and the value when the canonical weights are
/// inconsistent (missing tensor, g_idx out of range).
HostLayout make_layout(const nibble_linear_spec& spec, const nibble_canonical_weights& w);

}  // namespace nibble::rocm
