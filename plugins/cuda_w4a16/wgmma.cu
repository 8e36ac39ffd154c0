// The sm_90a matmul on wgmma.mma_async, compiled for compute_90a only (Hopper's own instructions
// run on compute capability 9.0 and nothing else; the plan declines it elsewhere).
//
// Y^T = W^T X^T as in the mma.sync kernels, on the same packed weights (layout.h): the weights are
// the A operand, dequantized into registers (wgmma's RS form), x the B operand, read by the tensor
// cores from shared memory through a descriptor. A block of 384 threads owns a tile of 256 output
// features x BM rows of x and walks K in stages of 64 through a ring of shared-memory stages
// (wgmma_layout.h has the images):
//   warpgroup 0, the producer (40 registers per thread after setmaxnreg):
//     warp 0, one lane: per stage one bulk copy per strip (the strip's 2 units, 1 KiB, L2
//       evict-first when the weights are read once) and one per unit for the scale and zero
//       records, all completing as transaction bytes on the stage's `full` mbarrier;
//     warps 1-3: x, 4 bytes per lane with cp.async (zero-filled past M and K), stored in the
//       mma's K order and the 128-byte swizzle; a thread waits for its own copies a few stages
//       later (cp.async.wait_group), fences them into the async proxy and arrives on `full`.
//   warpgroups 1 and 2, the consumers (232 registers): each warp owns one strip. Per unit it reads
//     its 16-byte word and the records from shared memory, dequantizes 4 A fragments exactly as
//     the mma.sync kernels do (Ops<T>), and the warpgroup issues 4 wgmma m64nBMk16 (2 k16 steps x
//     2 n16 halves of its 4 strips) as one group; the next unit's dequantization overlaps that
//     group, and a stage is handed back (`empty` mbarrier, one arrival per warp) once the wgmma
//     groups that read it have completed.
// The grid is persistent and stream-K: at most one block per SM, each owning an equal contiguous
// range of (tile, k stage) items; a tile split between blocks is summed in block order by the last
// to arrive (fp32 partials, deterministic), the bias is added and y written from the accumulators.
// Launched as a programmatic dependent (PDL), the first stages' weights are requested before the
// wait for the previous kernel; x, the partials, the counters and y are touched after it.
#include <algorithm>

#include "device_ops.cuh"
#include "hopper_ops.cuh"
#include "kernels.h"
#include "wgmma_layout.h"
#include "wgmma_ops.cuh"

namespace nibble::cuda {
namespace {

constexpr int kWgThreads = 384;    // the producer warpgroup and two consumer warpgroups
constexpr int kWgConsumers = 256;  // threads of the consumer warpgroups
constexpr int kWgXThreads = 96;    // producer warps 1-3
// 40 x 128 + 232 x 256 = 64512 of the SM's 65536 registers.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kSmemLimit = 227 * 1024;  // opt-in shared memory per block on sm_90
constexpr int kEpilogueBarrier = 1;     // named barrier of the consumer threads

template <int BM>
struct WgTile {
  static_assert(BM % 16 == 0 && BM >= 16 && BM <= 128, "wgmma n = BM: 16, 32, 64 or 128 here");
  static constexpr int kXBytes = BM * kWgXRowBytes;  // a multiple of 1024: swizzle atoms stay aligned
  static constexpr int kWBytes = kWgStrips * kWgUnitsPerStage * 512;
  static constexpr int kSBytes = kWgUnitsPerStage * kWgStrips * 64;
  static constexpr int kZBytes = kWgUnitsPerStage * kWgStrips * 32;
  static constexpr int kStageBytes = kXBytes + kWBytes + kSBytes + kZBytes;
  static constexpr int kFixed = 1024 + 2 * 16 * 8 + 64;  // alignment slack, barriers, static smem
  static constexpr int kStages = std::min(16, (kSmemLimit - kFixed) / kStageBytes);
  // x copy groups a producer thread keeps in flight before it waits for the oldest; fewer than
  // kStages - 1, or the producer would wait for a stage the consumers cannot reach.
  static constexpr int kLag = std::min(6, kStages - 2);
  static constexpr int kSmem = kFixed + kStages * kStageBytes;
  static constexpr int kAcc = BM / 2;  // f32 accumulators per thread of one m64nBMk16
  static_assert(kStages >= 3 && kSmem <= kSmemLimit, "stages must fit the shared memory");
};

template <class T, int BM>
__global__ void __launch_bounds__(kWgThreads, 1) w4a16_wgmma_kernel(const GemmParams p) {
  using TL = WgTile<BM>;
  using O = Ops<T>;
  constexpr int S = TL::kStages;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int s_last;

  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const gbase = smem_raw + (base - raw);  // generic address of `base`
  const uint32_t sx = base;                              // S x tiles
  const uint32_t sw = sx + S * TL::kXBytes;              // S weight images
  const uint32_t ss = sw + S * TL::kWBytes;              // S scale-record images
  const uint32_t sz = ss + S * TL::kSBytes;              // S zero-record images
  const uint32_t full = sz + S * TL::kZBytes;            // S mbarriers: the stage is filled
  const uint32_t empty = full + 8 * S;                   // S mbarriers: the stage is consumed

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int KT = p.kt;
  const int work = p.m_tiles * p.n_tiles * KT;  // < 2^31: the plan checks
  const int nblocks = gridDim.x;
  const int ib = int(int64_t(blockIdx.x) * work / nblocks), ie = int(int64_t(blockIdx.x + 1) * work / nblocks);
  const bool zp = p.zero_rec != nullptr;

  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(full + 8 * s, 1 + kWgXThreads);
      mbar_init(empty + 8 * s, kWgConsumers / 32);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (warp < 4) {
    regs_dealloc<kProducerRegs>();
    if (warp == 0) {
      // ---- bulk copies: weights and records of every item, as far ahead as the stages allow ----
      if (lane != 0) return;
      const uint64_t w_policy = l2_policy(p.evict_first != 0), r_policy = l2_policy(false);
      const uint32_t tx = TL::kWBytes + TL::kSBytes + (zp ? TL::kZBytes : 0);
      int t = ib / KT, kt = ib - t * KT, s = 0;
      uint32_t ph = 0;  // parity of the current use of stage s
      for (int i = ib; i < ie; ++i) {
        if (i - ib >= S) mbar_wait(empty + 8 * s, ph ^ 1);
        const uint32_t bar = full + 8 * s;
        mbar_arrive_expect_tx(bar, tx);
        const int nti = t / p.m_tiles;
        const auto* w = static_cast<const unsigned char*>(p.w) + (int64_t(nti) * kWgStrips * p.ku + 2 * kt) * 512;
#pragma unroll
        for (int j = 0; j < kWgStrips; ++j)
          bulk_copy(sw + s * TL::kWBytes + wg_w_offset(j, 0, 0), w + int64_t(j) * p.ku * 512, 1024, bar, w_policy);
#pragma unroll
        for (int u = 0; u < kWgUnitsPerStage; ++u) {
          const int64_t rec = int64_t(unit_group(2 * kt + u, p.g_magic)) * p.strips + int64_t(nti) * kWgStrips;
          bulk_copy(ss + s * TL::kSBytes + wg_s_offset(u, 0, 0), static_cast<const unsigned char*>(p.scale_rec) + rec * 64,
                    kWgStrips * 64, bar, r_policy);
          if (zp)
            bulk_copy(sz + s * TL::kZBytes + wg_z_offset(u, 0, 0), p.zero_rec + rec * 32, kWgStrips * 32, bar, r_policy);
        }
        if (++kt == KT) kt = 0, ++t;
        if (++s == S) s = 0, ph ^= 1;
      }
      return;
    }
    // ---- x: 4-byte cp.async per lane and row, released kLag items later ----
    constexpr int D = TL::kLag;
    const int xw = warp - 1;
    grid_dependency_wait();  // x may be the previous kernel's output
    const T* xg = static_cast<const T*>(p.x);
    int t = ib / KT, kt = ib - t * KT, s = 0;
    uint32_t ph = 0;
    const int n = ie - ib;
    for (int li = 0; li < n; ++li) {
      if (li >= S) mbar_wait(empty + 8 * s, ph ^ 1);
      const int mti = t % p.m_tiles;
      const uint32_t xs = sx + s * TL::kXBytes;
      const int64_t k = int64_t(kt) * kTileK + 2 * lane;
      const bool k_ok = k < p.kx;
      for (int r = xw; r < BM; r += 3) {
        const int m = mti * BM + r;
        const bool ok = k_ok && m < p.m;
        cp_async4(xs + wg_x_offset(r, lane), ok ? xg + int64_t(m) * p.ldx + k : xg, ok ? 4 : 0);
      }
      cp_async_commit();
      if (li >= D) {
        cp_async_wait<D>();  // the copies of item li - D have landed
        fence_proxy_async();
        mbar_arrive(full + 8 * ((li - D) % S));
      }
      if (++kt == KT) kt = 0, ++t;
      if (++s == S) s = 0, ph ^= 1;
    }
    cp_async_wait<0>();
    fence_proxy_async();
    for (int li = n > D ? n - D : 0; li < n; ++li) mbar_arrive(full + 8 * (li % S));
    return;
  }

  // ---- consumers ----
  regs_alloc<kConsumerRegs>();
  const int cw = warp - 4;     // strip of the tile this warp dequantizes
  const int ctid = tid - 128;  // 0..255
  const int gid = lane >> 2;
  float acc[2][TL::kAcc];  // [n16 half][m64nBM accumulator]
  auto zero_acc = [&]() {
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int i = 0; i < TL::kAcc; ++i) acc[nt][i] = 0.f;
  };
  grid_dependency_wait();  // the partials, counters and y may still be in use by the previous kernel

  // Epilogue of tile t: fix up stream-K partials if the tile is shared, then bias and y.
  auto epilogue = [&](int t) {
    const int mti = t % p.m_tiles, nti = t / p.m_tiles;
    const int t0 = t * KT, t1 = t0 + KT;
    if (!(ib <= t0 && ie >= t1)) {
      // Blocks bf..bl share this tile; block b's partial goes to slot 2b if this is its first
      // tile, else 2b + 1 (a block has at most two shared tiles: its first and its last).
      auto block_of = [&](int64_t i) { return ((i + 1) * nblocks + work - 1) / work - 1; };
      auto slot_of = [&](int64_t b) { return 2 * b + ((b * work / nblocks) / KT == t ? 0 : 1); };
      const int64_t bf = block_of(t0), bl = block_of(t1 - 1);
      // [slot][consumer thread][2 * kAcc]: each thread's own accumulators, 16-byte accesses.
      float4* mine = reinterpret_cast<float4*>(p.partials + (slot_of(blockIdx.x) * kWgConsumers + ctid) * (2 * TL::kAcc));
#pragma unroll
      for (int j = 0; j < TL::kAcc / 2; ++j) {
        const int e = 4 * j, nt = e / TL::kAcc, i = e % TL::kAcc;
        mine[j] = make_float4(acc[nt][i], acc[nt][i + 1], acc[nt][i + 2], acc[nt][i + 3]);
      }
      __threadfence();
      named_barrier(kEpilogueBarrier, kWgConsumers);
      if (ctid == 0) s_last = atomicAdd(&p.counters[t], 1) == int(bl - bf);
      named_barrier(kEpilogueBarrier, kWgConsumers);
      if (!s_last) return;
      __threadfence();
      // Last to arrive: sum all parts in block order, its own re-read too, so the sum is the
      // same whichever block is last.
      zero_acc();
      // 8 float4 of a part in flight at a time: all of them at once would not fit beside the
      // accumulators.
      constexpr int kChunk = TL::kAcc / 2 < 8 ? TL::kAcc / 2 : 8;
#pragma unroll
      for (int j0 = 0; j0 < TL::kAcc / 2; j0 += kChunk)
        for (int64_t b = bf; b <= bl; ++b) {
          const float4* part =
              reinterpret_cast<const float4*>(p.partials + (slot_of(b) * kWgConsumers + ctid) * (2 * TL::kAcc));
#pragma unroll
          for (int j = j0; j < j0 + kChunk; ++j) {
            const float4 v = __ldcg(part + j);
            const int e = 4 * j, nt = e / TL::kAcc, i = e % TL::kAcc;
            acc[nt][i] += v.x;
            acc[nt][i + 1] += v.y;
            acc[nt][i + 2] += v.z;
            acc[nt][i + 3] += v.w;
          }
        }
      if (ctid == 0) p.counters[t] = 0;  // ready for the next launch (stream order)
    }
    T* y = static_cast<T*>(p.y);
    const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // the elements i with (i >> 1) & 1 == h share a feature
        int f, r;
        wg_output_position(cw, lane, nt, 2 * h, &f, &r);
        const int n = nti * kWgBN + f;
        if (n >= p.n) continue;
        const float b = bias ? O::to_float(bias[n]) : 0.f;
#pragma unroll
        for (int mt = 0; mt < BM / 8; ++mt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int i = 4 * mt + 2 * h + c;
            wg_output_position(cw, lane, nt, i, &f, &r);
            const int m = mti * BM + r;
            if (m < p.m) y[int64_t(m) * p.n + n] = O::from_float(acc[nt][i] + b);
          }
      }
  };

  const unsigned char* const w_img = gbase + (sw - base);
  const unsigned char* const s_img = gbase + (ss - base);
  const unsigned char* const z_img = gbase + (sz - base);
  // One tile at a time: its k stages in this block's range, then its epilogue. (The accumulators
  // cross the inner loop's back edge only while wgmma groups are in flight, which lets ptxas keep
  // them in place; a join of in-flight and finished accumulators makes it wait for the group.)
  int i = ib, s = 0, prev = -1;
  uint32_t ph = 0;
  while (i < ie) {
    const int t = i / KT, kt0 = i - t * KT, kt1 = min(KT, kt0 + (ie - i));
    zero_acc();
    for (int kt = kt0; kt < kt1; ++kt) {
      mbar_wait(full + 8 * s, ph);
#pragma unroll
      for (int u = 0; u < kWgUnitsPerStage; ++u) {
        const uint2 sr = *reinterpret_cast<const uint2*>(s_img + s * TL::kSBytes + wg_s_offset(u, cw, gid));
        const uint32_t zb =
            zp ? *reinterpret_cast<const uint32_t*>(z_img + s * TL::kZBytes + wg_z_offset(u, cw, gid)) : 0x08080808u;
        const uint4 q = *reinterpret_cast<const uint4*>(w_img + s * TL::kWBytes + wg_w_offset(cw, u, lane));
        uint32_t s2[4], nz[4];
        s2[0] = prmt(sr.x, sr.x, 0x1010u);  // duplicate the lower / upper 16 bits (layout.h's r = 0..3)
        s2[1] = prmt(sr.x, sr.x, 0x3232u);
        s2[2] = prmt(sr.y, sr.y, 0x1010u);
        s2[3] = prmt(sr.y, sr.y, 0x3232u);
        O::zero_codes(zb, nz);
        uint32_t a[2][2][4];  // [k16 step][n16 half]: words q.x, q.y (step 0), q.z, q.w (step 1)
        O::dequant(q.x, s2[0], s2[1], nz[0], nz[1], a[0][0]);
        O::dequant(q.y, s2[2], s2[3], nz[2], nz[3], a[0][1]);
        O::dequant(q.z, s2[0], s2[1], nz[0], nz[1], a[1][0]);
        O::dequant(q.w, s2[2], s2[3], nz[2], nz[3], a[1][1]);
        fence_operands(acc[0]);
        fence_operands(acc[1]);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 2; ++ks) {
          const uint64_t desc = wg_x_desc(sx + s * TL::kXBytes, 2 * u + ks);
          Wgmma<T, BM>::mma(acc[0], a[ks][0], desc);
          Wgmma<T, BM>::mma(acc[1], a[ks][1], desc);
        }
        wgmma_commit();
        wgmma_wait<1>();  // the group before this one is done: its registers and stage are free
        fence_operands(acc[0]);
        fence_operands(acc[1]);
        if (u == 0 && prev >= 0) {
          if (lane == 0) mbar_arrive(empty + 8 * prev);
          prev = -1;
        }
      }
      prev = s;
      if (++s == S) s = 0, ph ^= 1;
    }
    i += kt1 - kt0;
    wgmma_wait<0>();
    fence_operands(acc[0]);
    fence_operands(acc[1]);
    if (lane == 0) mbar_arrive(empty + 8 * prev);
    prev = -1;
    if (i == ie) grid_launch_dependents();
    epilogue(t);
  }
}

template <class T, int BM>
cudaError_t setup_wg(KernelInfo& info, const char* name, int sms) {
  using TL = WgTile<BM>;
  auto kernel = w4a16_wgmma_kernel<T, BM>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TL::kSmem);
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWgThreads, TL::kSmem);
  if (e != cudaSuccess) return e;
  info = KernelInfo{name, kWgBN, BM, kWgThreads, TL::kSmem, per_sm * sms, kWgUnitsPerStage};
  return cudaSuccess;
}

template <class T, int BM>
cudaError_t launch_wg(const GemmParams& p, int grid, cudaStream_t stream) {
  using TL = WgTile<BM>;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(kWgThreads);
  cfg.dynamicSmemBytes = TL::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = p.overlap ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, w4a16_wgmma_kernel<T, BM>, p);
}

//                                   BM
#define NIBBLE_CUDA_WGMMA_VARIANTS(X) \
  X(kWg16, 16)                        \
  X(kWg32, 32)                        \
  X(kWg64, 64)                        \
  X(kWg128, 128)

}  // namespace

cudaError_t setup_wgmma_kernels(KernelInfo (*info)[kNumKernels], int sms) {
  cudaError_t e = cudaSuccess;
#define NIBBLE_SETUP_WG(id, BM)                                                                        \
  if ((e = setup_wg<__half, BM>(info[0][id], kKernelNames[id], sms)) != cudaSuccess) return e; \
  if ((e = setup_wg<__nv_bfloat16, BM>(info[1][id], kKernelNames[id], sms)) != cudaSuccess) return e;
  NIBBLE_CUDA_WGMMA_VARIANTS(NIBBLE_SETUP_WG)
#undef NIBBLE_SETUP_WG
  return cudaSuccess;
}

cudaError_t launch_wgmma(KernelId id, Act act, const GemmParams& p, int grid, cudaStream_t stream) {
#define NIBBLE_LAUNCH_WG(kid, BM) \
  case kid:                       \
    return act == Act::f16 ? launch_wg<__half, BM>(p, grid, stream) : launch_wg<__nv_bfloat16, BM>(p, grid, stream);
  switch (id) {
    NIBBLE_CUDA_WGMMA_VARIANTS(NIBBLE_LAUNCH_WG)
    default: return cudaErrorInvalidValue;
  }
#undef NIBBLE_LAUNCH_WG
}

}  // namespace nibble::cuda
