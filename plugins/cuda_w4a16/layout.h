// The packed weight layout of cuda_w4a16, as index functions shared by the repack kernel, the
// matmul kernels and the host-side layout check (layout_check.cpp). Plain C++ usable from both
// nvcc and g++: no CUDA types here.
//
// Orientation. The kernels compute Y^T[N, M] = W^T[N, K] * X^T[K, M] with mma.m16n8k16: the
// weights are the 16-row "A" operand (16 output features x 16 k) and the activations the 8-column
// "B" operand (16 k x 8 rows of x). At small M this wastes nothing on padding M to 16 (M <= 8 fills
// the n8 side exactly), and it is the orientation that lets the dequantized weights stay in
// registers (as Machete does on Hopper).
//
// Unit. The weights are cut into units of 32 output features (a "strip") x 32 k. One unit is
// 1024 codes = 512 bytes = 32 lanes x 16 bytes: each lane of a warp loads its 16 bytes with one
// coalesced 128-bit access and holds, without any shuffle, the four A fragments
//   word w = 2*kt + nt   (kt: which k16 half of the unit, nt: which n16 half of the strip)
// of the unit. Global order: unit (strip s, k-unit ku) at uint4 offset (s * KU + ku) * 32 + lane,
// so one strip is a contiguous stream along K (DRAM-page friendly for the streaming kernels) and
// a tile of several k-units of one strip is one contiguous run (one cp.async burst).
//
// Inside a word. mma.m16n8k16's A fragment of lane l (gid = l / 4, tig = l % 4) is four 32-bit
// registers a0..a3 of two 16-bit values each:
//   a_jj, jj = 0..3: row (output feature) gid + 8*(jj & 1); columns (k) kappa = 2*tig + 8*(jj >> 1)
//   + {0, 1} (lower half of the register = even kappa).
// The word keeps the code of a_jj's lower element in nibble jj and the upper one in nibble jj + 4,
// so that one LOP3 of (q >> shift) with 0x000f000f (and for fp16 also 0x00f000f0, see kernels.cuh)
// drops both codes of a register into the mantissas of a 16-bit pair.
//
// K permutation. Within a unit the mma's k index kappa (0..31) maps to the physical row
//   pi(kappa) = 16*kstep + 4*tig' + 2*half + hi,  kstep = kappa / 16, r = kappa % 16,
//   tig' = (r % 8) / 2, half = r / 8, hi = r % 2.
// Any permutation of K applied to both operands leaves the product unchanged; this one makes the
// four x values a lane needs for its B fragment of one k16 step (b0 = kappa 2tig, 2tig+1 and b1 =
// kappa 2tig+8, 2tig+9) the four consecutive elements x[m][k0 + 16*kstep + 4*tig .. + 3]: one
// 8-byte shared-memory load, no ldmatrix, and the 4 lanes of a row read 32 contiguous bytes.
//
// Groups. Rows of the packed order are grouped by g_eff consecutive rows (a multiple of 32, so a
// unit never straddles two groups): g_eff = G for grouped layers, K_pad for per-channel (G = -1),
// and for act order the rows are sorted by group, each group padded to g_eff = the largest group
// rounded up to 32 (padding rows gather x = 0; see plugin.cpp). Unit ku is in group ku*32 / g_eff.
//
// Scale records. For group g and strip s, a lane with gid needs the scales of its four columns
//   col(r) = 32*s + 16*(r >> 1) + gid + 8*(r & 1),  r = 0..3   (r = 2*nt + (jj & 1)),
// stored together: scale_rec[((g * strips + s) * 8 + gid) * 4 + r] in the activation dtype (one
// 8-byte load). Zero points likewise as bytes: zero_rec[((g * strips + s) * 8 + gid) * 4 + r] (one
// 4-byte load), absent for uint4b8.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NIBBLE_HD __host__ __device__ __forceinline__
#else
#define NIBBLE_HD inline
#endif

namespace nibble::cuda {

constexpr int kUnitK = 32;        // k per unit
constexpr int kStripN = 32;       // output features per strip (and per unit)
constexpr int kTileK = 64;        // k per pipeline stage of the matmul kernels (2 units)
constexpr int kNPad = 256;        // N is padded to a multiple of the widest block tile
constexpr int kGroupAlign = 32;   // g_eff is a multiple of this

/// Physical row (0..31) inside a unit of the mma's k index kappa (0..31).
NIBBLE_HD int unit_row_of_kappa(int kappa) {
  const int kstep = kappa >> 4, r = kappa & 15;
  const int tig = (r & 7) >> 1, half = r >> 3, hi = r & 1;
  return 16 * kstep + 4 * tig + 2 * half + hi;
}

/// Where the code of nibble j (0..7) of word w (0..3) of lane `lane` lives inside its unit:
/// row (physical k, 0..31) and column (0..31 within the strip).
NIBBLE_HD void unit_nibble_position(int lane, int w, int j, int* row, int* col) {
  const int gid = lane >> 2, tig = lane & 3;
  const int kt = w >> 1, nt = w & 1;
  const int jj = j & 3, hi = j >> 2;
  const int kappa = 16 * kt + 2 * tig + 8 * (jj >> 1) + hi;
  *row = unit_row_of_kappa(kappa);
  *col = 16 * nt + gid + 8 * (jj & 1);
}

/// 8-bit layers run as two nibble planes (plugins/common/nibble_planes.h): the low nibbles of real
/// group g are packed group 2g, its high nibbles group 2g + 1, so a unit's twin of the other plane
/// is upg units on (upg = g_eff / 32) at the same positions. The fp16 GEMV combines the two words
/// `lo` and `hi` of a lane into the codes q = 16 h + l as bytes: byte b of *even holds the code of
/// nibble position 2b, byte b of *odd that of 2b + 1 (one shift and one LOP3 each).
NIBBLE_HD void planes8_bytes(uint32_t lo, uint32_t hi, uint32_t* even, uint32_t* odd) {
  *even = (lo & 0x0f0f0f0fu) | ((hi << 4) & 0xf0f0f0f0u);
  *odd = ((lo >> 4) & 0x0f0f0f0fu) | (hi & 0xf0f0f0f0u);
}
/// PRMT selectors that make A register a_jj (nibble jj its lower element, jj + 4 its upper) from
/// those bytes and 0x64 high bytes: the fp16 pair 1024 + q (exact: q < 256). a_jj takes bytes
/// jj >> 1 and (jj >> 1) + 2 of *even (jj even) or *odd (jj odd).
NIBBLE_HD constexpr uint32_t planes8_sel(int jj) { return jj < 2 ? 0x4240u : 0x4341u; }

/// Column (0..31 within the strip) of entry r (0..3) of the scale / zero record of `gid`.
NIBBLE_HD int record_col(int gid, int r) { return 16 * (r >> 1) + gid + 8 * (r & 1); }

/// The mma output element c (0..3) of lane `lane` for n16 half `nt` and m8 tile: feature (column of
/// y) within the strip and row of y within the m8 tile.
NIBBLE_HD void acc_position(int lane, int nt, int c, int* col, int* row) {
  const int gid = lane >> 2, tig = lane & 3;
  *col = 16 * nt + gid + 8 * (c >> 1);
  *row = 2 * tig + (c & 1);
}

}  // namespace nibble::cuda
