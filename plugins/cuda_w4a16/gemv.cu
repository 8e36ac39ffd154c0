// The streaming GEMV (small M) on mma.sync, sm_80 and newer. The packed layout it reads is
// described in layout.h.
//
// Nothing goes through shared memory on the way in: each warp streams its own contiguous K range
// of NS strips with 16-byte non-caching loads straight into registers (U units of every strip in
// flight), reads the scale and zero records and its x fragments through the read-only cache,
// dequantizes exactly as the tiled kernel does (same Ops, same rounding) and issues the same mma.
// The 4 warps of a block split the block's K range and sum through shared memory in warp order;
// blocks along grid.y split K further and the last to arrive sums their fp32 partials in split
// order (deterministic). This keeps the instruction count per weight far below a shared-memory
// pipeline's, which is what bounds small M (docs/cuda.md has the measurements).
#include <type_traits>

#include "device_ops.cuh"
#include "kernels.h"

namespace nibble::cuda {
namespace {

constexpr int kGemvWarps = 4;

template <int NS, int MT8, int kU>
struct GemvTile {
  static constexpr int kThreads = kGemvWarps * 32;
  static constexpr int BN = NS * kStripN;
  static constexpr int BM = MT8 * 8;
  // Units per strip per batch: U * NS * 16 B of weights per lane in flight.
  static constexpr int U = kU;
  static constexpr int kPitch = BN + 4;    // floats; rows 2 apart land 8 banks apart
};

template <class T, int NS, int MT8, int U_>
__global__ void __launch_bounds__(kGemvWarps * 32) w4a16_gemv_kernel(const GemmParams p) {
  using O = Ops<T>;
  using TL = GemvTile<NS, MT8, U_>;
  constexpr int W = kGemvWarps, U = TL::U;
  __shared__ float red[W][TL::BM][TL::kPitch];
  __shared__ int s_last;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int nti = blockIdx.x, z = blockIdx.y, mti = blockIdx.z, splits = gridDim.y;
  const int s0 = nti * NS;
  // K range of this block, then of this warp, in whole batches of U units (so that a batch lies
  // in one group whenever G is a multiple of 32 * U); only the very last range may end short.
  const int kbatches = (p.ku + U - 1) / U;
  const int bb = int(int64_t(z) * kbatches / splits), be = int(int64_t(z + 1) * kbatches / splits);
  const int ub = (bb + int(int64_t(be - bb) * warp / W)) * U;
  const int ue = min(p.ku, (bb + int(int64_t(be - bb) * (warp + 1) / W)) * U);
  const uint64_t policy = l2_policy(true);
  const uint4* wp = static_cast<const uint4*>(p.w) + int64_t(s0) * p.ku * 32 + lane;

  // This lane's rows of x for its B fragments (row mt*8 + gid of the m tile); rows past m read 0.
  const T* xr[MT8];
  bool xok[MT8];
#pragma unroll
  for (int mt = 0; mt < MT8; ++mt) {
    const int m = mti * TL::BM + mt * 8 + gid;
    xok[mt] = m < p.m;
    xr[mt] = static_cast<const T*>(p.x) + int64_t(xok[mt] ? m : 0) * p.ldx + tig * 4;
  }

  float acc[NS][2][MT8][4];
  for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) { acc[ns][nt][mt][c] = 0.f; });

  // Scale and zero records of unit u for the NS strips (r = 0..3 of layout.h in each).
  auto records = [&](int u, uint2 (&sr)[NS], uint32_t (&zb)[NS]) {
    const int64_t rec0 = (int64_t(unit_group(u, p.g_magic)) * p.strips + s0) * 8 + gid;
#pragma unroll
    for (int ns = 0; ns < NS; ++ns) {
      sr[ns] = __ldg(static_cast<const uint2*>(p.scale_rec) + rec0 + ns * 8);
      zb[ns] = p.zero_rec ? __ldg(reinterpret_cast<const uint32_t*>(p.zero_rec) + rec0 + ns * 8) : 0x08080808u;
    }
  };
  // B fragments of unit u (0 past m and kx, and for a unit past the warp's range: !valid).
  auto load_x = [&](int u, bool valid, uint2 (&xb)[2][MT8]) {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int mt = 0; mt < MT8; ++mt) {
        const int64_t k = int64_t(u) * kUnitK + ks * 16;
        xb[ks][mt] = (valid && xok[mt] && k + tig * 4 < p.kx) ? __ldg(reinterpret_cast<const uint2*>(xr[mt] + k))
                                                              : make_uint2(0u, 0u);
      }
  };
  // The 4 words of one unit of one strip (k16 step ks, n16 half nt: q.x, q.y, q.z, q.w)
  // dequantized and multiplied into c[nt][mt]: with the scale folded into the weights (s2: the
  // record's scales as duplicated pairs) or as exact q - z (s2 unused).
  auto strip_mma = [&](auto scaled, const uint4& q, const uint2 (&xb)[2][MT8], const uint32_t (&s2)[4],
                       const uint32_t (&nz)[4], float (&c)[2][MT8][4]) {
    const uint32_t words[2][2] = {{q.x, q.y}, {q.z, q.w}};
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        uint32_t a[4];
        if constexpr (decltype(scaled)::value)
          O::dequant(words[ks][nt], s2[2 * nt], s2[2 * nt + 1], nz[2 * nt], nz[2 * nt + 1], a);
        else
          O::dequant_unscaled(words[ks][nt], nz[2 * nt], nz[2 * nt + 1], a);
#pragma unroll
        for (int mt = 0; mt < MT8; ++mt) O::mma(c[nt][mt], a, xb[ks][mt].x, xb[ks][mt].y);
      }
  };
  // One unit with the scale folded into the weights (the tiled kernel's arithmetic): for batches
  // that straddle a group boundary (G < 32 * U, or act order's padded groups).
  auto compute_scaled = [&](const uint4 (&q)[NS], const uint2 (&xb)[2][MT8], const uint2 (&sr)[NS],
                            const uint32_t (&zb)[NS]) {
#pragma unroll
    for (int ns = 0; ns < NS; ++ns) {
      uint32_t s2[4], nz[4];
      s2[0] = prmt(sr[ns].x, sr[ns].x, 0x1010u);
      s2[1] = prmt(sr[ns].x, sr[ns].x, 0x3232u);
      s2[2] = prmt(sr[ns].y, sr[ns].y, 0x1010u);
      s2[3] = prmt(sr[ns].y, sr[ns].y, 0x3232u);
      O::zero_codes(zb[ns], nz);
      strip_mma(std::true_type{}, q[ns], xb, s2, nz, acc[ns]);
    }
  };

  // A batch: U consecutive units of the NS strips (U * NS * 16 bytes of weights per lane), their x
  // fragments and the records of its first unit, all loaded before any is used.
  struct Batch {
    uint4 q[U][NS];
    uint2 xb[U][2][MT8];
    uint2 sr[NS];
    uint32_t zb[NS];
  };
  // The weights and records of a batch (read-only since process_weights), then its x fragments.
  auto load_weights = [&](int u, int ue, Batch& b) {
#pragma unroll
    for (int j = 0; j < U; ++j)
#pragma unroll
      for (int ns = 0; ns < NS; ++ns)
        b.q[j][ns] = u + j < ue ? ld_stream(wp + (int64_t(ns) * p.ku + u + j) * 32, policy) : make_uint4(0u, 0u, 0u, 0u);
    records(u, b.sr, b.zb);
  };
  auto load_xs = [&](int u, int ue, Batch& b) {
#pragma unroll
    for (int j = 0; j < U; ++j) {
      if (u + j < ue) {
        load_x(u + j, true, b.xb[j]);
      } else {
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int mt = 0; mt < MT8; ++mt) b.xb[j][ks][mt] = make_uint2(0u, 0u);
      }
    }
  };
  // A batch inside one group (the usual case: batches are U-aligned and G = 128 is 4 units) is
  // summed exactly as q - z into fresh fp32 accumulators and scaled once per batch: 16 fewer
  // instructions per unit than folding the scale into every weight, and one rounding less.
  auto compute_batch = [&](int u, int ue, const Batch& b) {
    if (unit_group(u, p.g_magic) == unit_group(min(u + U, ue) - 1, p.g_magic)) {
      const uint32_t unused[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int ns = 0; ns < NS; ++ns) {  // one strip at a time: fewer live registers
        float part[2][MT8][4];
        for_each_acc<1, MT8>([&](int, int nt, int mt, int c) { part[nt][mt][c] = 0.f; });
        uint32_t nz[4];
        O::zero_codes(b.zb[ns], nz);
#pragma unroll
        for (int j = 0; j < U; ++j) strip_mma(std::false_type{}, b.q[j][ns], b.xb[j], unused, nz, part);
        const float2 s01 = O::scales(b.sr[ns].x), s23 = O::scales(b.sr[ns].y);
        const float sc[4] = {s01.x, s01.y, s23.x, s23.y};  // r = 2 * nt + (c >> 1)
        for_each_acc<1, MT8>([&](int, int nt, int mt, int c) {
          acc[ns][nt][mt][c] = fmaf(sc[2 * nt + (c >> 1)], part[nt][mt][c], acc[ns][nt][mt][c]);
        });
      }
    } else {
#pragma unroll
      for (int j = 0; j < U; ++j) {
        if (u + j >= ue) break;
        uint2 sr[NS];
        uint32_t zb[NS];
        records(u + j, sr, zb);
        compute_scaled(b.q[j], b.xb[j], sr, zb);
      }
    }
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
    Batch b;
    if (D > 0) prefetch_batch(u + D * U);
    load_weights(u, ue, b);
    if (u == ub) grid_dependency_wait();
    load_xs(u, ue, b);
    compute_batch(u, ue, b);
  }
  if (ub >= ue) grid_dependency_wait();
  grid_launch_dependents();  // the next kernel's blocks may now take the SMs this grid leaves

  // ---- sum the warps, then the splits; bias; store ----
  for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) {
    int col, row;
    acc_position(lane, nt, c, &col, &row);
    red[warp][mt * 8 + row][ns * kStripN + col] = acc[ns][nt][mt][c];
  });
  __syncthreads();
  const int m0 = mti * TL::BM, rows = min(TL::BM, p.m - m0);
  const int64_t ldp = int64_t(p.strips) * kStripN;  // row pitch of the partials
  T* y = static_cast<T*>(p.y);
  const T* bias = static_cast<const T*>(p.bias);
  auto store = [&](int r, int f, float v) {
    const int n = s0 * kStripN + f;
    if (n < p.n) y[int64_t(m0 + r) * p.n + n] = O::from_float(v + (bias ? O::to_float(bias[n]) : 0.f));
  };
  auto warp_sum = [&](int r, int f) {  // in warp order
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < W; ++w) v += red[w][r][f];
    return v;
  };
  for (int o = threadIdx.x; o < rows * TL::BN; o += TL::kThreads) {
    const int r = o / TL::BN, f = o % TL::BN;
    if (splits == 1)
      store(r, f, warp_sum(r, f));
    else
      p.partials[(int64_t(z) * p.m + m0 + r) * ldp + s0 * kStripN + f] = warp_sum(r, f);
  }
  if (splits == 1) return;
  __threadfence();
  __syncthreads();
  const int tile = mti * gridDim.x + nti;
  if (threadIdx.x == 0) s_last = atomicAdd(&p.counters[tile], 1) == splits - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int o = threadIdx.x; o < rows * TL::BN; o += TL::kThreads) {
    const int r = o / TL::BN, f = o % TL::BN;
    const float* src = p.partials + int64_t(m0 + r) * ldp + s0 * kStripN + f;
    float v = 0.f;
#pragma unroll 4
    for (int zz = 0; zz < splits; ++zz) v += __ldcg(src + int64_t(zz) * p.m * ldp);  // in split order
    store(r, f, v);
  }
  if (threadIdx.x == 0) p.counters[tile] = 0;  // ready for the next launch (stream order)
}

// GEMV variants:            id  NS MT8 U (units per strip per batch: 8 x 16 B per lane in flight,
// 4 x 16 B with 32 rows or for v2u2, which trades bytes in flight for registers)
#define NIBBLE_CUDA_GEMV_VARIANTS(X) \
  X(kV1, 2, 1, 4)                    \
  X(kV2, 2, 2, 4)                    \
  X(kV4, 2, 4, 2)                    \
  X(kV2u2, 2, 2, 2)

template <class T, int NS, int MT8, int U>
cudaError_t setup_gemv(KernelInfo& info, const char* name, int sms) {
  using TL = GemvTile<NS, MT8, U>;
  auto kernel = w4a16_gemv_kernel<T, NS, MT8, U>;
  int per_sm = 0;
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, TL::kThreads, 0);
  if (e != cudaSuccess) return e;
  info = KernelInfo{name, TL::BN, TL::BM, TL::kThreads, 0, per_sm * sms, TL::U};
  return cudaSuccess;
}

template <class T, int NS, int MT8, int U>
cudaError_t launch_gemv(const GemmParams& p, int splits, cudaStream_t stream) {
  using TL = GemvTile<NS, MT8, U>;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(p.n_tiles), unsigned(splits), unsigned(p.m_tiles));
  cfg.blockDim = dim3(TL::kThreads);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = p.overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, w4a16_gemv_kernel<T, NS, MT8, U>, p);
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

cudaError_t launch_gemv_kernel(KernelId id, Act act, const GemmParams& p, int splits, cudaStream_t stream) {
#define NIBBLE_LAUNCH_GEMV(kid, NS, MT8, U)                                  \
  case kid:                                                                     \
    return act == Act::f16 ? launch_gemv<__half, NS, MT8, U>(p, splits, stream) \
                           : launch_gemv<__nv_bfloat16, NS, MT8, U>(p, splits, stream);
  switch (id) {
    NIBBLE_CUDA_GEMV_VARIANTS(NIBBLE_LAUNCH_GEMV)
    default: return cudaErrorInvalidValue;
  }
#undef NIBBLE_LAUNCH_GEMV
}

}  // namespace nibble::cuda
