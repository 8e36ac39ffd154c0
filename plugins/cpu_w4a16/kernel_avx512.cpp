// The fused kernel with AVX-512 (F, BW, VL, DQ): one zmm is one 16-column tile row.
#include <immintrin.h>

#include "kernel_fused_impl.h"

namespace nibble::cpu {

namespace {

struct Avx512 {
  using V = __m512;
  // A line's codes as they are (even nibbles are low nibbles of bytes) and shifted right by 4
  // (odd nibbles become low nibbles): one shift per line instead of one per nibble.
  struct W { __m512i even, odd; };
  static constexpr int kMaxRows = 8;  // 8 accumulators + 8 outputs + temporaries fit 32 zmm
  // t = 1 + q/128: the nibble sits in bits 16..19 of the mantissa of 1.0f.
  static constexpr float kTrickScale = 128.0f;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static W load_codes(const uint32_t* p) {
    const __m512i w = _mm512_load_si512(p);
    return {w, _mm512_srli_epi32(w, 4)};
  }
  static void prefetch(const uint32_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  // 1 + q_J / 128 in two instructions, neither of them on port 0 (which 512-bit shifts and FMAs
  // share on Skylake-class cores): vpshufb moves byte J/2 of each word into byte 2, then one
  // vpternlogd keeps its low nibble (bits 16..19) and ors in 1.0f.
  template <int J>
  static V trick(const W& w) {
    constexpr int b = J / 2;
    // Per 32-bit lane d of each 128-bit lane: bytes (zero, zero, 4d + b, zero).
    const __m512i ctrl = _mm512_set4_epi32(int(0x80008080u | ((12u + b) << 16)), int(0x80008080u | ((8u + b) << 16)),
                                           int(0x80008080u | ((4u + b) << 16)), int(0x80008080u | ((0u + b) << 16)));
    const __m512i moved = _mm512_shuffle_epi8(J % 2 ? w.odd : w.even, ctrl);
    return _mm512_castsi512_ps(
        _mm512_ternarylogic_epi32(moved, _mm512_set1_epi32(0xf << 16), _mm512_set1_epi32(0x3f800000), 0xea));
  }
  template <int J>
  static V exact(const W& w, V z) {
    const __m512i q = _mm512_and_si512(_mm512_srli_epi32(w.even, 4 * J), _mm512_set1_epi32(0xf));
    return _mm512_sub_ps(_mm512_cvtepi32_ps(q), z);
  }
};

}  // namespace

void fused_avx512(const FusedArgs& a, int64_t t0, int64_t t1) { fused::run<Avx512>(a, t0, t1); }

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
