// The tiled stream-K matmul on mma.sync (sm_80 and newer): one template, five block tiles (the
// variants list at the end). The packed layout it reads is described in layout.h.
//
// Y^T = W^T X^T on mma.m16n8k16 with the weights as the A operand (16 output features x 16 k) and
// x as the B operand (16 k x 8 rows of x). A block owns a tile of BN features x BM rows and walks
// K in stages of 64 through a cp.async pipeline of STAGES shared-memory buffers (weights streamed
// with an L2 evict-first policy when read once, x and the scale records beside them). Each warp
// dequantizes its own weights straight into A fragments (LOP3 into the mantissa of a 16-bit magic
// number, exact subtraction of the zero point, one multiply by the scale) and issues
// NS * 2 * 2 * MT8 mma per 32 k. The work (tiles x k stages) is cut into equal contiguous pieces,
// one per block (stream-K): every SM gets the same number of stages whatever the shape, which is
// what keeps all SMs busy on skinny shapes. A tile shared by several blocks is summed by the last
// of them to arrive (fp32 partials, fixed order, so results are deterministic).
//
// An 8-bit layer is two nibble planes (layout.h): packed group 2g holds the low nibbles of real
// group g, 2g + 1 the high ones, and both read the same x. The P8 instances walk the real K: a
// stage is 2 real units, for which they copy the low-plane units and their twins upg units on
// (4 units per strip), the low plane's scale records and both planes' zero records; x is the
// compact x of the low-plane rows (launch_mma's planes8), read as any x; each pair of words is dequantized in one pass (Ops<T>::dequant8, one
// rounding per weight) and feeds one mma, so an 8-bit layer costs the mma of a 4-bit one.
#include "device_ops.cuh"
#include "kernels.h"

namespace nibble::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// The matmul.

// Block tile of one variant. NS: strips (32 features) per warp; MT8: m8 tiles per warp; WN x WM
// warps; STAGES: depth of the cp.async pipeline.
template <int NS, int MT8, int WN, int WM, int STAGES, bool P8>
struct Tile {
  static constexpr int kPlanes = P8 ? 2 : 1;  // planes of weights and zero records per stage
  static constexpr int kThreads = WN * WM * 32;
  static constexpr int kStrips = WN * NS;  // strips per block
  static constexpr int BN = kStrips * kStripN;
  static constexpr int BM = WM * MT8 * 8;
  // x rows in shared memory: 64 halves of data + 16 of padding. The pitch (160 B) is 32 mod 128,
  // so each half-warp's 8-byte B-fragment loads (rows r..r+3 x 32 contiguous bytes) hit 32
  // different banks.
  static constexpr int kXPitch = 80;
  static constexpr int kWBytes = kStrips * 2 * 512 * kPlanes;  // 2 units (of each plane) per strip per stage
  static constexpr int kXBytes = BM * kXPitch * 2;
  static constexpr int kSBytes = kStrips * 2 * 64;   // scale records (8 gid x 4 x 2 B) per unit
  static constexpr int kZPlane = kStrips * 2 * 32;   // zero records (8 gid x 4 x 1 B) per unit
  static constexpr int kZBytes = kZPlane * kPlanes;
  static constexpr int kStageBytes = kWBytes + kXBytes + kSBytes + kZBytes;
  static constexpr int kSmem = STAGES * kStageBytes;
  static_assert(kStageBytes % 16 == 0, "stages must stay 16-byte aligned for cp.async");
};

template <class T, int NS, int MT8, int WN, int WM, int STAGES, bool P8>
__global__ void __launch_bounds__(WN* WM * 32) w4a16_gemm_kernel(const GemmParams p) {
  using TL = Tile<NS, MT8, WN, WM, STAGES, P8>;
  using O = Ops<T>;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int s_last;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wn = warp % WN, wm = warp / WN;
  const int gid = lane >> 2, tig = lane & 3;

  // Work item i = tile * KT + k stage; this block owns [ib, ie). The host keeps work < 2^31.
  const int KT = p.kt;
  const int work = p.m_tiles * p.n_tiles * KT;
  const int nblocks = gridDim.x;
  const int ib = int(int64_t(blockIdx.x) * work / nblocks), ie = int(int64_t(blockIdx.x + 1) * work / nblocks);
  const uint64_t policy = l2_policy(p.evict_first != 0);
  // P8: units per packed group (from g_magic = floor(2^32 / upg) + 1, exact for upg < 2^15, which
  // the host checks) and real units; the low-plane unit of real unit r is r + upg * (r / upg).
  const int upg = !P8 || p.g_magic == 0 ? 1 : int((uint64_t(1) << 32) / (p.g_magic - 1));
  const int ku_real = p.ku / 2;
  auto low_unit = [&](int r) { return r + upg * unit_group(r, p.g_magic); };

  // ---- producer: stage s <- work item i (tile i / KT, k stage i % KT) ----
  auto load = [&](int t, int kt, int s) {
    const int mti = t % p.m_tiles, nti = t / p.m_tiles;
    unsigned char* st = smem + s * TL::kStageBytes;
    // P8: the stage's two real units (the second may be past the layer: no weights, zero scales).
    const int lu0 = P8 ? low_unit(2 * kt) : 2 * kt, lu1 = P8 ? low_unit(2 * kt + 1) : 2 * kt + 1;
    const bool has1 = !P8 || 2 * kt + 1 < ku_real;
    if constexpr (!P8) {
      // Weights: kStrips strips x 2 units x 32 lanes x 16 B; one strip's two units are contiguous.
      const uint4* wsrc = static_cast<const uint4*>(p.w) + (int64_t(nti) * TL::kStrips * p.ku + 2 * kt) * 32;
#pragma unroll 1
      for (int c = tid; c < TL::kStrips * 64; c += TL::kThreads) {
        const int strip = c >> 6, rem = c & 63;
        cp_async16_policy(smem_u32(st) + c * 16, wsrc + int64_t(strip) * p.ku * 32 + rem, policy);
      }
    } else {
      // Weights: kStrips strips x 4 units (low plane lu0, lu1, then their twins) x 32 lanes x 16 B.
      const uint4* wsrc = static_cast<const uint4*>(p.w) + int64_t(nti) * TL::kStrips * p.ku * 32;
#pragma unroll 1
      for (int c = tid; c < TL::kStrips * 128; c += TL::kThreads) {
        const int strip = c >> 7, j = (c >> 5) & 3, l = c & 31;
        if ((j & 1) && !has1) continue;
        const int unit = ((j & 1) ? lu1 : lu0) + ((j & 2) ? upg : 0);
        cp_async16_policy(smem_u32(st) + c * 16, wsrc + (int64_t(strip) * p.ku + unit) * 32 + l, policy);
      }
    }
    // x: BM rows x 64 columns, 8 chunks of 16 B per row; zero-filled past m and kx.
    const T* xg = static_cast<const T*>(p.x);
    const uint32_t xs = smem_u32(st + TL::kWBytes);
#pragma unroll 1
    for (int c = tid; c < TL::BM * 8; c += TL::kThreads) {
      const int r = c >> 3, c8 = c & 7;
      const int m = mti * TL::BM + r;
      const int64_t k = int64_t(kt) * kTileK + c8 * 8;
      const bool ok = m < p.m && k < p.kx;
      cp_async16(xs + (r * TL::kXPitch + c8 * 8) * 2, ok ? xg + int64_t(m) * p.ldx + k : xg, ok ? 16 : 0);
    }
    // Scale records: 64 B per (strip, unit), zero records 32 B.
    const uint32_t ss = smem_u32(st + TL::kWBytes + TL::kXBytes);
#pragma unroll 1
    for (int c = tid; c < TL::kStrips * 8; c += TL::kThreads) {
      const int su = c >> 2, part = c & 3, strip = su >> 1, u = su & 1;
      const int g = unit_group(u ? lu1 : lu0, p.g_magic);
      const auto* src = static_cast<const unsigned char*>(p.scale_rec) +
                        (int64_t(g) * p.strips + int64_t(nti) * TL::kStrips + strip) * 64 + part * 16;
      cp_async16(ss + su * 64 + part * 16, src, (u && !has1) ? 0 : 16);
    }
    if (p.zero_rec) {
      // P8: the low plane's records, then the high plane's (packed group + 1) kZPlane bytes on.
      const uint32_t zs = ss + TL::kSBytes;
#pragma unroll 1
      for (int c = tid; c < TL::kStrips * 4 * TL::kPlanes; c += TL::kThreads) {
        const int pl = c / (TL::kStrips * 4), cc = c % (TL::kStrips * 4);
        const int su = cc >> 1, part = cc & 1, strip = su >> 1, u = su & 1;
        const int g = unit_group(u ? lu1 : lu0, p.g_magic) + pl;
        const uint8_t* src = p.zero_rec + (int64_t(g) * p.strips + int64_t(nti) * TL::kStrips + strip) * 32 + part * 16;
        cp_async16(zs + pl * TL::kZPlane + su * 32 + part * 16, src, (u && !has1) ? 0 : 16);
      }
    }
  };

  // ---- consumer state ----
  float acc[NS][2][MT8][4];
  for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) { acc[ns][nt][mt][c] = 0.f; });
  auto compute = [&](int s, int kt) {
    const unsigned char* st = smem + s * TL::kStageBytes;
    const uint4* sw = reinterpret_cast<const uint4*>(st);
    const uint16_t* sx = reinterpret_cast<const uint16_t*>(st + TL::kWBytes);
    const unsigned char* ss = st + TL::kWBytes + TL::kXBytes;
    const unsigned char* sz = ss + TL::kSBytes;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      // Scales and zero encodings of this unit's group for each strip of the warp (r = 0..3,
      // layout.h), read for every unit: no branch, so a whole stage is one basic block the
      // compiler can interleave (a copy cached behind an `if` cost more in lost overlap).
      // P8: nz[ns][0..7] of both planes' zero records (Ops<T>::zero_codes_pair), q the low plane's
      // words and qh their twins'. (P8 layers always have zero points: nibble_planes.h.)
      uint32_t s2[NS][4], nz[NS][P8 ? 8 : 4];
#pragma unroll
      for (int ns = 0; ns < NS; ++ns) {
        const int su = (wn * NS + ns) * 2 + u;
        const uint2 sr = *reinterpret_cast<const uint2*>(ss + su * 64 + gid * 8);
        const uint32_t zb = p.zero_rec ? *reinterpret_cast<const uint32_t*>(sz + su * 32 + gid * 4) : 0x08080808u;
        s2[ns][0] = prmt(sr.x, sr.x, 0x1010u);  // duplicate the lower / upper 16 bits
        s2[ns][1] = prmt(sr.x, sr.x, 0x3232u);
        s2[ns][2] = prmt(sr.y, sr.y, 0x1010u);
        s2[ns][3] = prmt(sr.y, sr.y, 0x3232u);
        if constexpr (P8)
          O::zero_codes_pair(zb, *reinterpret_cast<const uint32_t*>(sz + TL::kZPlane + su * 32 + gid * 4), nz[ns]);
        else
          O::zero_codes(zb, nz[ns]);
      }
      uint4 q[NS], qh[NS];
#pragma unroll
      for (int ns = 0; ns < NS; ++ns) {
        q[ns] = sw[((wn * NS + ns) * 2 * TL::kPlanes + u) * 32 + lane];
        if constexpr (P8) qh[ns] = sw[((wn * NS + ns) * 4 + 2 + u) * 32 + lane];
      }
#pragma unroll
      for (int ks = 0; ks < 2; ++ks) {
        // B fragment (b0, b1) of this k16 step for each m8 tile: one 8-byte load (the K
        // permutation of layout.h makes a lane's four x values contiguous).
        uint2 xb[MT8];
#pragma unroll
        for (int mt = 0; mt < MT8; ++mt)
          xb[mt] = *reinterpret_cast<const uint2*>(sx + (wm * MT8 * 8 + mt * 8 + gid) * TL::kXPitch + u * 32 +
                                                   ks * 16 + tig * 4);
#pragma unroll
        for (int ns = 0; ns < NS; ++ns) {
          uint32_t a[4];
          // word 2*ks + nt: q.x (k16 0, n16 0), q.y (0, 1), q.z (1, 0), q.w (1, 1)
          if constexpr (P8)
            O::dequant8(ks == 0 ? q[ns].x : q[ns].z, ks == 0 ? qh[ns].x : qh[ns].z, s2[ns][0], s2[ns][1], nz[ns], 0, a);
          else
            O::dequant(ks == 0 ? q[ns].x : q[ns].z, s2[ns][0], s2[ns][1], nz[ns][0], nz[ns][1], a);
#pragma unroll
          for (int mt = 0; mt < MT8; ++mt) O::mma(acc[ns][0][mt], a, xb[mt].x, xb[mt].y);
          if constexpr (P8)
            O::dequant8(ks == 0 ? q[ns].y : q[ns].w, ks == 0 ? qh[ns].y : qh[ns].w, s2[ns][2], s2[ns][3], nz[ns], 2, a);
          else
            O::dequant(ks == 0 ? q[ns].y : q[ns].w, s2[ns][2], s2[ns][3], nz[ns][2], nz[ns][3], a);
#pragma unroll
          for (int mt = 0; mt < MT8; ++mt) O::mma(acc[ns][1][mt], a, xb[mt].x, xb[mt].y);
        }
      }
    }
  };

  // ---- epilogue of tile t: fix up stream-K partials if the tile is shared, then write y ----
  auto epilogue = [&](int t) {
    const int mti = t % p.m_tiles, nti = t / p.m_tiles;
    const int t0 = t * KT, t1 = t0 + KT;
    const int m_base = mti * TL::BM + wm * MT8 * 8, row_base = wm * MT8 * 8;
    if (!(ib <= t0 && ie >= t1)) {
      // Blocks b_first..b_last share this tile; block b's own partial goes to slot 2b if this is
      // its first tile, else 2b + 1 (a block has at most two shared tiles: its first and last).
      auto block_of = [&](int64_t i) { return ((i + 1) * nblocks + work - 1) / work - 1; };
      auto slot_of = [&](int64_t b) { return 2 * b + ((b * work / nblocks) / KT == t ? 0 : 1); };
      const int64_t bf = block_of(t0), bl = block_of(t1 - 1);
      float* mine = p.partials + slot_of(blockIdx.x) * int64_t(TL::BM * TL::BN);
      // [BM][BN] fp32, rows < m only: a lane's 8 gid neighbours write 32 contiguous bytes.
      for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) {
        int col, row;
        acc_position(lane, nt, c, &col, &row);
        if (m_base + mt * 8 + row < p.m)
          mine[(row_base + mt * 8 + row) * TL::BN + (wn * NS + ns) * kStripN + col] = acc[ns][nt][mt][c];
      });
      __threadfence();
      __syncthreads();
      if (tid == 0) s_last = atomicAdd(&p.counters[t], 1) == int(bl - bf);
      __syncthreads();
      if (!s_last) return;
      __threadfence();
      // Last to arrive: sum all parts in block order, its own re-read from memory too, so the sum
      // is the same whichever block is last and no second accumulator array is needed.
      for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) { acc[ns][nt][mt][c] = 0.f; });
      // One (strip, n16) slice at a time, PU parts per round: the loads of PU parts are issued
      // before any of them is added, so the sum costs (parts / PU) L2 round trips instead of
      // one per part (the small tiles of skinny shapes have up to ~16 parts), while the 64x64
      // warp tile, which holds 128 accumulators already, loads one part at a time.
      constexpr int PU = MT8 * 4 >= 32 ? 1 : 32 / (MT8 * 4);
#pragma unroll
      for (int ns = 0; ns < NS; ++ns)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
          for (int64_t b = bf; b <= bl; b += PU) {
            float v[PU][MT8][4];
#pragma unroll
            for (int j = 0; j < PU; ++j) {
              const float* part = p.partials + slot_of(b + j) * int64_t(TL::BM * TL::BN);
#pragma unroll
              for (int mt = 0; mt < MT8; ++mt)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                  int col, row;
                  acc_position(lane, nt, c, &col, &row);
                  v[j][mt][c] = (b + j <= bl && m_base + mt * 8 + row < p.m)
                                    ? __ldcg(part + (row_base + mt * 8 + row) * TL::BN + (wn * NS + ns) * kStripN + col)
                                    : 0.f;
                }
            }
#pragma unroll
            for (int j = 0; j < PU; ++j)  // in part order: the same sum whichever block is last
#pragma unroll
              for (int mt = 0; mt < MT8; ++mt)
#pragma unroll
                for (int c = 0; c < 4; ++c) acc[ns][nt][mt][c] += v[j][mt][c];
          }
      if (tid == 0) p.counters[t] = 0;  // ready for the next launch (stream order)
    }
    T* y = static_cast<T*>(p.y);
    const T* bias = static_cast<const T*>(p.bias);
#pragma unroll
    for (int ns = 0; ns < NS; ++ns)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          int col, row;
          acc_position(lane, nt, c, &col, &row);
          const int n = nti * TL::BN + (wn * NS + ns) * kStripN + col;
          if (n >= p.n) continue;
          const float b = bias ? O::to_float(bias[n]) : 0.f;
#pragma unroll
          for (int mt = 0; mt < MT8; ++mt) {
            const int m = m_base + mt * 8 + row;
            if (m < p.m) y[int64_t(m) * p.n + n] = O::from_float(acc[ns][nt][mt][c] + b);
          }
        }
  };

  // ---- main loop: one k stage per iteration, STAGES - 1 stages in flight ----
  // (tile, k stage) of the next load and of the current compute, advanced without divisions.
  int ld_t = ib / KT, ld_kt = ib - ld_t * KT;
  auto advance = [&](int& t, int& kt) {
    if (++kt == KT) {
      kt = 0;
      ++t;
    }
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (ib + s < ie) {
      load(ld_t, ld_kt, s);
      advance(ld_t, ld_kt);
    }
    cp_async_commit();
  }
  int t = ib / KT, kt = ib - t * KT;
  int slot = 0;
  for (int i = ib; i < ie; ++i) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage i visible to all; stage i - 1 fully consumed, so it can be refilled
    if (i + STAGES - 1 < ie) {
      load(ld_t, ld_kt, slot == 0 ? STAGES - 1 : slot - 1);
      advance(ld_t, ld_kt);
    }
    cp_async_commit();
    compute(slot, kt);
    if (kt == KT - 1 || i == ie - 1) {
      epilogue(t);
      for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) { acc[ns][nt][mt][c] = 0.f; });
    }
    advance(t, kt);
    slot = slot == STAGES - 1 ? 0 : slot + 1;
  }
  cp_async_wait<0>();
}


// The list of variants (keep it short: every entry is compiled for every architecture).
//                       NS MT8 WN WM STAGES
#define NIBBLE_CUDA_VARIANTS(X) \
  X(kS1, "s1", 1, 1, 4, 1, 6)   \
  X(kS2, "s2", 1, 2, 4, 1, 6)   \
  X(kS4, "s4", 1, 4, 4, 1, 5)   \
  X(kS8, "s8", 1, 8, 4, 1, 4)   \
  X(kL, "l", 2, 8, 4, 2, 4)

template <class T, int NS, int MT8, int WN, int WM, int STAGES, bool P8>
cudaError_t setup_one(KernelInfo& info, const char* name, int sms) {
  using TL = Tile<NS, MT8, WN, WM, STAGES, P8>;
  auto kernel = w4a16_gemm_kernel<T, NS, MT8, WN, WM, STAGES, P8>;
  // A tile whose stages need more shared memory than a block may have on this device (l: 118 KiB,
  // its P8 instance 152 KiB, against 99 KiB on sm_86 / sm_89) gets no slots: the plan declines it
  // with the reason ("cannot be resident"), and the other kernels run.
  int dev = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return e;
  if (TL::kSmem > optin) {
    info = KernelInfo{name, TL::BN, TL::BM, TL::kThreads, TL::kSmem, 0, kTileK / kUnitK};
    return cudaSuccess;
  }
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TL::kSmem);
  if (e != cudaSuccess) return e;
  // Ask for the largest shared-memory carveout: the occupancy computed below assumes it, and with
  // the driver's default the SM may be configured for fewer resident blocks than that (the grid
  // would then run in several waves instead of one; docs/cuda.md).
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, TL::kThreads, TL::kSmem);
  if (e != cudaSuccess) return e;
  info = KernelInfo{name, TL::BN, TL::BM, TL::kThreads, TL::kSmem, per_sm * sms, kTileK / kUnitK};
  return cudaSuccess;
}

template <class T, int NS, int MT8, int WN, int WM, int STAGES>
cudaError_t launch_one(const GemmParams& p, int grid, bool planes8, cudaStream_t stream) {
  if (planes8) {
    using TL = Tile<NS, MT8, WN, WM, STAGES, true>;
    w4a16_gemm_kernel<T, NS, MT8, WN, WM, STAGES, true><<<grid, TL::kThreads, TL::kSmem, stream>>>(p);
  } else {
    using TL = Tile<NS, MT8, WN, WM, STAGES, false>;
    w4a16_gemm_kernel<T, NS, MT8, WN, WM, STAGES, false><<<grid, TL::kThreads, TL::kSmem, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t setup_mma_kernels(KernelInfo (*info)[kNumKernels], KernelInfo (*info8)[kNumKernels], int sms) {
  cudaError_t e = cudaSuccess;
#define NIBBLE_SETUP(id, name, NS, MT8, WN, WM, ST)                                                          \
  if ((e = setup_one<__half, NS, MT8, WN, WM, ST, false>(info[0][id], name, sms)) != cudaSuccess) return e;   \
  if ((e = setup_one<__nv_bfloat16, NS, MT8, WN, WM, ST, false>(info[1][id], name, sms)) != cudaSuccess)      \
    return e;                                                                                                \
  if ((e = setup_one<__half, NS, MT8, WN, WM, ST, true>(info8[0][id], name, sms)) != cudaSuccess) return e;   \
  if ((e = setup_one<__nv_bfloat16, NS, MT8, WN, WM, ST, true>(info8[1][id], name, sms)) != cudaSuccess) return e;
  NIBBLE_CUDA_VARIANTS(NIBBLE_SETUP)
#undef NIBBLE_SETUP
  return cudaSuccess;
}

cudaError_t launch_mma(KernelId id, Act act, const GemmParams& p, int grid, bool planes8, cudaStream_t stream) {
#define NIBBLE_LAUNCH(kid, name, NS, MT8, WN, WM, ST)                                         \
  case kid:                                                                                    \
    return act == Act::f16 ? launch_one<__half, NS, MT8, WN, WM, ST>(p, grid, planes8, stream) \
                           : launch_one<__nv_bfloat16, NS, MT8, WN, WM, ST>(p, grid, planes8, stream);
  switch (id) {
    NIBBLE_CUDA_VARIANTS(NIBBLE_LAUNCH)
    default: return cudaErrorInvalidValue;
  }
#undef NIBBLE_LAUNCH
}

}  // namespace nibble::cuda
