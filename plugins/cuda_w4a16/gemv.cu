// The streaming GEMV (small M) on mma.sync, sm_80 and newer. The packed layout it reads is
// described in layout.h, the arithmetic of a warp in gemv_core.cuh.
//
// Nothing goes through shared memory on the way in: each warp streams its own contiguous K range
// of NS strips with 16-byte non-caching loads straight into registers (U units of every strip in
// flight), with its x fragments and records, before it computes on them. This keeps the
// instruction count per weight far below a shared-memory pipeline's, which is what bounds small M
// (docs/cuda.md has the measurements, and the staged alternatives that measured slower).
#include "gemv_core.cuh"
#include "kernels.h"

namespace nibble::cuda {
namespace {

// kP8: an 8-bit layer's two nibble planes in one pass (fp16 only; GemvWarp::records8 and
// compute_batch8), the same packed data as every plane on its own. kWhole: every batch of every
// warp is whole (x covers all ku * 32 columns and ku is a multiple of U, which launch_gemv checks),
// so that no load needs a bounds check: one copy of the loads, whatever the rows of x.
template <class T, int NS, int MT8, int U_, bool kP8, bool kWhole>
__global__ void __launch_bounds__(kGemvWarps * 32, (GemvTile<NS, MT8, U_>::kMinBlocks)) w4a16_gemv_kernel(const GemmParams p) {
  using TL = GemvTile<NS, MT8, U_>;
  using Warp = GemvWarp<T, NS, MT8, U_>;
  constexpr int U = TL::U;
  __shared__ float red[TL::kWarps * TL::kRedFloats];
  __shared__ int s_last;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const GemvBlock blk(p);
  const int nti = blk.nti, z = blk.z, mti = blk.mti, splits = blk.splits;
  const int s0 = nti * NS;
  const uint64_t policy = l2_policy(true);
  const uint4* wp = static_cast<const uint4*>(p.w) + int64_t(s0) * p.ku * 32 + lane;
  Warp w(p, lane, s0, mti);

  const int64_t strip_pitch = int64_t(p.ku) * 32;  // uint4 from one strip to the next

  if constexpr (kP8) {
    // Up units of each plane per batch, the same bytes as U units of one. Warps split the real
    // layer's units (half of ku); real unit r of real group g is the low plane's unit
    // lo = r + g * upg, its high twin lo + upg. upg (even) comes back from g_magic =
    // floor(2^32 / upg) + 1 exactly (upg < 2^16). Every batch is whole: ku / 2 is a multiple of Up.
    constexpr int Up = U / 2;
    const int upg = int((uint64_t(1) << 32) / (p.g_magic - 1));
    int rb, re;
    gemv_warp_range<Up>(p.ku >> 1, z, splits, warp, &rb, &re);
    for (int r = rb; r < re; r += Up) {
      const int lo = r + unit_group(r, p.g_magic) * upg;
      typename Warp::Batch b;
      const uint4* wl = wp + int64_t(lo) * 32;
      const uint4* wh = wl + int64_t(upg) * 32;
#pragma unroll
      for (int j = 0; j < Up; ++j)
#pragma unroll
        for (int ns = 0; ns < NS; ++ns) {
          b.q[j][ns] = ld_stream(wl + ns * strip_pitch + j * 32, policy);
          b.q[Up + j][ns] = ld_stream(wh + ns * strip_pitch + j * 32, policy);
        }
      w.records8(lo, b.sr, b.zb);
      if (r == rb) grid_dependency_wait();
      w.template load_xs_whole<Up>(lo, b);
      w.template compute_batch8<Up>(b);
    }
    if (rb >= re) grid_dependency_wait();
  } else {
  int ub, ue;
  gemv_warp_range<U>(p.ku, z, splits, warp, &ub, &ue);
  // The weights and records of a batch (read-only since process_weights); its x fragments are
  // loaded after them (Warp::load_xs). A whole batch (U units before ue) loads with constant
  // offsets from one address and no checks.
  auto load_weights = [&](int u, int ue, typename Warp::Batch& b) {
    const uint4* wu = wp + int64_t(u) * 32;
    if (kWhole || (MT8 == 1 && u + U <= ue)) {  // (gemv_core.cuh: GemvWarp::whole says why MT8 == 1)
#pragma unroll
      for (int j = 0; j < U; ++j)
#pragma unroll
        for (int ns = 0; ns < NS; ++ns) b.q[j][ns] = ld_stream(wu + ns * strip_pitch + j * 32, policy);
    } else {
#pragma unroll
      for (int j = 0; j < U; ++j)
#pragma unroll
        for (int ns = 0; ns < NS; ++ns)
          b.q[j][ns] = u + j < ue ? ld_stream(wu + ns * strip_pitch + j * 32, policy) : make_uint4(0u, 0u, 0u, 0u);
    }
    w.records(u, b.sr, b.zb);
  };

  // One batch at a time (double-buffering two batches costs twice the registers and so half the
  // warps per SM; docs/cuda.md has the comparison). The last batch of the K range is partial only when ku is not a multiple
  // of U: its missing units load as zero weights and zero x, which add exactly 0.
  //
  // Launched as a programmatic dependent (p.overlap), this kernel may start while the previous one
  // in the stream is finishing: the first batch's weights are requested before the wait, and
  // only x, the partials, the counters and y (which the previous kernel may write or read) are
  // touched after it.
  //
  // With p.prefetch = D, each warp asks L2 for its weights D batches ahead of its loads (a batch is
  // NS runs of U * 512 contiguous bytes: one 128-byte line per lane for NS = 2, U = 4), so that only
  // the first D batches of a warp wait on memory and the rest come from L2: bytes in flight that
  // hold no registers.
  const int D = p.prefetch;
  const char* wl = static_cast<const char*>(p.w) + int64_t(s0) * p.ku * 512;
  auto prefetch_batch = [&](int u) {
    constexpr int kLines = NS * U * 4;  // 128-byte lines of a batch
#pragma unroll
    for (int l = lane; l < kLines; l += 32) {
      const int ns = l / (U * 4), j = l % (U * 4);
      if (u + j / 4 < ue) prefetch_l2(wl + (int64_t(ns) * p.ku + u) * 512 + j * 128);
    }
  };
  for (int d = 1; d < D; ++d) prefetch_batch(ub + d * U);
  for (int u = ub; u < ue; u += U) {
    typename Warp::Batch b;
    if (D > 0) prefetch_batch(u + D * U);
    load_weights(u, ue, b);
    if (u == ub) grid_dependency_wait();
    if constexpr (kWhole)
      w.template load_xs_whole<U>(u, b);
    else
      w.load_xs(u, ue, b);
    w.compute_batch(u, ue, b);
  }
  if (ub >= ue) grid_dependency_wait();
  }
  grid_launch_dependents();  // the next kernel's blocks may now take the SMs this grid leaves

  // ---- sum the warps, then the splits; bias; store ----
  w.template to_block_sum<TL::kRedFloats>(red, warp);
  __syncthreads();
  gemv_finish<T, NS, MT8, U, TL::kThreads, TL::kRedFloats>(p, red, &s_last);
}

// GEMV variants:            id  NS MT8 U (units per strip per batch: 8 x 16 B per lane in flight,
// 4 x 16 B with 32 rows or for v2u2, which trades bytes in flight for registers). Variants of 4
// strips (128 features) per warp, whose x fragments serve twice the weights, measured slower at
// every point (docs/cuda.md, "Wider GEMV warps").
#define NIBBLE_CUDA_GEMV_VARIANTS(X) \
  X(kV1, 2, 1, 4)                    \
  X(kV2, 2, 2, 4)                    \
  X(kV4, 2, 4, 2)                    \
  X(kV2u2, 2, 2, 2)

// The one-pass 8-bit instance exists for fp16 in v1 and v2u2 (kernels.h: gemv_has_planes8).
template <class T, int MT8, int U>
constexpr bool kHasP8 = std::is_same_v<T, __half> && (MT8 == 1 || (MT8 == 2 && U == 2));

template <class T, int NS, int MT8, int U>
cudaError_t setup_gemv(KernelInfo& info, const char* name, int sms) {
  using TL = GemvTile<NS, MT8, U>;
  auto kernel = w4a16_gemv_kernel<T, NS, MT8, U, false, true>;  // the usual instance (launch_gemv)
  int per_sm = 0;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, TL::kThreads, 0);
  if (e != cudaSuccess) return e;
  info = KernelInfo{name, TL::BN, TL::BM, TL::kThreads, 0, per_sm * sms, TL::U};
  return cudaSuccess;
}

template <class T, int NS, int MT8, int U>
cudaError_t launch_gemv(const GemmParams& p, int splits, bool planes8, bool whole, cudaStream_t stream) {
  using TL = GemvTile<NS, MT8, U>;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(p.m_tiles) * unsigned(p.n_tiles), unsigned(splits), 1u);  // GemvBlock
  cfg.blockDim = dim3(TL::kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = p.overlap ? 1 : 0;
  if constexpr (kHasP8<T, MT8, U>)
    if (planes8) return cudaLaunchKernelEx(&cfg, w4a16_gemv_kernel<T, NS, MT8, U, true, true>, p);
  // Every warp range is whole batches when ku is (gemv_warp_range), and a batch's x is inside x's
  // columns when they cover K_pad.
  if (whole) {
    if (p.ku % U != 0 || p.kx != int64_t(p.ku) * kUnitK) return cudaErrorInvalidValue;
    return cudaLaunchKernelEx(&cfg, w4a16_gemv_kernel<T, NS, MT8, U, false, true>, p);
  }
  return cudaLaunchKernelEx(&cfg, w4a16_gemv_kernel<T, NS, MT8, U, false, false>, p);
}


}  // namespace

cudaError_t setup_gemv_kernels(KernelInfo (*info)[kNumKernels], int sms) {
  cudaError_t e = cudaSuccess;
#define NIBBLE_SETUP_GEMV(id, NS, MT8, U)                                                              \
  if ((e = setup_gemv<__half, NS, MT8, U>(info[0][id], kKernelNames[id], sms)) != cudaSuccess) return e; \
  if ((e = setup_gemv<__nv_bfloat16, NS, MT8, U>(info[1][id], kKernelNames[id], sms)) != cudaSuccess) return e;
  NIBBLE_CUDA_GEMV_VARIANTS(NIBBLE_SETUP_GEMV)
#undef NIBBLE_SETUP_GEMV
  return cudaSuccess;
}

cudaError_t launch_gemv_kernel(KernelId id, Act act, const GemmParams& p, int splits, bool planes8, bool whole,
                               cudaStream_t stream) {
  if (planes8 && !gemv_has_planes8(id, act)) return cudaErrorInvalidValue;
#define NIBBLE_LAUNCH_GEMV(kid, NS, MT8, U)                                           \
  case kid:                                                                              \
    return act == Act::f16 ? launch_gemv<__half, NS, MT8, U>(p, splits, planes8, whole, stream) \
                           : launch_gemv<__nv_bfloat16, NS, MT8, U>(p, splits, planes8, whole, stream);
  switch (id) {
    NIBBLE_CUDA_GEMV_VARIANTS(NIBBLE_LAUNCH_GEMV)
    default: return cudaErrorInvalidValue;
  }
#undef NIBBLE_LAUNCH_GEMV
}

}  // namespace nibble::cuda
