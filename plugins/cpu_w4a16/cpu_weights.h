// The cpu_w4a16 weight layout, made by process_weights from the canonical form.
#pragma once

#include <cstdint>
#include <new>
#include <vector>

#include "nibble/plugin_abi.h"

namespace nibble::cpu {

/// Memory for streamed data: 64-byte aligned, and from 2 MiB on, 2 MiB aligned and backed by
/// transparent huge pages where the kernel allows it (madvise), so that a stream of weights walks
/// one page table entry per 2 MiB instead of per 4 KiB.
void* stream_alloc(std::size_t bytes);
void stream_free(void* p, std::size_t bytes) noexcept;

/// A std::allocator over stream_alloc.
template <class T>
struct CacheAligned {
  using value_type = T;
  CacheAligned() = default;
  template <class U>
  CacheAligned(const CacheAligned<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(stream_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { stream_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const CacheAligned<U>&) const noexcept { return true; }
};

/// How scales are stored: as the checkpoint gave them where that is 16-bit (f16 or bf16: half the
/// bytes of f32 in the weight stream, converted in registers), else as f32.
enum class ScaleType { kF32, kF16, kBf16 };

/// The zero point of uint4b8 (symmetric) codes.
constexpr float kSymmetricZero = 8.0f;

/// Columns per tile: one 512-bit register of fp32 lanes.
constexpr int64_t kTileN = 16;
/// Longest run of lines the fused kernels sum before applying the group's correction.
constexpr int64_t kSegmentLines = 16;

/// The pair of rows of a line that a bf16 kernel multiplies as one bf16 pair (vdpbf16ps, the AMX
/// form's B rows): rows p and p + 4 (p = 0..3). In a word of 4-bit codes (row j at bits 4j) they
/// sit at bits 4p and 16 + 4p, so one shift and one vpternlogd turn pair p of all 16 columns into
/// two bf16 numbers 128 + q per lane; gather_x pairs x the same way (kernels.h). So every kernel,
/// f32 or bf16, reads the canonical order of the codes.
constexpr int kPairStride = 4;

/// Rows of a padded group are a multiple of this for codes of `bits` (4 or 2): whole lines of 8
/// rows, and for 2-bit codes whole words of 16 rows (two lines).
constexpr int64_t group_row_quantum(int bits) { return bits == 2 ? 16 : 8; }

/// Prepared weights of one layer, laid out for the kernels.
///
/// Rows. K is reordered so that every group is one contiguous run of rows (act order is resolved
/// here, once, by sorting rows by g_idx), and every group is padded with zero rows to a multiple of
/// 8, so that a "line" of 8 rows never straddles two groups. `row_src[r]` is the canonical row of
/// padded row r, or -1 for padding (apply() gathers x through it, with 0 for padding).
///
/// Codes. Tile-major: tile t (columns 16t .. 16t+15) is `lines` consecutive 64-byte lines, line l
/// holding 16 u32 words, word c = the 8 codes of rows 8l .. 8l+7 of column 16t + c (row 8l + j
/// at bits 4j, the canonical packing). A tile is one contiguous stream, which hardware prefetchers follow. N is padded to a
/// multiple of 16 with zero codes and zero scales.
///
/// 2-bit codes (code_bits = 2): the codes of lines 2L and 2L + 1 share one
/// 64-byte line of words, word c holding the 16 codes of rows 16L .. 16L+15 of column 16t + c,
/// row 16L + i at bits 2i (the canonical 2-bit packing, so the layer's own bytes stream); groups
/// are padded to 16 rows, so every segment starts at an even line. Rows, lines of x, segments and
/// groups are as for 4-bit codes.
///
/// Segments. The fused kernels sum each group in runs of at most kSegmentLines lines (128 rows),
/// each with its own zero-point correction, so that fp32 accumulation error does not grow with the
/// group size (G = -1 is one group of K rows). `seg_line[s]` is the first line of segment s,
/// `seg_group[s]` its group; groups with no rows (possible with g_idx) have no segment.
///
/// Scales and zero points. f32 [tiles][groups][16], also tile-major.
struct CpuWeights {
  int64_t k = 0, n = 0, groups = 0;
  int64_t tiles = 0, lines = 0;     ///< tiles = ceil(N/16); lines = padded rows / 8
  int32_t act_dtype = NIBBLE_DTYPE_F16;
  int code_bits = 4;                ///< 4, or 2 (native 2-bit codes: see Codes above)
  std::vector<int64_t> group_line;  ///< [groups + 1] first line of each group
  std::vector<int64_t> seg_line;    ///< [segments + 1] first line of each segment
  std::vector<int32_t> seg_group;   ///< [segments] group of each segment
  std::vector<int32_t> row_src;     ///< [lines * 8] canonical row of each padded row, -1 = padding
  bool identity_rows = true;        ///< row_src[r] == r for r < K (no act order, no padding inside)
  std::vector<uint32_t, CacheAligned<uint32_t>> q;  ///< [tiles][lines][16], each line 64-byte aligned
  ScaleType scale_type = ScaleType::kF32;
  std::vector<float> scales;        ///< [tiles][groups][16] for kF32, else empty
  std::vector<uint16_t> scales16;   ///< [tiles][groups][16] for kF16 / kBf16, else empty
  std::vector<float> zeros;         ///< [tiles][groups][16]; empty for uint4b8 (zero point 8: not streamed)
  std::vector<float> bias;          ///< [N] or empty
  /// The zero point of every code where tile_zeros() is null: 8 for uint4b8, 128/17 for an
  /// 8-bit layer's nibble rows (prepare_cpu_weights_8bit).
  float sym_zero = kSymmetricZero;
  /// [lines * 8] factor applied to x on each padded row as it is gathered, or empty (all 1).
  std::vector<float> row_mult;
  /// An 8-bit layer's nibble rows (prepare_cpu_weights_8bit): byte i of a word is also the 8-bit
  /// code of the real row whose low nibble is row 2i, which the forms that read bytes
  /// (KernelForm::bytes, XForm::kF32Bytes / kInt8Bytes) multiply as one code.
  bool byte_rows = false;

  int64_t segments() const { return int64_t(seg_group.size()); }
  /// u32 words of codes per tile.
  int64_t tile_words() const { return lines * code_bits / 4 * kTileN; }
  const uint32_t* tile_codes(int64_t t) const { return q.data() + t * tile_words(); }
  /// Offset in words, within a tile, of the 16 words that hold line l's codes.
  int64_t line_offset(int64_t l) const { return (l * code_bits >> 2) * kTileN; }
  /// Bit offset of row j (0..7) of line l within its word.
  int row_shift(int64_t l, int j) const { return code_bits == 2 ? 2 * (8 * int(l & 1) + j) : 4 * j; }
  /// The 16 scales of tile t in group g: f32, or 16-bit of scale_type.
  const void* group_scales(int64_t t, int64_t g) const {
    const int64_t o = (t * groups + g) * kTileN;
    return scale_type == ScaleType::kF32 ? static_cast<const void*>(scales.data() + o) : scales16.data() + o;
  }
  /// Scale of column c (0..15) of tile t in group g.
  float scale(int64_t t, int64_t g, int64_t c) const;
  /// Zero points of tile t, or nullptr where every zero point is kSymmetricZero.
  const float* tile_zeros(int64_t t) const { return zeros.empty() ? nullptr : zeros.data() + t * groups * kTileN; }
  /// Code of row j (0..7) of line l, column c (0..15) of tile t.
  int code_at(int64_t t, int64_t l, int64_t c, int j) const {
    return int((tile_codes(t)[line_offset(l) + c] >> row_shift(l, j)) & ((1u << code_bits) - 1));
  }
};

/// Builds CpuWeights from the canonical form (host memory) of a 4-bit layer, or of a 2-bit one
/// (native 2-bit codes). Throws std::invalid_argument with a message naming the tensor on
/// inconsistent input.
CpuWeights prepare_cpu_weights(const nibble_linear_spec& spec, const nibble_canonical_weights& w);

/// An 8-bit layer as nibble rows of the 4-bit layout: the canonical 8-bit words are read as 4-bit
/// words of 2K rows, row 2k the low nibble of code k and row 2k + 1 the high one. With x doubled
/// into those rows as (x_k, 16 x_k) (row_mult) and every zero point divided by 17,
///   sum over the pair of x' (nibble - z / 17) = x (lo + 16 hi) - 17 x z / 17 = x (q - z),
/// so each group keeps its one scale and, for uint8b128, its zero point stays a constant
/// (sym_zero = 128 / 17): the kernels stream the layer's own bytes and nothing more. Throws
/// std::invalid_argument naming the tensor on inconsistent input.
CpuWeights prepare_cpu_weights_8bit(const nibble_linear_spec& spec, const nibble_canonical_weights& w);

/// Makes `w`, prepared from a layer's nibble planes (plugins/common/nibble_planes.h), read the real
/// layer's x: row_src maps padded rows to real rows through `x_rows` (virtual row -> real row,
/// -1 = zero; empty = the same rows), and k becomes the real K.
void read_x_through(CpuWeights& w, const std::vector<int32_t>& x_rows, int64_t real_k);

/// Dequantizes rows [line0*8, line1*8) x columns of tile t into dst [rows][16] (f32), for the
/// oneDNN path and for tests of the layout.
void dequantize_tile(const CpuWeights& w, int64_t t, int64_t line0, int64_t line1, float* dst);

}  // namespace nibble::cpu
