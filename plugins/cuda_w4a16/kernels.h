// Host-side view of the cuda_w4a16 kernels: setup and launchers, one group per kernel file
// (gemv.cu, mma_sync.cu, wgmma.cu, prep.cu). Used by plugin.cpp; the packed layout these kernels read is
// described in layout.h, the parameter block in kernel_params.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernel_params.h"

namespace nibble::cuda {

/// Variant names, indexed by KernelId (the plan's kernel table uses the same).
inline constexpr const char* kKernelNames[kNumKernels] = {"s1", "s2",   "s4",   "s8",   "l",    "v1",   "v2",
                                                          "v4", "v2u2", "wg16", "wg32", "wg64", "wg128", "wg256"};

/// Kernel setup of each file on the current device: shared-memory limits, tiles and occupancy
/// into info[act][id] (act 0: f16, 1: bf16) for the kernels of that file. `sms` = SM count.
cudaError_t setup_gemv_kernels(KernelInfo (*info)[kNumKernels], int sms);
/// The mma.sync and wgmma files also fill info8[act][id] for their one-pass 8-bit instances
/// (launch_mma's and launch_wgmma's planes8). A tile that cannot be resident on the device gets
/// slots = 0 (the plan then declines it with the reason), not an error.
cudaError_t setup_mma_kernels(KernelInfo (*info)[kNumKernels], KernelInfo (*info8)[kNumKernels], int sms);
/// Only on compute capability 9.0 (the wgmma kernels are sm_90a code) and only in builds that
/// define NIBBLE_CUDA_WGMMA (nvcc_archs names 90).
cudaError_t setup_wgmma_kernels(KernelInfo (*info)[kNumKernels], KernelInfo (*info8)[kNumKernels], int sms);

/// The GEMV variants (kV1, kV2, kV4, kV2u2) on m_tiles x n_tiles x `splits` blocks, `splits`
/// (<= ku, <= 65535) splitting K. planes8: the layer is an 8-bit layer as nibble planes, with
/// zero points and groups of an even number of units (g_eff a multiple of 64), and both planes
/// of each code are dequantized in one pass (gemv_core.cuh); only where gemv_has_planes8. whole:
/// every batch is whole (p.ku a multiple of the variant's step_units, p.kx == p.ku * 32; else
/// cudaErrorInvalidValue), and the instance without bounds checks runs.
cudaError_t launch_gemv_kernel(KernelId id, Act act, const GemmParams& p, int splits, bool planes8, bool whole,
                               cudaStream_t stream);
/// Whether kernel `id` has the one-pass 8-bit instance for `act` (v1 and v2u2, fp16).
inline bool gemv_has_planes8(KernelId id, Act act) { return (id == kV1 || id == kV2u2) && act == Act::f16; }
/// The tiled mma.sync variants (kS1 ... kL) on `grid` blocks, 1 <= grid <= m_tiles * n_tiles * kt.
/// planes8: the layer is an 8-bit layer as nibble planes whose packed groups pair up (low plane,
/// then high; planes8_dense_pairs) with zero points and upg = g_eff / 32 < 2^15; both planes of
/// each code are dequantized in one pass (mma_sync.cu); x is gathered through low_plane_rows
/// (ku / 2 * 32 columns: p.kx, p.ldx) and p.kt counts stages of that real K: ceil(p.ku / 4).
cudaError_t launch_mma(KernelId id, Act act, const GemmParams& p, int grid, bool planes8, cudaStream_t stream);
/// The sm_90a wgmma variants (kWg16 ... kWg256) on `grid` persistent stream-K blocks. planes8: as
/// launch_mma's.
cudaError_t launch_wgmma(KernelId id, Act act, const GemmParams& p, int grid, bool planes8, cudaStream_t stream);
/// How many launches with p.split_fixup the runtime refused as cooperative launches in this
/// process (each then ran with the last-arrival fix-up instead).
int wgmma_cooperative_refusals();
/// Diagnostics of the wgmma kernel, for bench_kernels only (the plugin never calls these): the
/// shared-memory limits of the diagnostic instances, and a launch that honours p.ablate's consumer
/// modes (kWgConsumerBits: fp16 and kWg16, kWg64, kWg128 only; cudaErrorNotSupported otherwise).
cudaError_t setup_wgmma_diag();
cudaError_t launch_wgmma_diag(KernelId id, Act act, const GemmParams& p, int grid, cudaStream_t stream);

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
cudaError_t launch_dequant_dense(const void* w, const void* scale_rec, const uint8_t* zero_rec,
                                 int32_t strips, int32_t ku, uint32_t g_magic, int32_t n0, int32_t nc,
                                 Act act, void* out, cudaStream_t stream);

/// The same for an 8-bit layer's nibble planes (packed groups in pairs, low plane then high, upg
/// units each; planes8_dense_pairs holds): both planes summed into out[x_map[r]][nc] for the low
/// plane's rows r, that is the real layer's K rows (rows no low-plane row maps to are not written).
cudaError_t launch_dequant_dense_planes8(const void* w, const void* scale_rec, const uint8_t* zero_rec,
                                         const int32_t* x_map, int32_t strips, int32_t ku, int32_t upg, int32_t n0,
                                         int32_t nc, Act act, void* out, cudaStream_t stream);

/// The wgmma kernels' x operand laid out once per call (GemmParams::x_image): for m tile mt of
/// `bm` rows and k stage ks, the shared-memory x tile of that stage (wgmma_layout.h: rows of 128
/// bytes in the mma's K order and the 128-byte swizzle) at out + (mt * kt + ks) * bm * 128, zero
/// past `m` rows and `kx` columns; m_tiles * kt * bm * 128 bytes. x: act dtype [m][ldx] (ldx and kx
/// even).
cudaError_t launch_wgmma_x_image(const void* x, int64_t ldx, int64_t kx, int32_t m, int32_t bm,
                                 int32_t m_tiles, int32_t kt, void* out, cudaStream_t stream);

/// y[m][n] = bias[n] (16-bit elements, copied as they are).
cudaError_t launch_fill_bias(void* y, const void* bias, int64_t m, int64_t n, cudaStream_t stream);

/// y[r][n0 + j] = bf16(t[r][j] + bias[n0 + j]) for r < m, j < nc: an fp32 chunk of y (row pitch
/// nc) plus the bf16 bias, rounded once; y bf16 with row pitch ldy.
cudaError_t launch_bias_round_bf16(const float* t, const void* bias, int64_t m, int64_t n0, int64_t nc, int64_t ldy,
                                   void* y, cudaStream_t stream);

}  // namespace nibble::cuda
