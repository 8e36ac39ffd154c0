// The AVX-512 BF16 forms (kernel_avx512bf16_forms.h) for 4-bit and native 2-bit codes. 4-bit: one
// shift per pair of rows of a line, 7 integer operations and 4 (bf16 x) or 8 (fp16 x, split in hi +
// lo parts) vdpbf16ps per line and row, against 12 + 8 FMAs in the f32 kernel.
#include "kernel_avx512bf16_forms.h"

namespace nibble::cpu {

namespace {

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
    const __m512i b = _mm512_shuffle_epi8(codes, shuffle(int(l & 1)));
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
    if (a.xform == XForm::kBf16x2) asym ? gemm<Decode2, 2, true>(a, t0, t1) : gemm<Decode2, 2, false>(a, t0, t1);
    else asym ? gemm<Decode2, 1, true>(a, t0, t1) : gemm<Decode2, 1, false>(a, t0, t1);
    return;
  }
  if (a.xform == XForm::kBf16x2) asym ? gemm<Decode4, 2, true>(a, t0, t1) : gemm<Decode4, 2, false>(a, t0, t1);
  else asym ? gemm<Decode4, 1, true>(a, t0, t1) : gemm<Decode4, 1, false>(a, t0, t1);
}

}  // namespace nibble::cpu
