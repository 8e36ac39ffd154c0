// The fused kernel with AVX-512 BF16: codes in the kBf16Pairs order (cpu_weights.h), so that one
// shift and one vpternlogd make a pair of rows into the bf16 numbers 128 + q (low half: even row,
// high half: odd row), and one vdpbf16ps multiplies both by the row pair of x and adds them to an
// f32 accumulator: 4 pairs per line, 7 integer operations and 4 (bf16 x) or 8 (fp16 x, split in
// hi + lo parts) vdpbf16ps per line and row, against 12 + 8 FMAs in the f32 kernel.
//
// Exactness: 128 + q has 8 significant bits and x's bf16 parts 8, so every product is exact in
// f32; vdpbf16ps adds the two products of a lane to the accumulator in f32 (as the FMA kernels
// do, round to nearest; denormal inputs read as zero, which only bf16 x below 2^-126 could be).
#include <immintrin.h>

#include "kernel_fused_impl.h"

namespace nibble::cpu {

namespace {

template <int P>
struct Avx512Bf16 {
  using V = __m512;
  using W = __m512i;
  static constexpr int kMaxRows = 8;
  static constexpr int kSteps = 4;  // one operand per pair of rows
  static constexpr int kParts = P;  // bf16 parts per x: 1 (bf16 x) or 2 (fp16 x = hi + lo)
  static constexpr float kScale = trick_scale(XForm::kBf16);
  static constexpr bool kHasExact = false;
  // Each row makes 4 P products per line (8 P over the pair of lines the loop takes at once).
  static constexpr int chains(int rows) { return rows <= 2 ? 8 : rows <= 4 ? 4 : 2; }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static W load_codes(const uint32_t* p) { return _mm512_load_si512(p); }
  static void prefetch(const uint32_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
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

}  // namespace

void fused_avx512bf16(const FusedArgs& a, int64_t t0, int64_t t1) {
  if (a.xform == XForm::kBf16x2) fused::run<Avx512Bf16<2>>(a, t0, t1);
  else fused::run<Avx512Bf16<1>>(a, t0, t1);
}

}  // namespace nibble::cpu
