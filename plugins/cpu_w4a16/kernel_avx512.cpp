// The fused kernel with AVX-512 (F, BW, VL, DQ): one zmm is one 16-column tile row.
#include <immintrin.h>

#include "kernel_fused_impl.h"
#include "scales_avx512.h"

namespace nibble::cpu {

namespace {

struct Avx512 : fused::F32Form {
  using V = __m512;
  // A line's codes, and the four rotations of it that bring the pairs of rows (2p, 2p + 1) to
  // bits 15..18 and 19..22 (rotate left by 15 - 8p): the windows of the trick (kernels.h).
  struct W { __m512i raw, rot[4]; };
  static constexpr int kMaxRows = 8;  // 8 accumulators + 8 outputs + codes + temporaries fit 32 zmm
  // 8 chains for one row (each of its 8 products per line in its own chain), then fewer per row
  // as the rows themselves give independent chains.
  static constexpr int chains(int rows) { return rows == 1 ? 8 : rows <= 3 ? 4 : rows <= 7 ? 2 : 1; }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_scales(const void* p, ScaleType st) { return load_scales_avx512(p, st); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static W load_codes(const uint32_t* p) {
    const __m512i w = _mm512_load_si512(p);
    // Four vprold (port 0); one vprold and three vpshufb byte rotations (port 5) measured the same.
    return {w, {_mm512_rol_epi32(w, 15), _mm512_rol_epi32(w, 7), _mm512_rol_epi32(w, 31), _mm512_rol_epi32(w, 23)}};
  }
  // Non-temporal, as kernel_avx512bf16.cpp (f32 activations on the Zen 5: avx512 +1-7%, avx2 the same).
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V madd(V t, const uint32_t* x, V acc) { return _mm512_fmadd_ps(t, _mm512_set1_ps(fused::as_float(x)), acc); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  // a_J + q_J / 16 in one vpternlogd: keep the window's nibble, or in 16.0f (even J) or 1.0f.
  template <int J>
  static V trick(const W& w) {
    constexpr int window = J % 2 ? 19 : 15;
    constexpr int one = J % 2 ? 0x3f800000 : 0x41800000;
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(w.rot[J / 2], _mm512_set1_epi32(0xf << window), _mm512_set1_epi32(one), 0xea));
  }
  template <int J>
  static V exact(const W& w, V z) {
    const __m512i q = _mm512_and_si512(_mm512_srli_epi32(w.raw, 4 * J), _mm512_set1_epi32(0xf));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(q), z);
  }
};

// 2-bit codes (cpu_weights.h): the same four rotations bring rows 4p .. 4p+3 of the word to bits
// 15..22, each row R in a window of two bits, 15 + 2 (R mod 4), or-ed into 16.0f, 4.0f, 1.0f or
// 0.25f, whose mantissa bit there is worth 1/16 in every case: t = a_R + q / 16 with a_R = 16, 4,
// 1, 0.25 (trick_offset). The cancellation is at most 256:1, as for 4-bit codes.
struct Avx512Bits2 : Avx512 {
  static constexpr int kBits = 2;
  template <int R>
  static V trick(const W& w) {
    constexpr int window = 15 + 2 * (R % 4);
    constexpr int one = R % 4 == 0 ? 0x41800000 : R % 4 == 1 ? 0x40800000 : R % 4 == 2 ? 0x3f800000 : 0x3e800000;
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(w.rot[R / 4], _mm512_set1_epi32(0x3 << window), _mm512_set1_epi32(one), 0xea));
  }
  template <int R>
  static V exact(const W& w, V z) {
    const __m512i q = _mm512_and_si512(_mm512_srli_epi32(w.raw, 2 * R), _mm512_set1_epi32(0x3));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(q), z);
  }
};

// An 8-bit layer's bytes (XForm::kF32Bytes): a word of its nibble rows holds the codes of 4 real
// rows, code i in byte i, and the same four rotations bring byte i to bits 15..22, where one
// vpternlogd or-s it into 1.0f: t = 1 + q / 256 (a cancellation of at most 256:1, as for 4-bit
// codes). So a line is 4 steps, each multiplying the x of row 2i (xp's low-nibble rows; the high
// rows' 16 x go unused), and an 8-bit code costs one extraction and one FMA per row of x instead
// of two of each as nibble rows. 16-bit activations only (f32 ones take the nibble rows' exact
// form).
struct Avx512Bytes : Avx512 {
  static constexpr int kSteps = 4;
  static constexpr int x_word(int, int j) { return 2 * j; }
  static constexpr float kScale = trick_scale(XForm::kF32Bytes);
  static constexpr bool kHasExact = false;
  template <int J>
  static V trick(const W& w) {
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(w.rot[J], _mm512_set1_epi32(0xff << 15), _mm512_set1_epi32(0x3f800000), 0xea));
  }
};

}  // namespace

void fused_avx512(const FusedArgs& a, int64_t t0, int64_t t1) { fused::run<Avx512, Avx512Bits2, Avx512Bytes>(a, t0, t1); }

uint64_t read_stream_avx512(const void* p, size_t bytes) {
  // Four independent 512-bit loads per iteration keep enough misses in flight.
  const auto* b = static_cast<const uint8_t*>(p);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= bytes; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(b + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(b + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(b + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(b + i + 192));
  }
  alignas(64) uint64_t v[8];
  _mm512_store_si512(v, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  return v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
}

}  // namespace nibble::cpu
