// The AVX-512 BF16 kernel forms, for 4-bit and native 2-bit codes: the one-tile traits
// (Avx512Bf16, Avx512Bf16Bits2, for kernel_fused_impl.h) and the GEMM form (gemm_block, walked by
// kernel_gemm_impl.h), whose line decoding is a policy (Decode4, Decode2).
//
// A pair of rows J (rows J and J + 4 of a line, cpu_weights.h kPairStride) becomes the bf16 numbers
// 128 + q in the low and high halves of each 32-bit lane: D::pair moves the two codes to bits 0 and
// 16, one vpternlogd keeps them and or-s in 0x4300 (bf16 128.0); one vdpbf16ps multiplies both by
// the same pair of x and adds them to an f32 accumulator.
//
// Exactness: 128 + q has 8 significant bits and x's bf16 parts 8, so every product is exact in
// f32; vdpbf16ps adds the two products of a lane to the accumulator in f32 (as the FMA kernels
// do, round to nearest; denormal inputs read as zero, which only bf16 x below 2^-126 could be).
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernel_fused_impl.h"
#include "kernel_gemm_impl.h"
#include "scales_avx512.h"

namespace nibble::cpu {

namespace {

template <int P>
struct Avx512Bf16 {
  using V = __m512;
  using W = __m512i;
  static constexpr int kMaxRows = 8;
  static constexpr int kBits = 4;   // 4-bit codes (2-bit: Avx512Bf16Bits2 below)
  static constexpr int kSteps = 4;  // one operand per pair of rows
  static constexpr int kParts = P;  // bf16 parts per x: 1 (bf16 x) or 2 (fp16 x = hi + lo)
  static constexpr int kXWords = 4 * P;
  static constexpr float kScale = trick_scale(XForm::kBf16);
  static constexpr bool kHasExact = false;
  // Output chains per row (kernel_fused_impl.h; t = 128 + q loses little to them): as many as
  // the 32 zmm leave beside the accumulators.
  static constexpr int out_chains(int rows) { return rows == 1 ? 8 : rows == 2 ? 4 : rows <= 6 ? 2 : 1; }
  // Each row makes 4 P products per line (8 P over the pair of lines the loop takes at once).
  static constexpr int chains(int rows) { return rows <= 2 ? 8 : rows <= 4 ? 4 : 2; }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_scales(const void* p, ScaleType st) { return load_scales_avx512(p, st); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  // The line is loaded once and kept in a register: left alone, the compiler folds the load into
  // each of the three shifts, 4 512-bit loads per line instead of 1, and at M = 1 the loads bound
  // the loop.
  static W load_codes(const uint32_t* p) {
    W w = _mm512_load_si512(p);
    asm("" : "+v"(w));
    return w;
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  // Pair J (rows 2J, 2J + 1) as two bf16 128 + q: the codes at bits 4J and 16 + 4J moved to bits
  // 0 and 16, kept, and or-ed into 0x4300 (bf16 128.0) in both halves.
  template <int J>
  static V trick(const W& w) {
    const __m512i moved = J == 0 ? w : _mm512_srli_epi32(w, 4 * J);
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(moved, _mm512_set1_epi32(0x000f000f), _mm512_set1_epi32(0x43004300), 0xea));
  }
  template <int J>
  static V exact(const W&, V) { return zero(); }  // never used: f32 activations take the f32 kernels
  // acc += t.lo * x.lo + t.hi * x.hi, x = one u32 of xp (a bf16 pair) broadcast.
  static V madd(V t, const uint32_t* x, V acc) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_castps_si512(t), (__m512bh)_mm512_set1_epi32(int(*x)));
  }
};

// The GEMM form for many rows: kGemmTiles tiles x MB <= kGemmRows rows of accumulators (24
// zmm), so that every x broadcast feeds 4 vdpbf16ps and every weight operand MB of them (the
// one-tile kernel above needs a broadcast per vdpbf16ps and runs at ~65% of their peak). Outputs
// stay in y between segments; kernel_gemm_impl.h walks the blocks.
template <class D, int P, int MB, int NT, bool kAsym>
void gemm_block(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const uint32_t* xp, int64_t rb,
                const float* xs, float* y, int64_t ldy, int64_t pf) {
  const __m512i mask = _mm512_set1_epi32(D::kBits == 2 ? 0x00030003 : 0x000f000f), one = _mm512_set1_epi32(0x43004300);
  const uint32_t* q = w.tile_codes(t);
  const int64_t tile_words = w.tile_words();
  for (int64_t sg = s0; sg < s1; ++sg) {
    const float* xa = xs + sg * 2 * rb;  // A, then X
    // The accumulators start at -A: the segment's end is then one multiply-add per accumulator.
    __m512 acc[MB][NT];
#pragma GCC unroll 6
    for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
      for (int n = 0; n < NT; ++n) acc[m][n] = _mm512_set1_ps(-xa[m]);
    const int64_t l1 = w.seg_line[size_t(sg + 1)];
    for (int64_t l = w.seg_line[size_t(sg)]; l < l1; ++l) {
      const uint32_t* xl = xp + l * rb * 4 * P;
      const uint32_t* ql = q + w.line_offset(l);
#pragma GCC unroll 4
      for (int n = 0; n < NT; ++n) _mm_prefetch(reinterpret_cast<const char*>(ql + n * tile_words + pf), _MM_HINT_T0);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        __m512i tv[NT];
#pragma GCC unroll 4
        for (int n = 0; n < NT; ++n)
          tv[n] = _mm512_ternarylogic_epi32(D::pair(_mm512_load_si512(ql + n * tile_words), l, j), mask, one, 0xea);
#pragma GCC unroll 6
        for (int m = 0; m < MB; ++m)
#pragma GCC unroll 2
          for (int p = 0; p < P; ++p) {
            const __m512i xb = _mm512_set1_epi32(int(xl[m * 4 * P + p * 4 + j]));
#pragma GCC unroll 4
            for (int n = 0; n < NT; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], (__m512bh)tv[n], (__m512bh)xb);
          }
      }
    }
    // The segment's end (kAsym is a template parameter): S = 1, y += s (acc - A) - s z X
    // (kernel_fused_impl.h), or y = for the first segment of the K slice (`first`).
    const int64_t g = w.seg_group[size_t(sg)];
    const auto end = [&]<bool kFirst>() {
#pragma GCC unroll 4
      for (int n = 0; n < NT; ++n) {
        const __m512 sv = load_scales_avx512(w.group_scales(t + n, g), w.scale_type);
        __m512 sz;
        if constexpr (kAsym) sz = _mm512_mul_ps(sv, _mm512_loadu_ps(w.tile_zeros(t + n) + g * kTileN));
#pragma GCC unroll 6
        for (int m = 0; m < MB; ++m) {
          float* yp = y + m * ldy + (t + n) * kTileN;
          __m512 out = kFirst ? _mm512_mul_ps(sv, acc[m][n]) : _mm512_fmadd_ps(sv, acc[m][n], _mm512_loadu_ps(yp));
          if constexpr (kAsym) out = _mm512_fnmadd_ps(sz, _mm512_set1_ps(xa[rb + m]), out);  // else folded into A
          _mm512_storeu_ps(yp, out);
        }
      }
    };
    if (sg == first) end.template operator()<true>();
    else end.template operator()<false>();
  }
}

// The blocking of the walk (kernel_gemm_impl.h): 4 tiles x 6 rows of accumulators; 32 tiles x 128
// lines = 256 KiB of weights per block, in L2: every block of rows runs over all of it before the
// next, so that its x (6 rows x 128 lines, 12 KiB) is read once and then from L1 by the block's 8
// groups of tiles (64 or 256 lines measured the same or slower; so did prefetching the next block
// into L2 spread over the blocks of rows). 8 blocks of rows share one pass: their x and y for one
// block of the weights (48 rows: 96 KiB each) stay in L2 with it; the weights are read from memory
// once per 48 rows. The first block of rows of a pass prefetches each tile 64 lines ahead (into
// the next K block at the end of one), the others (reading from L2) their own line: measured at
// M = 32-256, +2-8%, most on 28672x8192; 128 lines the same within the noise (docs/benchmarks.md).
constexpr int kGemmTiles = 4;
template <int P>
constexpr gemm::Blocking kBlocking{kGemmTiles, 4 * P, 32, 128, 8, 64};

template <class D, int P, bool kAsym>
struct Blocks {
  template <int MB, int NT>
  struct F {
    static void run(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const uint32_t* xp,
                    int64_t rb, const float* xs, float* y, int64_t ldy, int64_t pf) {
      gemm_block<D, P, MB, NT, kAsym>(w, t, s0, s1, first, xp, rb, xs, y, ldy, pf);
    }
  };
};

template <class D, int P, bool kAsym>
void run_gemm(const FusedArgs& a, int64_t t0, int64_t t1) {
  static constexpr auto table = gemm::table<Blocks<D, P, kAsym>::template F, kGemmTiles>(
      std::make_integer_sequence<int, kGemmRows * kGemmTiles>{});
  gemm::run(a, t0, t1, kBlocking<P>, table);
}

// Pair J of line l (4-bit codes: one line per 64 bytes): the codes at bits 4J and 16 + 4J.
struct Decode4 {
  static constexpr int kBits = 4;
  static __m512i pair(__m512i codes, int64_t, int j) { return j == 0 ? codes : _mm512_srli_epi32(codes, 4 * j); }
};

// 2-bit codes (cpu_weights.h): the codes of lines 2L and 2L + 1 share one 64-byte line of words,
// row j of line l at bit 16 (l mod 2) + 2j, so pair J of line l (rows J and J + 4) is at bits
// 16 h + 2J and 16 h + 2J + 8 (h = l mod 2). One vpshufb per line h puts byte 2h of each 32-bit
// lane into byte 0 and byte 2h + 1 into byte 2 (bytes 1 and 3 zero), then pair J is a shift by 2J
// (none for J = 0) before the vpternlogd: the same two integer operations per pair as for 4-bit
// codes, for half the bytes. (vpmultishiftqb, one per pair, measured the same on the Zen 4 and
// needs VBMI.)
//
// The vpshufb control of line h: in every 32-bit lane d of a 128-bit lane, byte 4d <- 4d + 2h,
// byte 4d + 2 <- 4d + 2h + 1, the others 0x80 (zero).
constexpr int shuffle_word(int h, int d) {
  return int(uint32_t(4 * d + 2 * h) | 0x80u << 8 | uint32_t(4 * d + 2 * h + 1) << 16 | 0x80u << 24);
}
inline __m512i shuffle(int h) {  // constants: compiled to one load
  const int w0 = shuffle_word(h, 0), w1 = shuffle_word(h, 1), w2 = shuffle_word(h, 2), w3 = shuffle_word(h, 3);
  return _mm512_set_epi32(w3, w2, w1, w0, w3, w2, w1, w0, w3, w2, w1, w0, w3, w2, w1, w0);
}

struct Decode2 {
  static constexpr int kBits = 2;
  static __m512i pair(__m512i codes, int64_t l, int j) {
    // Both controls are constants; selecting one by l's parity keeps them out of the loop (a
    // control computed from a run-time h is rebuilt for every line).
    const __m512i b = _mm512_shuffle_epi8(codes, (l & 1) ? shuffle(1) : shuffle(0));
    return j == 0 ? b : _mm512_srli_epi32(b, 2 * j);
  }
};

// The one-tile traits for 2-bit codes: step R = 8 H + J of a pair of lines (kernel_fused_impl.h) is
// pair J of line H.
template <int P>
struct Avx512Bf16Bits2 : Avx512Bf16<P> {
  using V = __m512;
  struct W {
    __m512i line[2];
  };
  static constexpr int kBits = 2;
  static W load_codes(const uint32_t* p) {
    const __m512i w = _mm512_load_si512(p);
    return {{_mm512_shuffle_epi8(w, shuffle(0)), _mm512_shuffle_epi8(w, shuffle(1))}};
  }
  template <int R>
  static V exact(const W&, V) { return _mm512_setzero_ps(); }  // never used: f32 activations take the f32 kernels
  template <int R>
  static V trick(const W& w) {
    constexpr int H = R / 8, J = R % 8;
    static_assert(J < 4, "the bf16 form has 4 steps (pairs) per line");
    const __m512i moved = J == 0 ? w.line[H] : _mm512_srli_epi32(w.line[H], 2 * J);
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(moved, _mm512_set1_epi32(0x00030003), _mm512_set1_epi32(0x43004300), 0xea));
  }
};

}  // namespace

void fused_avx512bf16(const FusedArgs& a, int64_t t0, int64_t t1) {
  if (a.xform == XForm::kBf16x2) fused::run<Avx512Bf16<2>, Avx512Bf16Bits2<2>>(a, t0, t1);
  else fused::run<Avx512Bf16<1>, Avx512Bf16Bits2<1>>(a, t0, t1);
}

void gemm_avx512bf16(const FusedArgs& a, int64_t t0, int64_t t1) {
  const bool asym = a.w->tile_zeros(0) != nullptr;
  if (a.w->code_bits == 2) {
    if (a.xform == XForm::kBf16x2) asym ? run_gemm<Decode2, 2, true>(a, t0, t1) : run_gemm<Decode2, 2, false>(a, t0, t1);
    else asym ? run_gemm<Decode2, 1, true>(a, t0, t1) : run_gemm<Decode2, 1, false>(a, t0, t1);
    return;
  }
  if (a.xform == XForm::kBf16x2) asym ? run_gemm<Decode4, 2, true>(a, t0, t1) : run_gemm<Decode4, 2, false>(a, t0, t1);
  else asym ? run_gemm<Decode4, 1, true>(a, t0, t1) : run_gemm<Decode4, 1, false>(a, t0, t1);
}

}  // namespace nibble::cpu
