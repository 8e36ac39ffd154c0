// Host-side view of the cuda_w4a16 kernels (kernels.cu): parameter blocks and launchers. Used by
// plugin.cpp and bench_kernels.cu; the packed layout these kernels read is described in layout.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace nibble::cuda {

/// Activation (and prepared scale) dtype of a kernel: the nibble_dtype values F16 and BF16.
enum class Act : int32_t { f16 = 1, bf16 = 2 };

/// The matmul kernel variants. All share one source (kernels.cu, w4a16_gemm_kernel) and differ in
/// block tile: BN output features x BM rows of x per block, k = 64 per pipeline stage.
///   s1: BN 128, BM   8, 4 warps   (M <= 8: memory bound; one m8 tile per warp)
///   s2: BN 128, BM  16, 4 warps   (M <= 16)
///   s4: BN 128, BM  32, 4 warps   (M <= 32)
///   s8: BN 128, BM  64, 4 warps   (M <= 64)
///   l:  BN 256, BM 128, 8 warps   (large M: 64 x 64 warp tiles, tensor-core bound)
/// and the streaming GEMV kernel (kernels.cu, w4a16_gemv_kernel): no shared-memory pipeline, each
/// warp streams its own contiguous K range of 2 strips straight from global memory into
/// registers, 4 warps of a block split the block's K range and sum in shared memory, blocks split
/// K further (grid.y) and the last one to arrive sums their fp32 partials in order.
///   v1: BN 64, BM 8     v2: BN 64, BM 16     v4: BN 64, BM 32
///   v2u2: v2 with half the weights in flight per warp (fewer registers, more warps per SM)
enum KernelId : int32_t { kS1 = 0, kS2, kS4, kS8, kL, kV1, kV2, kV4, kV2u2, kNumKernels };
inline constexpr const char* kKernelNames[kNumKernels] = {"s1", "s2", "s4", "s8", "l", "v1", "v2", "v4", "v2u2"};
/// True for the GEMV variants: `grid` of launch_gemm is then the number of K splits.
constexpr bool is_gemv(int id) { return id >= kV1 && id < kNumKernels; }

struct KernelInfo {
  const char* name;
  int32_t bn, bm;       // block tile
  int32_t threads;      // threads per block
  int32_t smem_bytes;   // dynamic shared memory per block
  int32_t slots;        // resident blocks on the whole device (filled in by kernel_setup)
  int32_t step_units;   // k-units per pipeline stage (tiled) or per load batch of a warp (GEMV)
};

/// Sets the shared-memory limits of every variant on the current device and fills `info`
/// [2][kNumKernels] (index 0: f16, 1: bf16) with tiles and occupancy. Call once per device.
cudaError_t kernel_setup(KernelInfo info[2][kNumKernels]);

/// Arguments of one matmul launch. Pointers are device memory.
struct GemmParams {
  const void* w;            // packed units, uint4 [strips][ku][32] (layout.h)
  const void* scale_rec;    // act dtype [groups_pad][strips][8][4] (layout.h)
  const uint8_t* zero_rec;  // u8 [groups_pad][strips][8][4], or null for uint4b8 (zero 8)
  const void* x;            // act dtype [m][ldx]; columns >= kx read as 0; rows 16-byte aligned
  const void* bias;         // act dtype [n], or null
  void* y;                  // act dtype [m][n]
  float* partials;          // stream-K partial tiles: [2 * grid][bm * bn] fp32; GEMV: [splits][m][strips * 32]
  int32_t* counters;        // [m_tiles * n_tiles] arrival counters: zero on entry, left zero
  int64_t ldx;              // row pitch of x in elements (multiple of 8)
  int64_t kx;               // valid columns of x (multiple of 8); <= ku * 32
  int32_t m, n;             // rows of x and y; output features written (n <= strips * 32)
  int32_t strips;           // N_pad / 32
  int32_t ku;               // K_pad / 32 (units along K)
  int32_t kt;               // K_pad / 64 (pipeline stages along K)
  uint32_t g_magic;         // group of k-unit u = u / upg (upg = g_eff / 32 units per group) computed
                            // as __umulhi(u, g_magic) with g_magic = floor(2^32 / upg) + 1, exact for
                            // u * upg < 2^32 (the host checks); g_magic = 0 means upg = 1 (group = u)
  int32_t m_tiles, n_tiles; // ceil(m / bm), N_pad / bn
  int32_t evict_first;      // 1: stream the weights with an L2 evict-first policy (read once)
  int32_t overlap;          // GEMV on sm_90+: launch as a programmatic dependent of the previous
                            // kernel in the stream (PDL), so that its launch and first weight loads
                            // overlap that kernel's tail (see w4a16_gemv_kernel)
};

/// y = x * W (+ bias) with variant `id` on `grid` blocks (1 <= grid <= m_tiles * n_tiles * kt); for
/// the GEMV variants on m_tiles x n_tiles x `grid` blocks, `grid` (<= ku, <= 65535) splitting K.
cudaError_t launch_gemm(KernelId id, Act act, const GemmParams& p, int grid, cudaStream_t stream);

/// process_weights: canonical qweight u32 [ceil(k/8)][n] (optionally rows gathered through
/// perm[k_pad], -1 = zero row) -> packed units uint4 [strips][ku][32].
cudaError_t launch_repack_weights(const uint32_t* qweight, int64_t k, int64_t n, const int32_t* perm,
                                  int32_t strips, int32_t ku, void* out, cudaStream_t stream);

/// process_weights: canonical scales [groups][n] (scale_dtype: nibble_dtype F16/BF16/F32) and zeros
/// u8 [groups][n] (or null) -> records (layout.h). gmap[groups_pad] names the canonical group of each
/// packed group (-1: padding, scale 0). zero_rec may be null (uint4b8).
cudaError_t launch_repack_records(const void* scales, int32_t scale_dtype, const uint8_t* zeros, int64_t n,
                                  const int32_t* gmap, int32_t groups_pad, int32_t strips, Act act,
                                  void* scale_rec, uint8_t* zero_rec, cudaStream_t stream);

/// apply: x'[m][kp] = x[m][perm[j]] (or x[m][j] without perm), 0 where the source is -1 or >= k.
/// Used for act order and for x whose rows are not 16-byte aligned.
cudaError_t launch_prep_x(const void* x, int64_t m, int64_t k, const int32_t* perm, int64_t kp, void* out,
                          cudaStream_t stream);

/// Large-M alternative: dense act-dtype W[kp][n_pad] (row-major, rows in packed order) from the
/// packed weights, columns [n0, n0 + nc) only (n0 and nc multiples of 256), written to out[kp][nc].
cudaError_t launch_dequant_dense(const void* w, const void* scale_rec, const uint8_t* zero_rec, int32_t strips,
                                 int32_t ku, uint32_t g_magic, int32_t n0, int32_t nc, Act act, void* out,
                                 cudaStream_t stream);

/// y[m][n] += bias[n] (act dtype).
cudaError_t launch_add_bias(void* y, const void* bias, int64_t m, int64_t n, Act act, cudaStream_t stream);

}  // namespace nibble::cuda
