// Device building blocks shared by the cuda_w4a16 kernel files: one-instruction PTX wrappers, the
// per-dtype dequantization and mma (Ops<T>), the group lookup of a k-unit and the accumulator walk.
// Included by every .cu file of the plugin (each gets its own copy: nothing here has linkage).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

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

// Asks L2 for the 128-byte line holding `ptr` (no register, nothing waits on it): the GEMV's
// batches ahead, so that its own loads of them come from L2.
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(ptr));
}

// 16-byte load that leaves L1 alone and marks the line with an L2 policy (evict-first for weights,
// which are read once per call).
__device__ __forceinline__ uint4 ld_stream(const uint4* ptr, uint64_t policy) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(ptr), "l"(policy));
  return v;
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
  // 8-bit codes from both nibble planes (layout.h, planes8_bytes): zero points z = 16 zh + zl as
  // -(1024 + z) pairs for every r, and the words lo, hi of a unit pair -> a0..a3 as exactly
  // q - z (1024 + q by PRMT, minus 1024 + z: |q - z| < 256 is exact in fp16).
  __device__ static void zero_codes8(uint32_t zbytes, uint32_t (&nz)[4]) {
#pragma unroll
    for (int r = 0; r < 4; ++r) nz[r] = prmt(zbytes, 0u, 0x4040u | uint32_t(r) | (uint32_t(r) << 8)) | 0xE400E400u;
  }
  __device__ static void dequant8_unscaled(uint32_t lo, uint32_t hi, uint32_t nz_lo, uint32_t nz_hi,
                                           uint32_t (&a)[4]) {
    constexpr uint32_t kMagic = 0x64646464u;
    uint32_t even, odd;
    planes8_bytes(lo, hi, &even, &odd);
    a[0] = hadd2_f16(prmt(even, kMagic, planes8_sel(0)), nz_lo);
    a[1] = hadd2_f16(prmt(odd, kMagic, planes8_sel(1)), nz_hi);
    a[2] = hadd2_f16(prmt(even, kMagic, planes8_sel(2)), nz_lo);
    a[3] = hadd2_f16(prmt(odd, kMagic, planes8_sel(3)), nz_hi);
  }
  // An 8-bit layer's two planes in one pass in the tiled kernels: the zero-point bytes zl of the
  // low plane's record and zh of the high plane's (each < 16) make z = 16 zh + zl; nz[0..3] as
  // zero_codes8 (nz[4..7] unused here, bf16 needs them). dequant8: the words lo, hi -> a0..a3 for
  // rows r0, r0 + 1 (r0 = 0 for the first n16 half, 2 for the second): exactly q - z, then one
  // multiply by the scale, so each weight is rounded once as a 4-bit weight is (two planes
  // dequantized apart are rounded twice, and where they cancel that error is large against the
  // weight: docs/cuda.md "Outlier activations").
  __device__ static void zero_codes_pair(uint32_t zb_lo, uint32_t zb_hi, uint32_t (&nz)[8]) {
    uint32_t z4[4];
    zero_codes8(zb_lo | (zb_hi << 4), z4);
#pragma unroll
    for (int r = 0; r < 4; ++r) nz[r] = nz[4 + r] = z4[r];
  }
  __device__ static void dequant8(uint32_t lo, uint32_t hi, uint32_t s_lo, uint32_t s_hi, const uint32_t (&nz)[8],
                                  int r0, uint32_t (&a)[4]) {
    dequant8_unscaled(lo, hi, nz[r0], nz[r0 + 1], a);
    a[0] = hmul2_f16(a[0], s_lo);
    a[1] = hmul2_f16(a[1], s_hi);
    a[2] = hmul2_f16(a[2], s_lo);
    a[3] = hmul2_f16(a[3], s_hi);
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
  // An 8-bit layer's two planes in one pass (see Ops<__half>): bf16 cannot hold 128 + q for an
  // 8-bit q, so the planes stay apart until the sum: nz[0..3] are the low plane's -(128 + zl),
  // nz[4..7] the high plane's -(128 + zh); per pair (qh - zh) * 16 + (ql - zl) = q - z is exact
  // (|q - z| < 256 fits bf16's 8 significant bits), then one multiply by the scale rounds once.
  __device__ static void zero_codes_pair(uint32_t zb_lo, uint32_t zb_hi, uint32_t (&nz)[8]) {
    uint32_t l[4], h[4];
    zero_codes(zb_lo, l);
    zero_codes(zb_hi, h);
#pragma unroll
    for (int r = 0; r < 4; ++r) nz[r] = l[r], nz[4 + r] = h[r];
  }
  __device__ static void dequant8(uint32_t lo, uint32_t hi, uint32_t s_lo, uint32_t s_hi, const uint32_t (&nz)[8],
                                  int r0, uint32_t (&a)[4]) {
    constexpr uint32_t kMagic = 0x43004300u, kOne = 0x3F803F80u, kSixteen = 0x41804180u, kNegZero = 0x80008000u;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int r = r0 + (jj & 1);
      const uint32_t dl = hfma2_bf16(lop3_and_or(lo >> (4 * jj), 0x000f000fu, kMagic), kOne, nz[r]);
      const uint32_t dh = hfma2_bf16(lop3_and_or(hi >> (4 * jj), 0x000f000fu, kMagic), kOne, nz[4 + r]);
      a[jj] = hfma2_bf16(hfma2_bf16(dh, kSixteen, dl), (jj & 1) ? s_hi : s_lo, kNegZero);
    }
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


}  // namespace
}  // namespace nibble::cuda
