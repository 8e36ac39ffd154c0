// Matmul kernels of the cpu_w4a16 plugin, one implementation per instruction set, all over the
// layout of cpu_weights.h and chosen at run time by CPU features.
#pragma once

#include <cstdint>

#include "cpu_weights.h"

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
enum class XForm { kF32, kBf16, kBf16x2 };
/// 32-bit words of xp per line and row: 8 f32, 4 bf16 pairs, or 2 x 4 pairs.
constexpr int x_words(XForm f) { return f == XForm::kBf16 ? 4 : 8; }
constexpr float trick_scale(XForm f) { return f == XForm::kF32 ? 16.0f : 1.0f; }
constexpr float trick_offset(XForm f, int j) { return f != XForm::kF32 ? 128.0f : j % 2 ? 1.0f : 16.0f; }

/// The operands of one fused call, shared by every kernel. Rows of x are processed in blocks of
/// `rb` rows (the kernel's register blocking); within a block, x is interleaved so that the values
/// one line needs are contiguous (one base pointer, constant offsets: no address registers spill).
///   xp  32-bit [blocks][lines][rb][x_words]: x gathered into the weights' padded row order (0
///       for padding rows and for rows past m in the last block); per line and row, 8 f32 (kF32),
///       or 4 u32 bf16 pairs (x_2p in the low half, x_2p+1 in the high half; kBf16), or the 4
///       pairs of the hi parts then the 4 of the lo parts (kBf16x2)
///   xs  f32 [blocks][segments][2][rb]: per segment of the weights, A = sum of a_j x
///       (trick_offset) and X = plain sum of x over its rows (the corrections of the trick and of
///       the zero point); for symmetric weights (CpuWeights::tile_zeros null) A also holds the
///       zero point's term, A + (8 / S) X, and the kernels leave X alone
///   y   f32 [m][ldy]: the output, written (not accumulated) for tiles [t0, t1)
struct FusedArgs {
  const CpuWeights* w;
  const float* xp;
  const float* xs;
  int64_t m;
  int64_t rb;  ///< rows per block (IsaChoice::rows)
  float* y;
  int64_t ldy;  ///< row stride of y in floats: fused_y_stride
  bool exact;  ///< f32 activations: form (q - z) exactly instead of the trick
  XForm xform;
};

/// The row stride of the kernels' y: the tiles' 64-byte lines, an odd number of them, so that
/// rows of y fall in different cache sets (an even stride such as 32 KiB puts the rows of y that
/// one block of the GEMM form keeps in L2 into one set of the L2 and of the L1).
inline int64_t fused_y_stride(const CpuWeights& w) { return (w.tiles | 1) * kTileN; }

/// Fills xp and xs of FusedArgs from x [m, K] of `dtype`, in form `f`. Called by every thread of
/// an OpenMP team, which share the work (an `omp for`, ending in the team's barrier), or outside a
/// parallel region by one thread.
void gather_x(const CpuWeights& w, const void* x, int32_t dtype, XForm f, int64_t m, int64_t rb, float* xp, float* xs);

/// Computes tiles [t0, t1) of y for all m rows. One function per ISA (each in its own file,
/// compiled with that ISA's flags).
using FusedKernel = void (*)(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_portable(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx2(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx512(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx512bf16(const FusedArgs& a, int64_t t0, int64_t t1);
/// The GEMM form of the avx512bf16 kernel for many rows (4 tiles x kGemmRows rows of accumulators;
/// FusedArgs::rb = kGemmRows).
constexpr int kGemmRows = 6;
void gemm_avx512bf16(const FusedArgs& a, int64_t t0, int64_t t1);

/// Bytes per second that `threads` threads read from a fresh buffer of `bytes` (best of 5), with
/// the widest loads this CPU has.
double read_bandwidth(size_t bytes, int threads);
/// Reads `bytes` (a multiple of 256, 64-byte aligned) and returns a checksum so the loads stay.
uint64_t read_stream_avx512(const void* p, size_t bytes);
uint64_t read_stream_avx2(const void* p, size_t bytes);

struct IsaChoice {
  FusedKernel fn;
  const char* name;  ///< "avx512bf16", "avx512", "avx2", "portable"
  int64_t rows;      ///< rows per block of x (FusedArgs::rb)
  CodeOrder order = CodeOrder::kRows;  ///< the order of codes it reads
  XForm xform = XForm::kF32;           ///< the form of x it reads
  FusedKernel gemm = nullptr;          ///< a GEMM form for m >= gemm_min_m (same order and form)
  int64_t gemm_rows = 0;               ///< its rows per block of x
  int64_t gemm_min_m = 0;
};
/// The best kernel this CPU runs for activations of `act_dtype` (NIBBLE_CPU_ISA=avx512bf16|
/// avx512|avx2|portable forces one, for tests, where this CPU and the activations allow it).
/// avx512bf16 takes bf16 and fp16 activations; f32 activations (exact products) the others.
IsaChoice best_fused_kernel(int32_t act_dtype);
/// A named kernel if this CPU can run it for `act_dtype`, else {nullptr, reason}.
IsaChoice fused_kernel_named(const char* name, int32_t act_dtype);

}  // namespace nibble::cpu
