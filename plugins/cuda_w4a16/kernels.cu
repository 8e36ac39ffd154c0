// cuda_w4a16 kernels: the W4A16 matmul (one template, five block tiles), the repack kernels of
// process_weights, the activation gather of act order, and the pieces of the dequantize + cuBLAS
// path. The packed layout is described in layout.h; the design and the predicted times are in
// README.md beside this file.
//
// The matmul, in one paragraph. Y^T = W^T X^T on mma.m16n8k16 with the weights as the A operand
// (16 output features x 16 k) and x as the B operand (16 k x 8 rows of x). A block owns a tile of
// BN features x BM rows and walks K in stages of 64 through a cp.async pipeline of STAGES shared-
// memory buffers (weights streamed with an L2 evict-first policy, x and the scale records beside
// them). Each warp dequantizes its own weights straight into A fragments (LOP3 into the mantissa of
// a 16-bit magic number, exact subtraction of the zero point, one multiply by the scale) and issues
// NS * 2 * 2 * MT8 mma per 32 k. The work (tiles x k stages) is cut into equal contiguous pieces,
// one per block (stream-K): every SM gets the same number of stages whatever the shape, which is
// what keeps 132 SMs busy on skinny shapes. A tile shared by several blocks is summed by the last
// of them to arrive (fp32 partials, fixed order, so results are deterministic).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "kernels.h"
#include "layout.h"

namespace nibble::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// PTX wrappers. Each is one instruction; the comment says why it is used.

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy that bypasses L1 (.cg: nothing here is reread by the same SM soon)
// and zero-fills when src_bytes is 0 (rows past M, columns past K: no branches in the loaders).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// The same with an L2 cache policy: weights are read once per call, so evict-first keeps them from
// pushing x, the scale records and the partial tiles out of L2.
__device__ __forceinline__ void cp_async16_policy(uint32_t dst, const void* src, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "l"(policy));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ uint64_t l2_policy(bool evict_first) {
  uint64_t p;
  if (evict_first)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  else
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// (a & b) | c in one instruction: drops masked code bits into a magic number's mantissa.
__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// Byte permute: builds 16-bit pairs from bytes (zero points) and duplicates a 16-bit half.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

__device__ __forceinline__ uint32_t hadd2_f16(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("add.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hmul2_f16(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t hfma2_f16(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}
// bf16x2 add and mul exist only from sm_90; fma.rn.bf16x2 exists from sm_80, so both are an fma.
__device__ __forceinline__ uint32_t hfma2_bf16(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// ---------------------------------------------------------------------------------------------
// Per-dtype pieces: the dequantization of one packed word into one A fragment, the zero-point
// encodings it needs, the mma instruction and conversions.

template <class T>
struct Ops;

template <>
struct Ops<__half> {
  // Zero-point encodings for the two kinds of 16-bit pairs in a word (see dequant): pairs of row
  // gid (r even) come out as 1024 + q and need -(1024 + z); pairs of row gid + 8 (r odd) come out
  // as 1024 + 16 q and, after the multiply by 1/16, need -(64 + z). Both are exact in fp16.
  __device__ static void zero_codes(uint32_t zbytes, uint32_t (&nz)[4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      // byte r of zbytes into both 16-bit halves, OR'd into the mantissa of -1024: -(1024 + z).
      const uint32_t v = prmt(zbytes, 0u, 0x4040u | uint32_t(r) | (uint32_t(r) << 8)) | 0xE400E400u;
      nz[r] = (r & 1) ? hadd2_f16(v, 0x63806380u /* 960 */) : v;  // -(1024 + z) + 960 = -(64 + z)
    }
  }
  // One word -> a0..a3 (layout.h: nibble jj = lower element of a_jj, nibble jj + 4 = upper).
  // fp16 trick (as Marlin): 0x6400 | q is the fp16 number 1024 + q for a 4-bit q in the low
  // mantissa bits, and 0x6400 | (q << 4) is 1024 + 16 q; so the masks 0x000f000f and 0x00f000f0 on
  // q and q >> 8 give all four pairs with one shift. Then (1024 + q) - (1024 + z) and
  // (1024 + 16 q) / 16 - (64 + z) are exactly q - z, and one multiply by the scale rounds once.
  __device__ static void dequant(uint32_t q, uint32_t s_lo, uint32_t s_hi, uint32_t nz_lo, uint32_t nz_hi,
                                 uint32_t (&a)[4]) {
    constexpr uint32_t kMagic = 0x64006400u, kSixteenth = 0x2C002C00u;  // 1024, 1/16
    const uint32_t q8 = q >> 8;
    a[0] = hmul2_f16(hadd2_f16(lop3_and_or(q, 0x000f000fu, kMagic), nz_lo), s_lo);
    a[1] = hmul2_f16(hfma2_f16(lop3_and_or(q, 0x00f000f0u, kMagic), kSixteenth, nz_hi), s_hi);
    a[2] = hmul2_f16(hadd2_f16(lop3_and_or(q8, 0x000f000fu, kMagic), nz_lo), s_lo);
    a[3] = hmul2_f16(hfma2_f16(lop3_and_or(q8, 0x00f000f0u, kMagic), kSixteenth, nz_hi), s_hi);
  }
  // The same without the scale: exactly q - z (the GEMV multiplies the fp32 sums of a group by it).
  __device__ static void dequant_unscaled(uint32_t q, uint32_t nz_lo, uint32_t nz_hi, uint32_t (&a)[4]) {
    constexpr uint32_t kMagic = 0x64006400u, kSixteenth = 0x2C002C00u;
    const uint32_t q8 = q >> 8;
    a[0] = hadd2_f16(lop3_and_or(q, 0x000f000fu, kMagic), nz_lo);
    a[1] = hfma2_f16(lop3_and_or(q, 0x00f000f0u, kMagic), kSixteenth, nz_hi);
    a[2] = hadd2_f16(lop3_and_or(q8, 0x000f000fu, kMagic), nz_lo);
    a[3] = hfma2_f16(lop3_and_or(q8, 0x00f000f0u, kMagic), kSixteenth, nz_hi);
  }
  // The two scales of a record pair as floats (lower half first).
  __device__ static float2 scales(uint32_t pair) {
    __half2_raw r;
    r.x = uint16_t(pair & 0xffffu);
    r.y = uint16_t(pair >> 16);
    return __half22float2(__half2(r));
  }
  __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static float to_float(__half v) { return __half2float(v); }
  __device__ static __half from_float(float v) { return __float2half_rn(v); }
};

template <>
struct Ops<__nv_bfloat16> {
  // bf16 has 7 mantissa bits, so 0x4300 | (q << 4) would spill into the exponent: all four pairs
  // use 0x4300 | q = 128 + q (shifts 0, 4, 8, 12) and need -(128 + z) for every row.
  __device__ static void zero_codes(uint32_t zbytes, uint32_t (&nz)[4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
      nz[r] = prmt(zbytes, 0u, 0x4040u | uint32_t(r) | (uint32_t(r) << 8)) | 0xC300C300u;
  }
  __device__ static void dequant(uint32_t q, uint32_t s_lo, uint32_t s_hi, uint32_t nz_lo, uint32_t nz_hi,
                                 uint32_t (&a)[4]) {
    constexpr uint32_t kMagic = 0x43004300u, kOne = 0x3F803F80u, kNegZero = 0x80008000u;
    // (128 + q) * 1 + -(128 + z) = q - z exactly; then * scale + (-0) rounds once.
    a[0] = hfma2_bf16(hfma2_bf16(lop3_and_or(q, 0x000f000fu, kMagic), kOne, nz_lo), s_lo, kNegZero);
    a[1] = hfma2_bf16(hfma2_bf16(lop3_and_or(q >> 4, 0x000f000fu, kMagic), kOne, nz_hi), s_hi, kNegZero);
    a[2] = hfma2_bf16(hfma2_bf16(lop3_and_or(q >> 8, 0x000f000fu, kMagic), kOne, nz_lo), s_lo, kNegZero);
    a[3] = hfma2_bf16(hfma2_bf16(lop3_and_or(q >> 12, 0x000f000fu, kMagic), kOne, nz_hi), s_hi, kNegZero);
  }
  __device__ static void dequant_unscaled(uint32_t q, uint32_t nz_lo, uint32_t nz_hi, uint32_t (&a)[4]) {
    constexpr uint32_t kMagic = 0x43004300u, kOne = 0x3F803F80u;
    a[0] = hfma2_bf16(lop3_and_or(q, 0x000f000fu, kMagic), kOne, nz_lo);
    a[1] = hfma2_bf16(lop3_and_or(q >> 4, 0x000f000fu, kMagic), kOne, nz_hi);
    a[2] = hfma2_bf16(lop3_and_or(q >> 8, 0x000f000fu, kMagic), kOne, nz_lo);
    a[3] = hfma2_bf16(lop3_and_or(q >> 12, 0x000f000fu, kMagic), kOne, nz_hi);
  }
  __device__ static float2 scales(uint32_t pair) {
    return make_float2(__uint_as_float(pair << 16), __uint_as_float(pair & 0xffff0000u));
  }
  __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  __device__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};

// Group of k-unit u without a division (an integer division by a run-time value is ~20 dependent
// instructions; the loaders run this for every unit).
__device__ __forceinline__ int unit_group(int u, uint32_t magic) {
  return magic ? int(__umulhi(uint32_t(u), magic)) : u;
}

// Calls f(ns, nt, mt, c) for every element of a warp's accumulators acc[NS][2][MT8][4] (strip,
// n16 half, m8 tile, mma output element), fully unrolled.
template <int NS, int MT8, class F>
__device__ __forceinline__ void for_each_acc(F&& f) {
#pragma unroll
  for (int ns = 0; ns < NS; ++ns)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int mt = 0; mt < MT8; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) f(ns, nt, mt, c);
}

// ---------------------------------------------------------------------------------------------
// The matmul.

// Block tile of one variant. NS: strips (32 features) per warp; MT8: m8 tiles per warp; WN x WM
// warps; STAGES: depth of the cp.async pipeline.
template <int NS, int MT8, int WN, int WM, int STAGES>
struct Tile {
  static constexpr int kThreads = WN * WM * 32;
  static constexpr int kStrips = WN * NS;  // strips per block
  static constexpr int BN = kStrips * kStripN;
  static constexpr int BM = WM * MT8 * 8;
  // x rows in shared memory: 64 halves of data + 16 of padding. The pitch (160 B) is 32 mod 128,
  // so each half-warp's 8-byte B-fragment loads (rows r..r+3 x 32 contiguous bytes) hit 32
  // different banks.
  static constexpr int kXPitch = 80;
  static constexpr int kWBytes = kStrips * 2 * 512;  // 2 units per strip per stage
  static constexpr int kXBytes = BM * kXPitch * 2;
  static constexpr int kSBytes = kStrips * 2 * 64;   // scale records (8 gid x 4 x 2 B) per unit
  static constexpr int kZBytes = kStrips * 2 * 32;   // zero records (8 gid x 4 x 1 B) per unit
  static constexpr int kStageBytes = kWBytes + kXBytes + kSBytes + kZBytes;
  static constexpr int kSmem = STAGES * kStageBytes;
  static_assert(kStageBytes % 16 == 0, "stages must stay 16-byte aligned for cp.async");
};

template <class T, int NS, int MT8, int WN, int WM, int STAGES>
__global__ void __launch_bounds__(WN* WM * 32) w4a16_gemm_kernel(const GemmParams p) {
  using TL = Tile<NS, MT8, WN, WM, STAGES>;
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

  // ---- producer: stage s <- work item i (tile i / KT, k stage i % KT) ----
  auto load = [&](int t, int kt, int s) {
    const int mti = t % p.m_tiles, nti = t / p.m_tiles;
    unsigned char* st = smem + s * TL::kStageBytes;
    // Weights: kStrips strips x 2 units x 32 lanes x 16 B; one strip's two units are contiguous.
    const uint4* wsrc = static_cast<const uint4*>(p.w) + (int64_t(nti) * TL::kStrips * p.ku + 2 * kt) * 32;
#pragma unroll 1
    for (int c = tid; c < TL::kStrips * 64; c += TL::kThreads) {
      const int strip = c >> 6, rem = c & 63;
      cp_async16_policy(smem_u32(st) + c * 16, wsrc + int64_t(strip) * p.ku * 32 + rem, policy);
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
      const int g = unit_group(2 * kt + u, p.g_magic);
      const auto* src = static_cast<const unsigned char*>(p.scale_rec) +
                        (int64_t(g) * p.strips + int64_t(nti) * TL::kStrips + strip) * 64 + part * 16;
      cp_async16(ss + su * 64 + part * 16, src, 16);
    }
    if (p.zero_rec) {
      const uint32_t zs = ss + TL::kSBytes;
#pragma unroll 1
      for (int c = tid; c < TL::kStrips * 4; c += TL::kThreads) {
        const int su = c >> 1, part = c & 1, strip = su >> 1, u = su & 1;
        const int g = unit_group(2 * kt + u, p.g_magic);
        const uint8_t* src = p.zero_rec + (int64_t(g) * p.strips + int64_t(nti) * TL::kStrips + strip) * 32 + part * 16;
        cp_async16(zs + su * 32 + part * 16, src, 16);
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
      uint32_t s2[NS][4], nz[NS][4];
#pragma unroll
      for (int ns = 0; ns < NS; ++ns) {
        const int su = (wn * NS + ns) * 2 + u;
        const uint2 sr = *reinterpret_cast<const uint2*>(ss + su * 64 + gid * 8);
        const uint32_t zb = p.zero_rec ? *reinterpret_cast<const uint32_t*>(sz + su * 32 + gid * 4) : 0x08080808u;
        s2[ns][0] = prmt(sr.x, sr.x, 0x1010u);  // duplicate the lower / upper 16 bits
        s2[ns][1] = prmt(sr.x, sr.x, 0x3232u);
        s2[ns][2] = prmt(sr.y, sr.y, 0x1010u);
        s2[ns][3] = prmt(sr.y, sr.y, 0x3232u);
        O::zero_codes(zb, nz[ns]);
      }
      uint4 q[NS];
#pragma unroll
      for (int ns = 0; ns < NS; ++ns) q[ns] = sw[((wn * NS + ns) * 2 + u) * 32 + lane];
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
          O::dequant(ks == 0 ? q[ns].x : q[ns].z, s2[ns][0], s2[ns][1], nz[ns][0], nz[ns][1], a);
#pragma unroll
          for (int mt = 0; mt < MT8; ++mt) O::mma(acc[ns][0][mt], a, xb[mt].x, xb[mt].y);
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

// ---------------------------------------------------------------------------------------------
// The streaming GEMV (small M). The tiled kernel above stages everything through a shared-memory
// pipeline, which costs ~180 warp instructions per 1024 weights (Nsight, README "Results"): at
// M = 1 that is the limit, not DRAM. Here nothing goes through shared memory on the way in: each
// warp streams its own contiguous K range of NS strips with 16-byte non-caching loads straight
// into registers (U units of every strip in flight: 128 bytes per lane), reads the scale and zero
// records and its x fragments through the read-only cache, dequantizes exactly as the tiled
// kernel does (same Ops, same rounding) and issues the same mma. The 4 warps of a block split the
// block's K range and sum through shared memory in warp order; blocks along grid.y split K
// further and the last to arrive sums their fp32 partials in split order (deterministic).

// 16-byte load that leaves L1 alone and marks the line evict-first in L2: every weight is read
// once per call.
// Programmatic dependent launch (sm_90+; no-ops elsewhere and when launched without the
// attribute): wait until the previous kernel in the stream has completed and its writes are
// visible; let the next kernel in the stream be scheduled.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ uint4 ld_stream(const uint4* ptr, uint64_t policy) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "l"(policy));
  return v;
}

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

  // One batch at a time (double-buffering two batches measured slower: twice the registers, half
  // the warps per SM). The last batch of the K range is partial only when ku is not a multiple
  // of U: its missing units load as zero weights and zero x, which add exactly 0.
  //
  // Launched as a programmatic dependent (p.overlap), this kernel may start while the previous one
  // in the stream is finishing: the first batch's weights are requested before the wait, and
  // only x, the partials, the counters and y (which the previous kernel may write or read) are
  // touched after it.
  for (int u = ub; u < ue; u += U) {
    Batch b;
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

// The list of variants (keep it short: every entry is compiled for every architecture).
//                       NS MT8 WN WM STAGES
#define NIBBLE_CUDA_VARIANTS(X) \
  X(kS1, "s1", 1, 1, 4, 1, 6)   \
  X(kS2, "s2", 1, 2, 4, 1, 6)   \
  X(kS4, "s4", 1, 4, 4, 1, 5)   \
  X(kS8, "s8", 1, 8, 4, 1, 4)   \
  X(kL, "l", 2, 8, 4, 2, 4)

template <class T, int NS, int MT8, int WN, int WM, int STAGES>
cudaError_t setup_one(KernelInfo& info, const char* name, int sms) {
  using TL = Tile<NS, MT8, WN, WM, STAGES>;
  auto kernel = w4a16_gemm_kernel<T, NS, MT8, WN, WM, STAGES>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, TL::kSmem);
  if (e != cudaSuccess) return e;
  // Ask for the largest shared-memory carveout: the occupancy computed below assumes it, and with
  // the driver's default the SM may be configured for fewer resident blocks than that (measured:
  // the small-M variants then ran in two or three waves instead of one).
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, TL::kThreads, TL::kSmem);
  if (e != cudaSuccess) return e;
  info = KernelInfo{name, TL::BN, TL::BM, TL::kThreads, TL::kSmem, per_sm * sms, kTileK / kUnitK};
  return cudaSuccess;
}

template <class T, int NS, int MT8, int WN, int WM, int STAGES>
cudaError_t launch_one(const GemmParams& p, int grid, cudaStream_t stream) {
  using TL = Tile<NS, MT8, WN, WM, STAGES>;
  w4a16_gemm_kernel<T, NS, MT8, WN, WM, STAGES><<<grid, TL::kThreads, TL::kSmem, stream>>>(p);
  return cudaGetLastError();
}

// ---------------------------------------------------------------------------------------------
// process_weights and helper kernels (run once per layer, or cheap next to the matmul).

// One thread per (strip, k-unit, lane): gathers its 32 codes from the canonical qweight.
__global__ void repack_weights_kernel(const uint32_t* __restrict__ qweight, int64_t k, int64_t n,
                                      const int32_t* __restrict__ perm, int32_t strips, int32_t ku,
                                      uint4* __restrict__ out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(strips) * ku * 32) return;
  const int lane = int(idx & 31);
  const int64_t rest = idx >> 5;
  const int64_t unit_k = rest % ku, strip = rest / ku;
  uint32_t words[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int row, col;
      unit_nibble_position(lane, w, j, &row, &col);
      const int64_t kk = unit_k * kUnitK + row, nn = strip * kStripN + col;
      const int64_t src = perm ? perm[kk] : kk;
      uint32_t code = 0;
      if (nn < n && src >= 0 && src < k) code = (qweight[(src >> 3) * n + nn] >> (4 * (src & 7))) & 0xfu;
      word |= code << (4 * j);
    }
    words[w] = word;
  }
  out[idx] = make_uint4(words[0], words[1], words[2], words[3]);
}

__device__ float load_scale(const void* scales, int32_t dtype, int64_t i) {
  if (dtype == 3) return static_cast<const float*>(scales)[i];
  const uint16_t bits = static_cast<const uint16_t*>(scales)[i];
  if (dtype == 2) return __uint_as_float(uint32_t(bits) << 16);
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}

// One thread per (packed group, strip, gid): the four entries of its scale and zero records.
template <class T>
__global__ void repack_records_kernel(const void* __restrict__ scales, int32_t scale_dtype,
                                      const uint8_t* __restrict__ zeros, int64_t n,
                                      const int32_t* __restrict__ gmap, int32_t groups_pad, int32_t strips,
                                      T* __restrict__ scale_rec, uint8_t* __restrict__ zero_rec) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(groups_pad) * strips * 8) return;
  const int gid = int(idx & 7);
  const int64_t strip = (idx >> 3) % strips, g = (idx >> 3) / strips;
  const int64_t cg = gmap[g];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t col = strip * kStripN + record_col(gid, r);
    const bool ok = cg >= 0 && col < n;
    scale_rec[idx * 4 + r] = Ops<T>::from_float(ok ? load_scale(scales, scale_dtype, cg * n + col) : 0.f);
    if (zero_rec) zero_rec[idx * 4 + r] = ok && zeros ? zeros[cg * n + col] : uint8_t(8);
  }
}

// One thread per 8 output elements (16 bytes) of x'.
__global__ void prep_x_kernel(const uint16_t* __restrict__ x, int64_t m, int64_t k,
                              const int32_t* __restrict__ perm, int64_t kp, uint16_t* __restrict__ out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks = kp / 8;
  if (idx >= m * chunks) return;
  const int64_t row = idx / chunks, j0 = (idx % chunks) * 8;
  uint16_t v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int64_t src = perm ? perm[j0 + e] : j0 + e;
    v[e] = (src >= 0 && src < k) ? x[row * k + src] : uint16_t(0);
  }
  uint4 o;
  o.x = v[0] | (uint32_t(v[1]) << 16);
  o.y = v[2] | (uint32_t(v[3]) << 16);
  o.z = v[4] | (uint32_t(v[5]) << 16);
  o.w = v[6] | (uint32_t(v[7]) << 16);
  reinterpret_cast<uint4*>(out)[idx] = o;
}

// Dense copy of the weights for the cuBLAS path. One block of 8 warps per (8 strips, k-unit):
// each lane dequantizes its 32 weights (the matmul's rounding: (q - z) exact, one rounding of the
// product) into a shared 32 x 256 tile, which the block then writes as 32 rows of 512 contiguous
// bytes (16-byte stores; a lane's own values are 4 columns x 8 rows apart, which would make
// 2-byte scattered stores).
template <class T>
__global__ void __launch_bounds__(256) dequant_dense_kernel(const uint4* __restrict__ w, const T* __restrict__ scale_rec,
                                                            const uint8_t* __restrict__ zero_rec, int32_t strips,
                                                            int32_t ku, uint32_t g_magic, int32_t n0, int32_t nc,
                                                            T* __restrict__ out) {
  constexpr int kPitch = 8 * kStripN + 8;  // halves; 16-byte padding against bank conflicts
  __shared__ __align__(16) uint16_t tile[kUnitK][kPitch];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2;
  const int unit_k = blockIdx.y;
  const int64_t strip = n0 / kStripN + int64_t(blockIdx.x) * 8 + warp;
  const uint4 q = w[(strip * ku + unit_k) * 32 + lane];
  const int64_t g = unit_group(unit_k, g_magic);
  const int64_t rec = (g * strips + strip) * 8 + gid;
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int wd = 0; wd < 4; ++wd)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int row, col;
      unit_nibble_position(lane, wd, j, &row, &col);
      const int r = 2 * (col >> 4) + ((col >> 3) & 1);  // record entry of this column
      const float s = Ops<T>::to_float(scale_rec[rec * 4 + r]);
      const int z = zero_rec ? zero_rec[rec * 4 + r] : 8;
      const int code = int((words[wd] >> (4 * j)) & 0xfu);
      const T v = Ops<T>::from_float(float(code - z) * s);
      tile[row][warp * kStripN + col] = *reinterpret_cast<const uint16_t*>(&v);
    }
  __syncthreads();
  T* dst = out + int64_t(unit_k) * kUnitK * nc + int64_t(blockIdx.x) * 8 * kStripN;
#pragma unroll
  for (int i = threadIdx.x; i < kUnitK * 32; i += 256) {  // 32 rows x 32 chunks of 16 bytes
    const int row = i >> 5, chunk = i & 31;
    *reinterpret_cast<uint4*>(dst + int64_t(row) * nc + chunk * 8) =
        *reinterpret_cast<const uint4*>(&tile[row][chunk * 8]);
  }
}

template <class T>
__global__ void add_bias_kernel(T* __restrict__ y, const T* __restrict__ bias, int64_t m, int64_t n) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * n) return;
  y[idx] = Ops<T>::from_float(Ops<T>::to_float(y[idx]) + Ops<T>::to_float(bias[idx % n]));
}

int blocks_for(int64_t threads, int per_block = 256) { return int((threads + per_block - 1) / per_block); }

}  // namespace

cudaError_t kernel_setup(KernelInfo info[2][kNumKernels]) {
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return e;
#define NIBBLE_SETUP(id, name, NS, MT8, WN, WM, ST)                                          \
  if ((e = setup_one<__half, NS, MT8, WN, WM, ST>(info[0][id], name, sms)) != cudaSuccess) return e; \
  if ((e = setup_one<__nv_bfloat16, NS, MT8, WN, WM, ST>(info[1][id], name, sms)) != cudaSuccess) return e;
  NIBBLE_CUDA_VARIANTS(NIBBLE_SETUP)
#undef NIBBLE_SETUP
#define NIBBLE_SETUP_GEMV(id, NS, MT8, U)                                                              \
  if ((e = setup_gemv<__half, NS, MT8, U>(info[0][id], kKernelNames[id], sms)) != cudaSuccess) return e; \
  if ((e = setup_gemv<__nv_bfloat16, NS, MT8, U>(info[1][id], kKernelNames[id], sms)) != cudaSuccess) return e;
  NIBBLE_CUDA_GEMV_VARIANTS(NIBBLE_SETUP_GEMV)
#undef NIBBLE_SETUP_GEMV
  return cudaSuccess;
}

cudaError_t launch_gemm(KernelId id, Act act, const GemmParams& p, int grid, cudaStream_t stream) {
#define NIBBLE_LAUNCH(kid, name, NS, MT8, WN, WM, ST)                                             \
  case kid:                                                                                        \
    return act == Act::f16 ? launch_one<__half, NS, MT8, WN, WM, ST>(p, grid, stream)              \
                           : launch_one<__nv_bfloat16, NS, MT8, WN, WM, ST>(p, grid, stream);
#define NIBBLE_LAUNCH_GEMV(kid, NS, MT8, U)                                           \
  case kid:                                                                              \
    return act == Act::f16 ? launch_gemv<__half, NS, MT8, U>(p, grid, stream)        \
                           : launch_gemv<__nv_bfloat16, NS, MT8, U>(p, grid, stream);
  switch (id) {
    NIBBLE_CUDA_VARIANTS(NIBBLE_LAUNCH)
    NIBBLE_CUDA_GEMV_VARIANTS(NIBBLE_LAUNCH_GEMV)
    default: return cudaErrorInvalidValue;
  }
#undef NIBBLE_LAUNCH
#undef NIBBLE_LAUNCH_GEMV
}

cudaError_t launch_repack_weights(const uint32_t* qweight, int64_t k, int64_t n, const int32_t* perm,
                                  int32_t strips, int32_t ku, void* out, cudaStream_t stream) {
  const int64_t threads = int64_t(strips) * ku * 32;
  repack_weights_kernel<<<blocks_for(threads), 256, 0, stream>>>(qweight, k, n, perm, strips, ku,
                                                                 static_cast<uint4*>(out));
  return cudaGetLastError();
}

cudaError_t launch_repack_records(const void* scales, int32_t scale_dtype, const uint8_t* zeros, int64_t n,
                                  const int32_t* gmap, int32_t groups_pad, int32_t strips, Act act,
                                  void* scale_rec, uint8_t* zero_rec, cudaStream_t stream) {
  const int64_t threads = int64_t(groups_pad) * strips * 8;
  if (act == Act::f16)
    repack_records_kernel<__half><<<blocks_for(threads), 256, 0, stream>>>(
        scales, scale_dtype, zeros, n, gmap, groups_pad, strips, static_cast<__half*>(scale_rec), zero_rec);
  else
    repack_records_kernel<__nv_bfloat16><<<blocks_for(threads), 256, 0, stream>>>(
        scales, scale_dtype, zeros, n, gmap, groups_pad, strips, static_cast<__nv_bfloat16*>(scale_rec), zero_rec);
  return cudaGetLastError();
}

cudaError_t launch_prep_x(const void* x, int64_t m, int64_t k, const int32_t* perm, int64_t kp, void* out,
                          cudaStream_t stream) {
  const int64_t threads = m * (kp / 8);
  prep_x_kernel<<<blocks_for(threads), 256, 0, stream>>>(static_cast<const uint16_t*>(x), m, k, perm, kp,
                                                         static_cast<uint16_t*>(out));
  return cudaGetLastError();
}

cudaError_t launch_dequant_dense(const void* w, const void* scale_rec, const uint8_t* zero_rec, int32_t strips,
                                 int32_t ku, uint32_t g_magic, int32_t n0, int32_t nc, Act act, void* out,
                                 cudaStream_t stream) {
  const dim3 grid(unsigned(nc / (8 * kStripN)), unsigned(ku));
  if (act == Act::f16)
    dequant_dense_kernel<__half><<<grid, 256, 0, stream>>>(static_cast<const uint4*>(w),
                                                           static_cast<const __half*>(scale_rec), zero_rec, strips,
                                                           ku, g_magic, n0, nc, static_cast<__half*>(out));
  else
    dequant_dense_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(
        static_cast<const uint4*>(w), static_cast<const __nv_bfloat16*>(scale_rec), zero_rec, strips, ku, g_magic, n0,
        nc, static_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

cudaError_t launch_add_bias(void* y, const void* bias, int64_t m, int64_t n, Act act, cudaStream_t stream) {
  if (act == Act::f16)
    add_bias_kernel<__half><<<blocks_for(m * n), 256, 0, stream>>>(static_cast<__half*>(y),
                                                                   static_cast<const __half*>(bias), m, n);
  else
    add_bias_kernel<__nv_bfloat16><<<blocks_for(m * n), 256, 0, stream>>>(
        static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(bias), m, n);
  return cudaGetLastError();
}

}  // namespace nibble::cuda
