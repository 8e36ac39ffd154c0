// The AVX2 + FMA kernel forms: the one-tile traits (Avx2, Avx2Bits2, for kernel_fused_impl.h; a
// 16-column tile row is two ymm registers) and the GEMM form (gemm below).
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

// The GEMM form for many rows: MB <= kGemmRowsAvx2 rows x one tile of accumulators (12 ymm), so
// that each operand made from a line's codes (three integer operations per ymm) feeds MB
// multiply-adds; the one-tile form holds 3 rows (each row's accumulators and outputs in
// registers) and makes as many integer operations as multiply-adds, about 40% of the FMA peak at
// M >= 64. Outputs stay in y between segments (the accumulators start at -A: a segment ends with
// one multiply-add per accumulator). T: Avx2 or Avx2Bits2; kExact: f32 activations, t = q - z
// (kernel_fused_impl.h). The code words are read by each operand's shift (a memory operand),
// not kept in registers: 12 accumulators, the operand and the broadcast x take 15 of the 16 ymm.
template <class T, int MB, bool kExact, bool kAsym>
void gemm_block(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const uint32_t* xp, int64_t rb,
                const float* xs, float* y, int64_t ldy, int64_t pf) {
  using V = typename T::V;
  const uint32_t* q = w.tile_codes(t);
  const float* z = w.tile_zeros(t);
  for (int64_t sg = s0; sg < s1; ++sg) {
    const int64_t g = w.seg_group[size_t(sg)];
    const float* xa = xs + sg * 2 * rb;  // A, then X
    const V zv = z ? T::load(z + g * kTileN) : T::set1(w.sym_zero);
    V acc[MB];
#pragma GCC unroll 6
    for (int m = 0; m < MB; ++m) acc[m] = kExact ? T::zero() : T::set1(-xa[m]);
    // Step R of the code words at c (row R of the word), x of the line at xl.
    const auto step = [&]<int R>(const uint32_t* c, const uint32_t* xl) {
      const typename T::W code = T::load_codes(c);
      const V tv = kExact ? T::template exact<R>(code, zv) : T::template trick<R>(code);
#pragma GCC unroll 6
      for (int m = 0; m < MB; ++m) acc[m] = T::madd(tv, xl + m * 8 + R % 8, acc[m]);
    };
    const auto steps = [&]<int H, int... J>(const uint32_t* c, const uint32_t* xl, std::integer_sequence<int, J...>) {
      (step.template operator()<T::kBits == 2 ? 8 * H + J : J>(c, xl), ...);
    };
    const int64_t l1 = w.seg_line[size_t(sg + 1)];
    for (int64_t l = w.seg_line[size_t(sg)]; l < l1; l += T::kBits == 2 ? 2 : 1) {
      const uint32_t* c = q + w.line_offset(l);
      if (pf) _mm_prefetch(reinterpret_cast<const char*>(c + pf), _MM_HINT_T0);
      steps.template operator()<0>(c, xp + l * rb * 8, std::make_integer_sequence<int, 8>{});
      // 2-bit codes: a line of words holds lines l and l + 1 (segments start at even lines).
      if (T::kBits == 2 && l + 1 < l1)
        steps.template operator()<1>(c, xp + (l + 1) * rb * 8, std::make_integer_sequence<int, 8>{});
    }
    const V sv = T::load_scales(w.group_scales(t, g), w.scale_type);
    const V sS = kExact ? sv : T::mul(sv, T::set1(T::kScale));
    const V sz = T::mul(sv, zv);
#pragma GCC unroll 6
    for (int m = 0; m < MB; ++m) {
      float* yp = y + m * ldy + t * kTileN;
      V out = sg == first ? T::mul(sS, acc[m]) : T::fmadd(sS, acc[m], T::load(yp));
      if (!kExact && kAsym) out = T::fnmadd(sz, T::set1(xa[rb + m]), out);  // else folded into A
      T::store(yp, out);
    }
  }
}

// The blocking of the walk (kernel_gemm_impl.h): 6 rows x 1 tile; 32 tiles x 128 lines = 256 KiB
// of weights per block, x of a block of rows 6 x 128 lines x 32 bytes = 24 KiB.
constexpr gemm::Blocking kBlocking{1, 8, 32, 128, 8, 64};

template <class T, bool kExact, bool kAsym>
struct Blocks {
  template <int MB, int NT>
  struct F {
    static void run(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const uint32_t* xp,
                    int64_t rb, const float* xs, float* y, int64_t ldy, int64_t pf) {
      gemm_block<T, MB, kExact, kAsym>(w, t, s0, s1, first, xp, rb, xs, y, ldy, pf);
    }
  };
};

template <class T, bool kExact, bool kAsym>
void run_gemm(const FusedArgs& a, int64_t t0, int64_t t1) {
  static constexpr auto table =
      gemm::table<Blocks<T, kExact, kAsym>::template F, 1>(std::make_integer_sequence<int, kGemmRowsAvx2>{});
  gemm::run(a, t0, t1, kBlocking, table);
}

template <class T>
void gemm_of(const FusedArgs& a, int64_t t0, int64_t t1) {
  const bool asym = a.w->tile_zeros(0) != nullptr;
  if (a.exact) asym ? run_gemm<T, true, true>(a, t0, t1) : run_gemm<T, true, false>(a, t0, t1);
  else asym ? run_gemm<T, false, true>(a, t0, t1) : run_gemm<T, false, false>(a, t0, t1);
}

}  // namespace

void fused_avx2(const FusedArgs& a, int64_t t0, int64_t t1) { fused::run<Avx2, Avx2Bits2>(a, t0, t1); }

void gemm_avx2(const FusedArgs& a, int64_t t0, int64_t t1) {
  if (a.w->code_bits == 2) gemm_of<Avx2Bits2>(a, t0, t1);
  else gemm_of<Avx2>(a, t0, t1);
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
