// The integer dot-product form with AVX-512 VNNI (dot-avx512vnni): one vpdpbusd multiplies 64 codes
// by 64 signed bytes of x and adds them in fours to 16 int32 lanes, so a line of 4-bit codes (8 rows
// x 16 columns) takes two decodes (the even rows' nibbles, the odd rows') and 2 x 3 vpdpbusd for x's
// three parts (kernels.h, XForm::kInt8), against 8 decodes and 8 multiply-adds per row of x in the
// f32 forms. kernel_fused_impl.h walks the lines and ends the segments (T::kInteger).
#include <immintrin.h>

#include "kernel_fused_impl.h"
#include "scales_avx512.h"

namespace nibble::cpu {

namespace {

struct DotAvx512 {
  using V = __m512;
  using Acc = __m512i;
  using W = __m512i;
  static constexpr bool kInteger = true;
  static constexpr int kBits = 4;
  static constexpr int kSteps = 2;  // the even rows of a line, then the odd ones
  static constexpr int kParts = 3;  // x's parts
  static constexpr int kXWords = x_words(XForm::kInt8);
  static constexpr float kScale = 1.0f;
  static constexpr bool kHasExact = false;  // f32 activations take the f32 forms
  static constexpr int kMaxRows = kDotRows;
  // A chain per step and part (6), and for one row, per line of the pair the loop takes (12):
  // vpdpbusd waits ~5 cycles for its accumulator.
  static constexpr int chains(int rows) { return rows == 1 ? 12 : 6; }
  static constexpr int out_chains(int) { return 1; }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V load_scales(const void* p, ScaleType st) { return load_scales_avx512(p, st); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static Acc acc_zero() { return _mm512_setzero_si512(); }
  static Acc acc_add(Acc a, Acc b) { return _mm512_add_epi32(a, b); }
  static V to_float(Acc a) { return _mm512_cvtepi32_ps(a); }
  // The line in a register, decoded by the steps (left alone, the compiler reloads it per step).
  static W load_codes(const uint32_t* p) {
    W w = _mm512_load_si512(p);
    asm("" : "+v"(w));
    return w;
  }
  // Step J: the nibbles of rows J, J + 2, J + 4, J + 6 as the four bytes of each lane.
  template <int J>
  static __m512i trick(const W& w) {
    return _mm512_and_si512(J ? _mm512_srli_epi32(w, 4) : w, _mm512_set1_epi32(0x0f0f0f0f));
  }
  // acc += the four products of each lane, t's unsigned codes by x's signed bytes.
  static Acc madd(__m512i t, const uint32_t* x, Acc acc) { return _mm512_dpbusd_epi32(acc, t, _mm512_set1_epi32(int(*x))); }
};

// Native 2-bit codes (cpu_weights.h): a 64-byte line holds two lines of rows, byte b of a word
// rows 4b .. 4b + 3. Step (H, J) of the pair takes shift s = 2H + J: rows 4b + s of the pair,
// whose x gather_x puts in line H's slot (kernel_portable.cpp).
struct DotAvx512Bits2 : DotAvx512 {
  static constexpr int kBits = 2;
  template <int R>
  static __m512i trick(const W& w) {
    constexpr int s = 2 * (R / 8) + R % 8;
    return _mm512_and_si512(s ? _mm512_srli_epi32(w, 2 * s) : w, _mm512_set1_epi32(0x03030303));
  }
};

// An 8-bit layer's bytes (XForm::kInt8Bytes): a word of its nibble rows holds the codes of 4 real
// rows, code i in byte i, which is what vpdpbusd multiplies by the 4 bytes of x's part as they
// stand: one step per line, no decode, 3 vpdpbusd per line of 64 codes (as nibble rows: 2
// decodes and 6 vpdpbusd per 32 codes). x's part p of the 4 rows is word 2p of the slot (kInt8's
// parity 0). The products and sums stay exact: 4 x 255 x 127 per instruction and lane, at most 16
// lines per segment.
struct DotAvx512Bytes : DotAvx512 {
  static constexpr int kSteps = 1;
  static constexpr int chains(int rows) { return rows == 1 ? 6 : 3; }
  static constexpr int x_word(int p, int) { return 2 * p; }
  template <int J>
  static __m512i trick(const W& w) { return w; }
};

}  // namespace

void dot_avx512vnni(const FusedArgs& a, int64_t t0, int64_t t1) {
  fused::run<DotAvx512, DotAvx512Bits2, DotAvx512Bytes>(a, t0, t1);
}

}  // namespace nibble::cpu
