// The AVX2 + FMA kernel forms: the one-tile traits (Avx2, Avx2Bits2, for kernel_fused_impl.h; a
// 16-column tile row is two ymm registers) and the GEMM form (gemm_avx2: kernel_gemm_impl.h's
// block_f32 over these traits).
#include <immintrin.h>

#include "kernel_fused_impl.h"
#include "kernel_gemm_impl.h"

namespace nibble::cpu {

namespace {

struct Avx2 : fused::F32Form {
  struct V { __m256 lo, hi; };
  struct W { __m256i lo, hi; };
  static constexpr int kMaxRows = 3;  // 16 ymm registers: 3 rows x (acc + out) x 2 halves + temporaries
  static constexpr int chains(int) { return 4; }  // 4 x 2 ymm per row: more would spill
  static V zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static V set1(float f) { const __m256 v = _mm256_set1_ps(f); return {v, v}; }
  static V load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  // 16 scales as f32: f16 by F16C, bf16 by widening to 32 bits and shifting into the high half.
  static __m256 scales8(const uint16_t* p, ScaleType st) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if (st == ScaleType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static V load_scales(const void* p, ScaleType st) {
    if (st == ScaleType::kF32) return load(static_cast<const float*>(p));
    const auto* h = static_cast<const uint16_t*>(p);
    return {scales8(h, st), scales8(h + 8, st)};
  }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v.lo); _mm256_storeu_ps(p + 8, v.hi); }
  static W load_codes(const uint32_t* p) {
    return {_mm256_load_si256(reinterpret_cast<const __m256i*>(p)), _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 8))};
  }
  // Non-temporal, as kernel_avx512bf16.cpp (f32 activations on the Zen 5: avx512 +1-7%, avx2 the same).
  static V add(V a, V b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static V mul(V a, V b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
  static V fmadd(V a, V b, V c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
  static V madd(V t, const uint32_t* x, V acc) { return fmadd(t, set1(fused::as_float(x)), acc); }
  static V fnmadd(V a, V b, V c) { return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)}; }
  static V sub(V a, V b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
  // a_J + q_J / 16 (kernels.h): the nibble shifted to bits 15..18 (even J, or-ed into 16.0f) or
  // 19..22 (odd J, into 1.0f).
  template <int J>
  static __m256 trick1(__m256i w) {
    constexpr int window = J % 2 ? 19 : 15;
    constexpr int one = J % 2 ? 0x3f800000 : 0x41800000;
    __m256i moved;
    if constexpr (4 * J <= window) moved = _mm256_slli_epi32(w, window - 4 * J);
    else moved = _mm256_srli_epi32(w, 4 * J - window);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(moved, _mm256_set1_epi32(0xf << window)), _mm256_set1_epi32(one)));
  }
  template <int J>
  static V trick(const W& w) { return {trick1<J>(w.lo), trick1<J>(w.hi)}; }
  template <int J>
  static __m256 exact1(__m256i w, __m256 z) {
    return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 4 * J), _mm256_set1_epi32(0xf))), z);
  }
  template <int J>
  static V exact(const W& w, const V& z) { return {exact1<J>(w.lo, z.lo), exact1<J>(w.hi, z.hi)}; }
};

// 2-bit codes (cpu_weights.h): row R of the word (bits 2R) shifted into the window of
// kernel_avx512.cpp's 2-bit form, 15 + 2 (R mod 4), or-ed into 16.0f, 4.0f, 1.0f or 0.25f.
struct Avx2Bits2 : Avx2 {
  static constexpr int kBits = 2;
  template <int R>
  static __m256 trick1(__m256i w) {
    constexpr int window = 15 + 2 * (R % 4);
    constexpr int one = R % 4 == 0 ? 0x41800000 : R % 4 == 1 ? 0x40800000 : R % 4 == 2 ? 0x3f800000 : 0x3e800000;
    __m256i moved;
    if constexpr (2 * R <= window) moved = _mm256_slli_epi32(w, window - 2 * R);
    else moved = _mm256_srli_epi32(w, 2 * R - window);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(moved, _mm256_set1_epi32(0x3 << window)), _mm256_set1_epi32(one)));
  }
  template <int R>
  static V trick(const W& w) { return {trick1<R>(w.lo), trick1<R>(w.hi)}; }
  template <int R>
  static __m256 exact1(__m256i w, __m256 z) {
    return _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, 2 * R), _mm256_set1_epi32(0x3))), z);
  }
  template <int R>
  static V exact(const W& w, const V& z) { return {exact1<R>(w.lo, z.lo), exact1<R>(w.hi, z.hi)}; }
};

// An 8-bit layer's bytes (XForm::kF32Bytes; kernel_avx512.cpp's Avx512Bytes says how): byte J
// (bits 8J) shifted to bits 15..22 and or-ed into 1.0f, t = 1 + q / 256, 4 steps per line, each
// multiplying the x of row 2J.
struct Avx2Bytes : Avx2 {
  static constexpr int kSteps = 4;
  static constexpr int x_word(int, int j) { return 2 * j; }
  static constexpr float kScale = trick_scale(XForm::kF32Bytes);
  static constexpr bool kHasExact = false;
  template <int J>
  static __m256 trick1(__m256i w) {
    constexpr int window = 15;
    __m256i moved;
    if constexpr (8 * J <= window) moved = _mm256_slli_epi32(w, window - 8 * J);
    else moved = _mm256_srli_epi32(w, 8 * J - window);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(moved, _mm256_set1_epi32(0xff << window)), _mm256_set1_epi32(0x3f800000)));
  }
  template <int J>
  static V trick(const W& w) { return {trick1<J>(w.lo), trick1<J>(w.hi)}; }
};

// The integer dot-product form (dot-avx2; XForm::kInt8, kernel_avx512vnni.cpp says how): without
// vpdpbusd, vpmaddubsw multiplies the unsigned codes by x's signed bytes and adds pairs into 16-bit
// lanes (at most 2 x 15 x 127: no saturation), and vpmaddwd by ones adds those pairs into 32 bits.
// One row per block: 6 chains x 2 ymm of accumulators.
struct DotAvx2 : Avx2 {
  struct Acc { __m256i lo, hi; };
  using T8 = W;  // a step's codes, as bytes
  static constexpr bool kInteger = true;
  static constexpr int kSteps = 2;
  static constexpr int kParts = 3;
  static constexpr int kXWords = x_words(XForm::kInt8);
  static constexpr float kScale = 1.0f;
  static constexpr bool kHasExact = false;
  static constexpr int kMaxRows = 1;
  static constexpr int chains(int) { return 6; }
  static Acc acc_zero() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  static Acc acc_add(Acc a, Acc b) { return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
  static V to_float(Acc a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
  static __m256i nibbles(__m256i w, int shift) {
    return _mm256_and_si256(shift ? _mm256_srli_epi32(w, shift) : w, _mm256_set1_epi32(0x0f0f0f0f));
  }
  template <int J>
  static T8 trick(const W& w) { return {nibbles(w.lo, 4 * J), nibbles(w.hi, 4 * J)}; }
  static __m256i dot1(__m256i t, __m256i x, __m256i acc) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(t, x), _mm256_set1_epi16(1)));
  }
  static Acc madd(const T8& t, const uint32_t* x, Acc acc) {
    const __m256i xb = _mm256_set1_epi32(int(*x));
    return {dot1(t.lo, xb, acc.lo), dot1(t.hi, xb, acc.hi)};
  }
};

// Native 2-bit codes: step (H, J) of a pair of lines takes rows 4b + 2H + J of the word's byte b.
struct DotAvx2Bits2 : DotAvx2 {
  static constexpr int kBits = 2;
  static __m256i crumbs(__m256i w, int shift) {
    return _mm256_and_si256(shift ? _mm256_srli_epi32(w, shift) : w, _mm256_set1_epi32(0x03030303));
  }
  template <int R>
  static T8 trick(const W& w) {
    constexpr int s = 2 * (R / 8) + R % 8;
    return {crumbs(w.lo, 2 * s), crumbs(w.hi, 2 * s)};
  }
};

// The GEMM form (kernel_gemm_impl.h, f32 x): 6 rows x one tile of accumulators (12 ymm; the
// operand and the broadcast x take 2 more). GCC keeps the code words and one accumulator on the
// stack at 6 rows (about 20 stack accesses per line beside 96 multiply-adds): measured as it is.
// 32 tiles x 128 lines = 256 KiB of weights per block, x of a block of rows 6 x 128 lines x 32
// bytes = 24 KiB.
constexpr gemm::Blocking kBlocking{1, 8, 32, 128, 8, 64};

}  // namespace

void fused_avx2(const FusedArgs& a, int64_t t0, int64_t t1) { fused::run<Avx2, Avx2Bits2, Avx2Bytes>(a, t0, t1); }

void dot_avx2(const FusedArgs& a, int64_t t0, int64_t t1) { fused::run<DotAvx2, DotAvx2Bits2>(a, t0, t1); }

void gemm_avx2(const FusedArgs& a, int64_t t0, int64_t t1) {
  gemm::run_f32<Avx2, Avx2Bits2, kGemmRowsAvx2>(a, t0, t1, kBlocking);
}

uint64_t read_stream_avx2(const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(b + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(b + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(b + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(b + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t v[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
  return v[0] + v[1] + v[2] + v[3];
}

}  // namespace nibble::cpu
