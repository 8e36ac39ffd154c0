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

/// The "trick" form of a code q at row j of a line (0..7) that the fused SIMD kernels multiply x
/// by: t = a_j + q / kTrickScale with a_j = 16 for even j and 1 for odd j, built by or-ing the
/// nibble into the mantissa of 16.0f (bits 15..18) or of 1.0f (bits 19..22), two instructions
/// without a conversion (kernel_fused_impl.h). So sum x (q - z) = S (sum x t - sum a_j x) - z sum x.
constexpr float kTrickScale = 16.0f;
constexpr float trick_offset(int j) { return j % 2 ? 1.0f : 16.0f; }

/// The operands of one fused call, shared by every kernel. Rows of x are processed in blocks of
/// `rb` rows (the kernel's register blocking); within a block, x is interleaved so that the values
/// one line needs are contiguous (one base pointer, constant offsets: no address registers spill).
///   xp  f32 [blocks][lines][rb][8]: x gathered into the weights' padded row order (0 for padding
///       rows and for rows past m in the last block)
///   xs  f32 [blocks][segments][2][rb]: per segment of the weights, sum of a_j x (trick_offset)
///       and plain sum of x over its rows (the corrections of the trick and of the zero point)
///   y   f32 [m][tiles * 16]: the output, written (not accumulated) for tiles [t0, t1)
struct FusedArgs {
  const CpuWeights* w;
  const float* xp;
  const float* xs;
  int64_t m;
  int64_t rb;  ///< rows per block (IsaChoice::rows)
  float* y;
  bool exact;  ///< f32 activations: form (q - z) exactly instead of the trick
};

/// Fills xp and xs of FusedArgs from x [m, K] of `dtype`.
void gather_x(const CpuWeights& w, const void* x, int32_t dtype, int64_t m, int64_t rb, float* xp, float* xs);

/// Computes tiles [t0, t1) of y for all m rows. One function per ISA (each in its own file,
/// compiled with that ISA's flags).
using FusedKernel = void (*)(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_portable(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx2(const FusedArgs& a, int64_t t0, int64_t t1);
void fused_avx512(const FusedArgs& a, int64_t t0, int64_t t1);

/// Bytes per second that `threads` threads read from a fresh buffer of `bytes` (best of 5), with
/// the widest loads this CPU has.
double read_bandwidth(size_t bytes, int threads);
/// Reads `bytes` (a multiple of 256, 64-byte aligned) and returns a checksum so the loads stay.
uint64_t read_stream_avx512(const void* p, size_t bytes);
uint64_t read_stream_avx2(const void* p, size_t bytes);

struct IsaChoice {
  FusedKernel fn;
  const char* name;  ///< "avx512", "avx2", "portable"
  int64_t rows;      ///< rows per block of x (FusedArgs::rb)
};
/// The best kernel this CPU runs (NIBBLE_CPU_ISA=avx512|avx2|portable forces one, for tests).
IsaChoice best_fused_kernel();
/// A named kernel if this CPU can run it, else {nullptr, reason}.
IsaChoice fused_kernel_named(const char* name);

}  // namespace nibble::cpu
