// The warp-specialized streaming GEMV (small M), compiled for sm_90a only (cp.async.bulk and
// mbarrier transaction counts exist from sm_90; the plan declines it elsewhere).
//
// The arithmetic is the GEMV's (gemv_core.cuh, the same as gemv.cu's v1 bit for bit); what
// differs is how the weights arrive. In gemv.cu each warp loads a batch into registers and then
// computes on it, so its loads are idle while it computes (docs/cuda.md measured v1 at 1.22-1.43x
// the time of a plain read of the same bytes). Here a block has a fifth warp, the producer: one of
// its lanes keeps every compute warp's own ring of S stages full, one batch (NS strips x U units,
// NS bulk copies of U * 512 contiguous bytes, L2 evict-first) per stage, completing as transaction
// bytes on the stage's `full` mbarrier. A compute warp waits for its stage, reads its 16 bytes per
// unit from shared memory (each lane its own 16 bytes: no bank conflicts), hands the stage back
// on its `empty` mbarrier (one arrival, after __syncwarp) and computes while the producer refills
// it; the x fragments and records of the next batch are loaded while it computes this one.
//
// The producer serves the compute warps in turn, waiting for a stage's `empty` only when it is a
// full ring ahead. After the loop each compute warp writes its part of the block sum into its own
// ring (every bulk copy into it has completed: the warp waited for each), and all five warps run
// the GEMV's end (gemv_finish: block sum in warp order, splits, bias, y).
//
// Launched as a programmatic dependent (p.overlap), the producer copies weights before the wait
// for the previous kernel; every thread waits before it touches x, partials, counters or y.
#include "gemv_core.cuh"
#include "hopper_ops.cuh"
#include "kernels.h"

namespace nibble::cuda {
namespace {

constexpr int kBulkThreads = (kGemvWarps + 1) * 32;  // compute warps 0-3, producer warp 4

template <int NS, int MT8, int U, int S, bool kLean>
struct BulkTile {
  using TL = GemvTile<NS, MT8, U>;
  static constexpr int kStageBytes = NS * U * 512;                // one batch of one warp
  static constexpr int kRingBytes = S * kStageBytes;              // one compute warp's ring
  static constexpr int kSmem = kGemvWarps * kRingBytes;           // dynamic shared memory
  static constexpr int kRedStride = kRingBytes / 4;               // floats: part w in ring w
  // Blocks per SM the registers must allow: 3 (128 registers), or for the lean compute warps as
  // many as the shared memory holds (4 at S = 3: 96 registers)
  static constexpr int kMinBlocks = kLean ? (228 * 1024) / (kSmem + 2 * 1024) : 3;
  static_assert(S >= 2, "a ring of one stage cannot overlap anything");
  static_assert(TL::kRedFloats * 4 <= kRingBytes, "a warp's part of the block sum must fit its ring");
};

template <class T, int NS, int MT8, int U, int S, bool kLean>
__global__ void __launch_bounds__(kBulkThreads, (BulkTile<NS, MT8, U, S, kLean>::kMinBlocks)) w4a16_gemv_bulk_kernel(const GemmParams p) {
  using TL = GemvTile<NS, MT8, U>;
  using BT = BulkTile<NS, MT8, U, S, kLean>;
  using Warp = GemvWarp<T, NS, MT8, U>;
  constexpr int W = kGemvWarps;
  extern __shared__ __align__(128) uint8_t ring[];  // [W][S][NS][U][32 lanes][16 B]
  __shared__ __align__(8) uint64_t full[W][S], empty[W][S];
  __shared__ int s_last;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nti = blockIdx.x, z = blockIdx.y, mti = blockIdx.z, splits = gridDim.y;
  const int s0 = nti * NS;
  auto stage_of = [&](int w, int slot) { return ring + (w * S + slot) * BT::kStageBytes; };

  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 0; w < W; ++w)
#pragma unroll
      for (int s = 0; s < S; ++s) {
        mbar_init(smem_u32(&full[w][s]), 1);   // the producer's arrive.expect_tx
        mbar_init(smem_u32(&empty[w][s]), 1);  // the compute warp's hand-back
      }
    fence_mbar_init();
  }
  __syncthreads();

  if (warp == W) {
    // ---- the producer ----
    if (lane == 0) {
      const uint64_t policy = l2_policy(true);
      const char* wbase = static_cast<const char*>(p.w) + int64_t(s0) * p.ku * 512;
      int ub[W], ue[W], next[W];
#pragma unroll
      for (int w = 0; w < W; ++w) {
        gemv_warp_range<U>(p, z, splits, w, &ub[w], &ue[w]);
        next[w] = ub[w];
      }
      for (int i = 0;; ++i) {  // batch i of every compute warp, in turn
        const int slot = i % S, round = i / S;
        bool any = false;
#pragma unroll
        for (int w = 0; w < W; ++w) {
          const int u = next[w];
          if (u >= ue[w]) continue;
          any = true;
          if (round > 0) mbar_wait(smem_u32(&empty[w][slot]), (round - 1) & 1);
          const int units = min(U, ue[w] - u);
          const uint32_t bar = smem_u32(&full[w][slot]);
          mbar_arrive_expect_tx(bar, uint32_t(NS * units * 512));
#pragma unroll
          for (int ns = 0; ns < NS; ++ns)
            bulk_copy(smem_u32(stage_of(w, slot) + ns * U * 512), wbase + (int64_t(ns) * p.ku + u) * 512,
                      uint32_t(units * 512), bar, policy);
          next[w] = u + U;
        }
        if (!any) break;
      }
    }
    grid_dependency_wait();
  } else {
    // ---- a compute warp ----
    int ub, ue;
    gemv_warp_range<U>(p, z, splits, warp, &ub, &ue);
    Warp w(p, lane, s0, mti);
    typename Warp::Batch b;
    if constexpr (!kLean) {
      // The first batch's records, then (after the wait for the previous kernel) its x.
      if (ub < ue) w.records(ub, b.sr, b.zb);
      grid_dependency_wait();
      if (ub < ue) w.load_xs(ub, ue, b);
    } else {
      grid_dependency_wait();
    }
    for (int i = 0, u = ub; u < ue; ++i, u += U) {
      const int slot = i % S;
      const uint32_t empty_bar = smem_u32(&empty[warp][slot]);
      if constexpr (kLean) w.records(u, b.sr, b.zb);
      mbar_wait(smem_u32(&full[warp][slot]), (i / S) & 1);
      const uint4* st = reinterpret_cast<const uint4*>(stage_of(warp, slot)) + lane;
#pragma unroll
      for (int j = 0; j < U; ++j)
#pragma unroll
        for (int ns = 0; ns < NS; ++ns)  // units past ue were not copied: zero weights (and zero x)
          b.q[j][ns] = u + j < ue ? st[(ns * U + j) * 32] : make_uint4(0u, 0u, 0u, 0u);
      if constexpr (kLean) {
        // x after the wait, and the stage handed back only after the batch is computed, so that
        // the compiler may read each unit from shared memory where it is used (fewer registers).
        w.load_xs(u, ue, b);
        w.compute_batch(u, ue, b);
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar);
      } else {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty_bar);
        // The next batch's records and x while this one is computed.
        typename Warp::Batch nb;
        const int un = u + U;
        if (un < ue) {
          w.records(un, nb.sr, nb.zb);
          w.load_xs(un, ue, nb);
        }
        w.compute_batch(u, ue, b);
#pragma unroll
        for (int ns = 0; ns < NS; ++ns) b.sr[ns] = nb.sr[ns], b.zb[ns] = nb.zb[ns];
#pragma unroll
        for (int j = 0; j < U; ++j)
#pragma unroll
          for (int ks = 0; ks < 2; ++ks)
#pragma unroll
            for (int mt = 0; mt < MT8; ++mt) b.xb[j][ks][mt] = nb.xb[j][ks][mt];
      }
    }
    w.template to_block_sum<BT::kRedStride>(reinterpret_cast<float*>(ring), warp);
  }
  grid_launch_dependents();  // the next kernel's blocks may now take the SMs this grid leaves
  __syncthreads();
  gemv_finish<T, NS, MT8, U, kBulkThreads, BT::kRedStride>(p, reinterpret_cast<const float*>(ring), &s_last);
}

// Bulk-copy GEMV variants: id, NS, MT8, U, S (stages per compute warp's ring), lean (the stage held
// while computing, x not loaded ahead). vb4: 3 blocks per SM, 4 batches ahead of the one computed;
// vb3: 4 blocks per SM, 2 ahead.
#define NIBBLE_CUDA_GEMV_BULK_VARIANTS(X) \
  X(kVb4, 2, 1, 4, 4, false)               \
  X(kVb3, 2, 1, 4, 3, true)

template <class T, int NS, int MT8, int U, int S, bool kLean>
cudaError_t setup_bulk(KernelInfo& info, const char* name, int sms) {
  using TL = GemvTile<NS, MT8, U>;
  using BT = BulkTile<NS, MT8, U, S, kLean>;
  auto kernel = w4a16_gemv_bulk_kernel<T, NS, MT8, U, S, kLean>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, BT::kSmem);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBulkThreads, BT::kSmem);
  if (e != cudaSuccess) return e;
  info = KernelInfo{name, TL::BN, TL::BM, kBulkThreads, BT::kSmem, per_sm * sms, TL::U};
  return cudaSuccess;
}

template <class T, int NS, int MT8, int U, int S, bool kLean>
cudaError_t launch_bulk(const GemmParams& p, int splits, cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(p.n_tiles), unsigned(splits), unsigned(p.m_tiles));
  cfg.blockDim = dim3(kBulkThreads);
  cfg.dynamicSmemBytes = BulkTile<NS, MT8, U, S, kLean>::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = p.overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, w4a16_gemv_bulk_kernel<T, NS, MT8, U, S, kLean>, p);
}

}  // namespace

cudaError_t setup_gemv_bulk_kernels(KernelInfo (*info)[kNumKernels], int sms) {
  cudaError_t e = cudaSuccess;
#define NIBBLE_SETUP_BULK(id, NS, MT8, U, S, L)                                                                \
  if ((e = setup_bulk<__half, NS, MT8, U, S, L>(info[0][id], kKernelNames[id], sms)) != cudaSuccess) return e; \
  if ((e = setup_bulk<__nv_bfloat16, NS, MT8, U, S, L>(info[1][id], kKernelNames[id], sms)) != cudaSuccess) return e;
  NIBBLE_CUDA_GEMV_BULK_VARIANTS(NIBBLE_SETUP_BULK)
#undef NIBBLE_SETUP_BULK
  return cudaSuccess;
}

cudaError_t launch_gemv_bulk_kernel(KernelId id, Act act, const GemmParams& p, int splits, cudaStream_t stream) {
#define NIBBLE_LAUNCH_BULK(kid, NS, MT8, U, S, L)                                 \
  case kid:                                                                        \
    return act == Act::f16 ? launch_bulk<__half, NS, MT8, U, S, L>(p, splits, stream) \
                           : launch_bulk<__nv_bfloat16, NS, MT8, U, S, L>(p, splits, stream);
  switch (id) {
    NIBBLE_CUDA_GEMV_BULK_VARIANTS(NIBBLE_LAUNCH_BULK)
    default: return cudaErrorInvalidValue;
  }
#undef NIBBLE_LAUNCH_BULK
}

}  // namespace nibble::cuda
