// A group's 16 scales of one tile as f32 in a zmm, from any ScaleType (cpu_weights.h); for the
// AVX-512 kernels (included only by files compiled with AVX-512 flags).
#pragma once

#include <immintrin.h>

#include "cpu_weights.h"

namespace nibble::cpu {
// Internal linkage: included by files compiled with different instruction sets (AVX-512 alone, with
// BF16, with VBMI and AMX), none of whose copies may stand in for another's.
namespace {

inline __m512 load_scales_avx512(const void* p, ScaleType st) {
  if (st == ScaleType::kF32) return _mm512_loadu_ps(p);
  const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
  if (st == ScaleType::kF16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));  // bf16: the high half of f32
}

}  // namespace
}  // namespace nibble::cpu
