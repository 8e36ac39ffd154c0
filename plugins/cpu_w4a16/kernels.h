// Matmul kernels of the cpu_w4a16 plugin, one implementation per instruction set, all over the
// layout of cpu_weights.h and chosen at run time by CPU features.
#pragma once

#include <cstdint>

#include "cpu_weights.h"
#include "thread_team.h"

namespace nibble::cpu {

/// Number of threads the kernels use (NIBBLE_NUM_THREADS, else the OpenMP default); settable
/// through the plugin option "num_threads".
int num_threads();
void set_num_threads(int n);

/// How a kernel wants x: the "trick" form of the codes it multiplies x by, and the type of x.
/// The fused SIMD kernels multiply x by t = a_j + q / S instead of q - z, a number they make from
/// the code in two instructions without a conversion, so that
///   sum x (q - z) = S (sum x t - sum a_j x) - z sum x.
///   kF32      x in f32; t = a_j + q / 16 with a_j = 16 for even rows j and 1 for odd ones: the
///             nibble or-ed into the mantissa of 16.0f (bits 15..18) or of 1.0f (bits 19..22)
///   kBf16     x in bf16 pairs; t = 128 + q for every row: the nibble or-ed into the bf16 128.0
///             (0x4300), whose last mantissa bit is worth 1; exact for bf16 activations
///   kBf16x2   as kBf16, with each x split into two bf16 numbers hi + lo that sum to it exactly
///             (fp16 x has 11 significant bits, bf16 8: hi takes the top 8 rounded, lo the rest)
///   kInt8     the integer dot-product forms (dot-*, kernel_fused_impl.h's kInteger): t = q itself, as the
///             unsigned bytes of a word (rows j, j + 2, j + 4, j + 6 of a line for parity j = 0, 1);
///             x of each segment as three signed 8-bit parts a + b / 2^7 + c / 2^14 in units of a
///             power of two 2^e (|a| <= 127, |b|, |c| <= 64), so that the x of a segment is held to
///             2^-21 of its largest |x| (exact for 16-bit x within 2^13 of it, bf16 within 2^14)
///   kF32Bytes an 8-bit layer's nibble rows (CpuWeights::byte_rows) read as whole bytes by the f32
///             forms for 16-bit activations: xp as kF32 (x, 16 x on the rows of each code's low and
///             high nibble), of which the kernel multiplies only the low rows' x, by t = 1 + q / 256
///             (the byte or-ed into the mantissa of 1.0f, bits 15..22): a_j = 1 on even rows and 0
///             on odd ones, S = 256. One operand per code instead of two nibbles' (kernel_avx512.cpp)
///   kInt8Bytes an 8-bit layer's nibble rows read as whole bytes by dot-avx512vnni: kInt8's words,
///             of which only parity 0 (rows 0, 2, 4, 6: the codes' low-nibble rows, whose x is x
///             itself) is filled; the unit 2^e is set by those rows alone, and X is 17 times their
///             sum, as the zero points of nibble rows are z / 17 (kernel_avx512vnni.cpp)
enum class XForm { kF32, kBf16, kBf16x2, kInt8, kF32Bytes, kInt8Bytes };
/// x as signed 8-bit parts (kInt8, kInt8Bytes).
constexpr bool int8_parts(XForm f) { return f == XForm::kInt8 || f == XForm::kInt8Bytes; }
/// x in f32 words, one per row of a line (kF32, kF32Bytes).
constexpr bool f32_words(XForm f) { return f == XForm::kF32 || f == XForm::kF32Bytes; }
/// 32-bit words of xp per line and row: 8 f32, 4 bf16 pairs, 2 x 4 pairs, or 3 parts x 2
/// parities of 4 bytes (word 2p + j: part p of rows j, j + 2, j + 4, j + 6, a byte each).
constexpr int x_words(XForm f) { return f == XForm::kBf16 ? 4 : int8_parts(f) ? 6 : 8; }
/// The parts of kInt8 relative to part 0: 2^-7 and 2^-14.
constexpr int kInt8PartShift = 7;
constexpr float trick_scale(XForm f) { return f == XForm::kF32 ? 16.0f : f == XForm::kF32Bytes ? 256.0f : 1.0f; }
/// a_j of row j (0..7) of a line. 2-bit codes (kF32 only) sit in four windows of a rotated word,
/// each worth 1/16 per step of the code: bits 15..16 of 16.0f, 17..18 of 4.0f, 19..20 of 1.0f and
/// 21..22 of 0.25f (kernel_avx512.cpp), so a_j = 16, 4, 1, 0.25 by j mod 4.
constexpr float trick_offset(XForm f, int j, int bits = 4) {
  if (f == XForm::kF32Bytes) return j % 2 ? 0.0f : 1.0f;
  if (f != XForm::kF32) return 128.0f;
  if (bits == 2) return j % 4 == 0 ? 16.0f : j % 4 == 1 ? 4.0f : j % 4 == 2 ? 1.0f : 0.25f;
  return j % 2 ? 1.0f : 16.0f;
}

/// Where gather_x puts x for a kernel form, and in which form.
///   lines  (tile_steps == 0) 32-bit [blocks][lines][rb][x_words]: the values one line of the
///          weights needs are contiguous (one base pointer, constant offsets), for the SIMD forms
///   tiles  (tile_steps > 0, kBf16 / kBf16x2) the A operands of the AMX form: per block of rb
///          rows and segment, tile_steps K steps of 32 rows (4 lines), each an A tile of rb rows
///          x 64 bytes (16 bf16 pairs, word 4i + p = pair p of the step's line i), once per part
///          (bf16 x: 1; fp16 x: its hi, then its lo parts), u32 [blocks][segments][tile_steps]
///          [parts][rb][16]; lines past the end of a segment within its last step are 0
/// How the streaming kernels (the one-tile forms and the AMX form's dequantization) prefetch the
/// weights ahead of their loads, kPrefetchLines ahead (kernel_fused_impl.h): non-temporally
/// (prefetchnta), into every cache level (prefetcht0), or not at all (the hardware prefetchers
/// alone). Each line is used once per call; which hint streams fastest depends on the CPU's
/// caches and fill buffers, so stream_prefetch() picks it per CPU (kernel_choice.cpp).
enum class Prefetch { kNta, kT0, kNone };
const char* prefetch_name(Prefetch p);

struct XLayout {
  XForm form = XForm::kF32;
  int64_t rb = 1;          ///< rows per block
  int64_t tile_steps = 0;  ///< AMX K steps per segment (amx_tile_steps), 0: the line layout
};
/// K steps of 32 rows per segment in the tile layout: enough for the longest segment.
int64_t amx_tile_steps(const CpuWeights& w);
/// 32-bit words of xp that gather_x fills for m rows.
int64_t x_buffer_words(const CpuWeights& w, const XLayout& l, int64_t m);

/// The operands of one fused call, shared by every kernel. Rows of x are processed in blocks of
/// `rb` rows (the kernel's register blocking, or an AMX tile's rows); xp is in the layout of
/// XLayout:
///   xp  32-bit: x gathered into the weights' padded row order (0 for padding rows and for rows
///       past m in the last block); per line and row, 8 f32 (kF32), or 4 u32 bf16 pairs (x_p in
///       the low half, x_p+4 in the high half: the rows of the codes' pair p, cpu_weights.h
///       kPairStride; kBf16), or the 4 pairs of the hi parts then the 4
///       of the lo parts (kBf16x2); in the tile layout, as XLayout says
///   xs  f32 [blocks][segments][2][rb]: per segment of the weights, A = sum of a_j x
///       (trick_offset) and X = plain sum of x over its rows (the corrections of the trick and of
///       the zero point); for symmetric weights (CpuWeights::tile_zeros null) A also holds the
///       zero point's term, A + (8 / S) X, and the kernels leave X alone. kInt8: A = 2^e, the
///       unit of the segment's parts, and X = the sum of the segment's x as the parts hold it, in
///       that unit (the zero point's term is the kernel's: there is no trick to correct);
///       kInt8Bytes: the same over the low-nibble rows only, X times 17 (the nibble rows' zero
///       points are z / 17)
///   y   f32 [m][ldy]: the output of segments [seg0, seg1) (a K slice; all segments unless apply
///       splits K), written (not accumulated) for tiles [t0, t1)
struct FusedArgs {
  const CpuWeights* w;
  const float* xp;
  const float* xs;
  int64_t m;
  int64_t rb;  ///< rows per block (XLayout::rb)
  float* y;
  int64_t ldy;  ///< row stride of y in floats: fused_y_stride
  bool exact;  ///< f32 activations: form (q - z) exactly instead of the trick
  XForm xform;
  int64_t seg0 = 0, seg1 = 0;  ///< the K slice: segments [seg0, seg1)
  int64_t tile_steps = 0;      ///< XLayout::tile_steps
  Prefetch prefetch = Prefetch::kNta;  ///< the stream's prefetch hint: stream_prefetch()
};

/// The row stride of the kernels' y: the tiles' 64-byte lines, an odd number of them, so that
/// rows of y fall in different cache sets (an even stride such as 32 KiB puts the rows of y that
/// one block of the GEMM form keeps in L2 into one set of the L2 and of the L1).
inline int64_t fused_y_stride(const CpuWeights& w) { return (w.tiles | 1) * kTileN; }

/// Fills xp and xs of FusedArgs from x [m, K] of `dtype`, in layout `l`. Called by every member of
/// a team (ThreadTeam::run), each doing its static share (no barrier at the end: the caller's), or
/// by one thread as a team of one.
void gather_x(const CpuWeights& w, const void* x, int32_t dtype, const XLayout& l, int64_t m, float* xp,
              float* xs, const TeamMember& me);
/// The same work in units that any member of a team of `members` may do, in any order (a dynamic
/// job's members take them from a counter): a part of a row's segments each (one part per member
/// where there are fewer rows than members), then one per padding row of the last block of rows.
int64_t gather_x_units(const CpuWeights& w, const XLayout& l, int64_t m, int members);
void gather_x_unit(const CpuWeights& w, const void* x, int32_t dtype, const XLayout& l, int64_t m,
                   int members, int64_t u, float* xp, float* xs);

/// Computes tiles [t0, t1) of y for all m rows, segments [a.seg0, a.seg1). One function per ISA
/// (each in its own file, compiled with that ISA's flags).
using FusedKernel = void (*)(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_portable(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx2(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx512(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx512bf16(const FusedArgs& a, int64_t t0, int64_t t1);
/// The GEMM form of the avx512bf16 kernel for many rows (4 tiles x kGemmRows rows of accumulators;
/// FusedArgs::rb = kGemmRows).
constexpr int kGemmRows = 6;
void gemm_avx512bf16(const FusedArgs& a, int64_t t0, int64_t t1);
/// The GEMM form of the AVX2 kernel for many rows (one tile x kGemmRowsAvx2 rows of accumulators:
/// FusedArgs::rb), f32 x as the one-tile form takes it (kernel_gemm_impl.h).
constexpr int kGemmRowsAvx2 = 6;
void gemm_avx2(const FusedArgs& a, int64_t t0, int64_t t1);
/// The integer dot-product forms (kernel_fused_impl.h, T::kInteger), x in kInt8 (16-bit activations only): with
/// AVX-512 VNNI (vpdpbusd, 64 products per instruction) up to kDotRows rows per block, and with
/// AVX2 (vpmaddubsw + vpmaddwd) one row per block.
constexpr int kDotRows = 4;
void dot_avx512vnni(const FusedArgs& a, int64_t t0, int64_t t1);
void dot_avx2(const FusedArgs& a, int64_t t0, int64_t t1);
/// The AMX-BF16 form (kernel_amx.cpp): x in the tile layout, rb = min(16, m); the calling thread
/// must have AMX permission (amx_unavailable() returned nullptr).
void gemm_amx(const FusedArgs& a, int64_t t0, int64_t t1);

/// Bytes per second that `threads` members of the plugin's team read from a fresh buffer of
/// `bytes` (best of 5), each its own range, first touched by the member that reads it, with the
/// widest loads this CPU has.
double read_bandwidth(size_t bytes, int threads);
/// Reads `bytes` (a multiple of 256, 64-byte aligned) and returns a checksum so the loads stay.
uint64_t read_stream_avx512(const void* p, size_t bytes);
uint64_t read_stream_avx2(const void* p, size_t bytes);

}  // namespace nibble::cpu
