// The arithmetic of the streaming GEMV (small M), kept apart from gemv.cu's kernel, which owns how
// the weights reach the registers. The packed layout is layout.h's.
//
// A compute warp owns a contiguous K range of NS strips, walked in batches of U units: the x
// fragments of a batch are read by plain loads (L1), its scale / zero records through the
// read-only cache, the weights dequantized exactly as the tiled kernels do (same Ops, same rounding) and multiplied
// with the same mma. The 4 compute warps of a block split the block's K range and sum through
// shared memory in warp order; blocks along grid.y split K further and the last to arrive sums
// their fp32 partials in split order (deterministic).
#pragma once

#include <type_traits>

#include "device_ops.cuh"
#include "kernel_params.h"

namespace nibble::cuda {
namespace {

template <int NS, int MT8, int kU>
struct GemvTile {
  static constexpr int kWarps = kGemvWarps;  // compute warps per block
  static constexpr int kThreads = kWarps * 32;
  static constexpr int BN = NS * kStripN;
  static constexpr int BM = MT8 * 8;
  // Units per strip per batch: U * NS * 16 B of weights per lane.
  static constexpr int U = kU;
  static constexpr int kPitch = BN + 4;  // floats; rows 2 apart land 8 banks apart
  static constexpr int kRedFloats = BM * kPitch;  // one warp's part of the block sum
  // Blocks per SM that v1 and v2u2 are meant to fit (4: at most 128 registers, which ptxas exceeds
  // by a few unless told, and then fits 3 blocks per SM and runs slower: docs/cuda.md "Whole
  // batches"); 0 = no bound for the others.
  static constexpr int kMinBlocks = (MT8 == 1 && NS == 2) || (MT8 == 2 && kU == 2) ? 4 : 0;
};

// Which tile and K split a block of the GEMV computes. The grid is (m_tiles * n_tiles, splits): the
// m tiles of one n tile are neighbours in launch order, so that they run at about the same time and
// every m tile after the first finds the tile's weights in L2 (with the m tiles outermost, each
// one streamed the whole layer from memory again once the layer was larger than L2).
struct GemvBlock {
  int nti, mti, z, splits;
  __device__ __forceinline__ explicit GemvBlock(const GemmParams& p)
      : nti(int(blockIdx.x) / p.m_tiles), mti(int(blockIdx.x) % p.m_tiles), z(blockIdx.y), splits(gridDim.y) {}
};

// The K range [*ub, *ue) of `units` units that compute warp `warp` of the block at split z owns:
// the block's range in whole batches of U units, cut in kGemvWarps (so that a batch lies in one
// group whenever G is a multiple of 32 * U); only the very last range may end short.
template <int U>
__device__ __forceinline__ void gemv_warp_range(int units, int z, int splits, int warp, int* ub, int* ue) {
  constexpr int W = kGemvWarps;
  const int kbatches = (units + U - 1) / U;
  const int bb = int(int64_t(z) * kbatches / splits), be = int(int64_t(z + 1) * kbatches / splits);
  *ub = (bb + int(int64_t(be - bb) * warp / W)) * U;
  *ue = min(units, (bb + int(int64_t(be - bb) * (warp + 1) / W)) * U);
}

// One B fragment of x: a plain load (see GemvWarp::load_x for why not __ldg).
__device__ __forceinline__ uint2 load_x2(const uint2* p) { return *p; }

// One compute warp: its rows of x, its accumulators, and the steps of a batch.
template <class T, int NS, int MT8, int U>
struct GemvWarp {
  using O = Ops<T>;
  using TL = GemvTile<NS, MT8, U>;

  // A batch: U consecutive units of the NS strips (U * NS * 16 bytes of weights per lane), their
  // x fragments and the records of its first unit.
  struct Batch {
    uint4 q[U][NS];
    uint2 xb[U][2][MT8];
    uint2 sr[NS];
    uint32_t zb[NS];
  };

  const GemmParams& p;
  const int lane, gid, tig, s0;
  // This lane's rows of x for its B fragments (row mt*8 + gid of the m tile); rows past m read 0.
  const T* xr[MT8];
  bool xok[MT8];
  float acc[NS][2][MT8][4];

  __device__ __forceinline__ GemvWarp(const GemmParams& p_, int lane_, int s0_, int mti)
      : p(p_), lane(lane_), gid(lane_ >> 2), tig(lane_ & 3), s0(s0_) {
#pragma unroll
    for (int mt = 0; mt < MT8; ++mt) {
      const int m = mti * TL::BM + mt * 8 + gid;
      xok[mt] = m < p.m;
      xr[mt] = static_cast<const T*>(p.x) + int64_t(xok[mt] ? m : 0) * p.ldx + tig * 4;
    }
    for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) { acc[ns][nt][mt][c] = 0.f; });
  }

  // Scale and zero records of unit u for the NS strips (r = 0..3 of layout.h in each).
  __device__ __forceinline__ void records(int u, uint2 (&sr)[NS], uint32_t (&zb)[NS]) const {
    const int64_t rec0 = (int64_t(unit_group(u, p.g_magic)) * p.strips + s0) * 8 + gid;
#pragma unroll
    for (int ns = 0; ns < NS; ++ns) {
      sr[ns] = __ldg(static_cast<const uint2*>(p.scale_rec) + rec0 + ns * 8);
      zb[ns] = p.zero_rec ? __ldg(reinterpret_cast<const uint32_t*>(p.zero_rec) + rec0 + ns * 8) : 0x08080808u;
    }
  }
  // x is read with plain loads (ld.global: weak, cached in L1), never through the read-only path
  // (__ldg, ld.global.nc): launched as a programmatic dependent (PDL), the kernel runs while the
  // previous kernel of the stream (the gather of x, or the caller's kernel that wrote x) may still
  // be writing it, and the non-coherent path is only defined for data that is read-only for the
  // whole life of the kernel. A weak load after griddepcontrol.wait is ordered after the previous
  // grid's writes by the memory model; the wait is an asm with a memory clobber, so the compiler
  // keeps the loads after it. Through __ldg the GEMV with PDL once read a stale x after an
  // act-order gather; ld.global.cg (L2 only) also fixed it but was slower, the blocks of one SM no
  // longer sharing x through L1 (docs/cuda.md "Outlier activations" and "The GEMV's x by plain
  // loads").
  // B fragments of unit u (0 past m and kx, and for a unit past the warp's range: !valid).
  __device__ __forceinline__ void load_x(int u, bool valid, uint2 (&xb)[2][MT8]) const {
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int mt = 0; mt < MT8; ++mt) {
        const int64_t k = int64_t(u) * kUnitK + ks * 16;
        xb[ks][mt] = (valid && xok[mt] && k + tig * 4 < p.kx) ? load_x2(reinterpret_cast<const uint2*>(xr[mt] + k))
                                                              : make_uint2(0u, 0u);
      }
  }
  // The x fragments of units u .. u + N - 1 into b.xb[0 .. N - 1], all inside x's columns: from one
  // base address per row with constant offsets.
  template <int N>
  __device__ __forceinline__ void load_xs_whole(int u, Batch& b) const {
#pragma unroll
    for (int mt = 0; mt < MT8; ++mt) {
      const uint2* base = reinterpret_cast<const uint2*>(xr[mt] + int64_t(u) * kUnitK);
#pragma unroll
      for (int j = 0; j < N; ++j)
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)  // element j * 32 + ks * 16: uint2 j * 8 + ks * 4
          b.xb[j][ks][mt] = xok[mt] ? load_x2(base + j * 8 + ks * 4) : make_uint2(0u, 0u);
    }
  }
  // Whether the batch at u is whole: U units inside the range [.., ue) and inside x's columns, so
  // that its loads need no bounds checks (every batch but a range's last, in the usual case).
  // Only the one-m-tile kernels take this path: with more rows of x the second copy of the loads
  // costs the wider kernels 30-50 registers (ptxas, nvcc 13.0).
  __device__ __forceinline__ bool whole(int u, int ue) const {
    return MT8 == 1 && u + U <= ue && int64_t(u + U) * kUnitK <= p.kx;
  }
  // The x fragments of a batch (zero for units at or past ue). A whole batch loads from one base
  // address per row with constant offsets and no checks but the row's.
  __device__ __forceinline__ void load_xs(int u, int ue, Batch& b) const {
    if (MT8 == 1 && whole(u, ue)) {
      load_xs_whole<U>(u, b);
      return;
    }
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
  }

  // The 4 words of one unit of one strip (k16 step ks, n16 half nt: q.x, q.y, q.z, q.w)
  // dequantized and multiplied into c[nt][mt]: with the scale folded into the weights (s2: the
  // record's scales as duplicated pairs) or as exact q - z (s2 unused).
  template <bool kScaled>
  __device__ __forceinline__ void strip_mma(const uint4& q, const uint2 (&xb)[2][MT8], const uint32_t (&s2)[4],
                                            const uint32_t (&nz)[4], float (&c)[2][MT8][4]) const {
    const uint32_t words[2][2] = {{q.x, q.y}, {q.z, q.w}};
#pragma unroll
    for (int ks = 0; ks < 2; ++ks)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        uint32_t a[4];
        if constexpr (kScaled)
          O::dequant(words[ks][nt], s2[2 * nt], s2[2 * nt + 1], nz[2 * nt], nz[2 * nt + 1], a);
        else
          O::dequant_unscaled(words[ks][nt], nz[2 * nt], nz[2 * nt + 1], a);
#pragma unroll
        for (int mt = 0; mt < MT8; ++mt) O::mma(c[nt][mt], a, xb[ks][mt].x, xb[ks][mt].y);
      }
  }
  // One unit with the scale folded into the weights (the tiled kernel's arithmetic): for batches
  // that straddle a group boundary (G < 32 * U, or act order's padded groups).
  __device__ __forceinline__ void compute_scaled(const uint4 (&q)[NS], const uint2 (&xb)[2][MT8],
                                                 const uint2 (&sr)[NS], const uint32_t (&zb)[NS]) {
#pragma unroll
    for (int ns = 0; ns < NS; ++ns) {
      uint32_t s2[4], nz[4];
      s2[0] = prmt(sr[ns].x, sr[ns].x, 0x1010u);
      s2[1] = prmt(sr[ns].x, sr[ns].x, 0x3232u);
      s2[2] = prmt(sr[ns].y, sr[ns].y, 0x1010u);
      s2[3] = prmt(sr[ns].y, sr[ns].y, 0x3232u);
      O::zero_codes(zb[ns], nz);
      strip_mma<true>(q[ns], xb, s2, nz, acc[ns]);
    }
  }
  // A batch inside one group (the usual case: batches are U-aligned and G = 128 is 4 units) is
  // summed exactly as q - z into fresh fp32 accumulators and scaled once per batch: 16 fewer
  // instructions per unit than folding the scale into every weight, and one rounding less.
  // Units at or past ue hold zero weights and zero x, which add exactly 0.
  __device__ __forceinline__ void compute_batch(int u, int ue, const Batch& b) {
    if (unit_group(u, p.g_magic) == unit_group(min(u + U, ue) - 1, p.g_magic)) {
      const uint32_t unused[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int ns = 0; ns < NS; ++ns) {  // one strip at a time: fewer live registers
        float part[2][MT8][4];
        for_each_acc<1, MT8>([&](int, int nt, int mt, int c) { part[nt][mt][c] = 0.f; });
        uint32_t nz[4];
        O::zero_codes(b.zb[ns], nz);
#pragma unroll
        for (int j = 0; j < U; ++j) strip_mma<false>(b.q[j][ns], b.xb[j], unused, nz, part);
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
  }

  // ---- 8-bit layers with both nibble planes in one pass (fp16; layout.h, planes8_bytes) ----
  // A batch holds Up units of each plane: b.q[j] the low plane's unit lo + j, b.q[Up + j] the high
  // plane's twin hi + j (hi = lo + upg, the next packed group), b.xb[j] their x (both planes read
  // the same x), b.sr the low plane's scales s (the high plane's are 16 s) and b.zb the zero points
  // z = 16 zh + zl of the two planes' records.
  __device__ __forceinline__ void records8(int lo, uint2 (&sr)[NS], uint32_t (&zb)[NS]) const {
    const int64_t rl = (int64_t(unit_group(lo, p.g_magic)) * p.strips + s0) * 8 + gid;
    const int64_t rh = rl + int64_t(p.strips) * 8;  // the next group's record
    const uint32_t* zr = reinterpret_cast<const uint32_t*>(p.zero_rec);
#pragma unroll
    for (int ns = 0; ns < NS; ++ns) {
      sr[ns] = __ldg(static_cast<const uint2*>(p.scale_rec) + rl + ns * 8);
      zb[ns] = __ldg(zr + rl + ns * 8) | (__ldg(zr + rh + ns * 8) << 4);  // zl, zh < 16 per byte
    }
  }
  // Exactly q - z per code, summed per batch in fp32 and scaled once by s (a batch lies in one
  // real group: the host takes this path only where upg is a multiple of Up).
  template <int Up>
  __device__ __forceinline__ void compute_batch8(const Batch& b) {
    static_assert(2 * Up <= U, "a batch holds Up units of each plane");
#pragma unroll
    for (int ns = 0; ns < NS; ++ns) {
      float part[2][MT8][4];
      for_each_acc<1, MT8>([&](int, int nt, int mt, int c) { part[nt][mt][c] = 0.f; });
      uint32_t nz[4];
      O::zero_codes8(b.zb[ns], nz);
#pragma unroll
      for (int j = 0; j < Up; ++j) {
        const uint4& ql = b.q[j][ns];
        const uint4& qh = b.q[Up + j][ns];
        const uint32_t lo[2][2] = {{ql.x, ql.y}, {ql.z, ql.w}}, hi[2][2] = {{qh.x, qh.y}, {qh.z, qh.w}};
#pragma unroll
        for (int ks = 0; ks < 2; ++ks)
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            uint32_t a[4];
            O::dequant8_unscaled(lo[ks][nt], hi[ks][nt], nz[2 * nt], nz[2 * nt + 1], a);
#pragma unroll
            for (int mt = 0; mt < MT8; ++mt) O::mma(part[nt][mt], a, b.xb[j][ks][mt].x, b.xb[j][ks][mt].y);
          }
      }
      const float2 s01 = O::scales(b.sr[ns].x), s23 = O::scales(b.sr[ns].y);
      const float sc[4] = {s01.x, s01.y, s23.x, s23.y};
      for_each_acc<1, MT8>([&](int, int nt, int mt, int c) {
        acc[ns][nt][mt][c] = fmaf(sc[2 * nt + (c >> 1)], part[nt][mt][c], acc[ns][nt][mt][c]);
      });
    }
  }

  // This warp's accumulators into its part of the block sum, red + warp * kRedStride floats
  // ([BM][kPitch]; kRedStride >= kRedFloats).
  template <int kRedStride>
  __device__ __forceinline__ void to_block_sum(float* red, int warp) const {
    static_assert(kRedStride >= TL::kRedFloats, "the warps' parts of the block sum overlap");
    float* mine = red + warp * kRedStride;
    for_each_acc<NS, MT8>([&](int ns, int nt, int mt, int c) {
      int col, row;
      acc_position(lane, nt, c, &col, &row);
      mine[(mt * 8 + row) * TL::kPitch + ns * kStripN + col] = acc[ns][nt][mt][c];
    });
  }
};

// The end of a GEMV block, after every compute warp has written its part of the block sum (and a
// __syncthreads): the parts summed in warp order, then the splits (the last block of a tile to
// arrive sums the fp32 partials in split order), bias, y. Run by all kBlockThreads threads.
template <class T, int NS, int MT8, int U, int kBlockThreads, int kRedStride>
__device__ __forceinline__ void gemv_finish(const GemmParams& p, const float* red, int* s_last) {
  using O = Ops<T>;
  using TL = GemvTile<NS, MT8, U>;
  constexpr int W = kGemvWarps;
  const GemvBlock blk(p);
  const int nti = blk.nti, z = blk.z, mti = blk.mti, splits = blk.splits;
  const int s0 = nti * NS;
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
    for (int w = 0; w < W; ++w) v += red[w * kRedStride + r * TL::kPitch + f];
    return v;
  };
  for (int o = threadIdx.x; o < rows * TL::BN; o += kBlockThreads) {
    const int r = o / TL::BN, f = o % TL::BN;
    if (splits == 1)
      store(r, f, warp_sum(r, f));
    else
      p.partials[(int64_t(z) * p.m + m0 + r) * ldp + s0 * kStripN + f] = warp_sum(r, f);
  }
  if (splits == 1) return;
  __threadfence();
  __syncthreads();
  const int tile = mti * p.n_tiles + nti;
  if (threadIdx.x == 0) *s_last = atomicAdd(&p.counters[tile], 1) == splits - 1;
  __syncthreads();
  if (!*s_last) return;
  __threadfence();
  for (int o = threadIdx.x; o < rows * TL::BN; o += kBlockThreads) {
    const int r = o / TL::BN, f = o % TL::BN;
    const float* src = p.partials + int64_t(m0 + r) * ldp + s0 * kStripN + f;
    float v = 0.f;
#pragma unroll 4
    for (int zz = 0; zz < splits; ++zz) v += __ldcg(src + int64_t(zz) * p.m * ldp);  // in split order
    store(r, f, v);
  }
  if (threadIdx.x == 0) p.counters[tile] = 0;  // ready for the next launch (stream order)
}

}  // namespace
}  // namespace nibble::cuda
