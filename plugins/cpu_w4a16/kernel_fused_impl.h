// The fused int4 kernel, written once over an ISA "traits" type (kernel_avx512.cpp and
// kernel_avx2.cpp instantiate it with their flags). For one 16-column tile and a block of MB rows:
//
//   for each group g:      acc[m] = sum over the group's rows k of x[m, k] * t(k)
//   then                   y[m]  += s16 * acc[m] - c * X[m, g]
//
// with t(k) = 1 + q(k)/S built from the code by moving the nibble into the mantissa of 1.0f and
// or-ing in its bits (S = T::kTrickScale: 16 with the nibble at bits 19..22, 128 at 16..19), so
// that q = S t - S and
//   sum x (q - z) = S acc - (S + z) X,   sS = S s,   c = s (S + z),   X = sum x.
// The products x * t are exact in fp32 (x has at most 11 significant bits, t 5); only the fp32
// accumulation rounds. f32 activations use the exact form t(k) = q(k) - z instead (`kExact`),
// since their tolerance is 2^-20 and the trick's cancellation costs a few bits.
//
// A line is 16 u32 words = 8 rows x 16 columns: 8 extractions feed 8 * MB FMAs, so the kernel is
// bandwidth-bound at small M and runs at most of the FMA peak at MB = 8.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace nibble::cpu::fused {

// Independent accumulator chains per row: an FMA waits ~4 cycles for the previous one into the
// same register, so a block of few rows needs several chains to keep the FMA unit busy.
template <int MB>
constexpr int kChains = MB >= 4 ? 1 : MB == 1 ? 4 : 2;

template <class T, int MB, bool kExact, int J>
inline __attribute__((always_inline)) void step(const typename T::W& code, const typename T::V& zv, const float* xl,
                                                typename T::V* acc) {
  const typename T::V t = kExact ? T::template exact<J>(code, zv) : T::template trick<J>(code);
  constexpr int C = kChains<MB>;
#pragma GCC unroll 8
  for (int m = 0; m < MB; ++m) acc[m * C + J % C] = T::fmadd(t, T::set1(xl[m * 8 + J]), acc[m * C + J % C]);
}

// xp: this block's [lines][rb][8]; xs: this block's [groups][rb]; y: this block's first row.
template <class T, int MB, bool kExact>
void row_block(const CpuWeights& w, int64_t t, const float* xp, int64_t rb, const float* xs, float* y, int64_t ldy) {
  using V = typename T::V;
  const uint32_t* q = w.tile_codes(t);
  const float* s = w.tile_scales(t);
  const float* z = w.tile_zeros(t);
  constexpr int C = kChains<MB>;
  V out[MB], acc[MB * C];
  for (int m = 0; m < MB; ++m) out[m] = T::zero();
  for (int64_t g = 0; g < w.groups; ++g) {
    for (int i = 0; i < MB * C; ++i) acc[i] = T::zero();
    const V zv = T::load(z + g * kTileN);
    const int64_t l1 = w.group_line[size_t(g + 1)];
    for (int64_t l = w.group_line[size_t(g)]; l < l1; ++l) {
      T::prefetch(q + (l + 64) * kTileN);  // 4 KiB ahead (measured: 8, 32, 64, 128, 192 lines; docs/benchmarks.md)
      const typename T::W code = T::load_codes(q + l * kTileN);
      const float* xl = xp + l * rb * 8;
      step<T, MB, kExact, 0>(code, zv, xl, acc);
      step<T, MB, kExact, 1>(code, zv, xl, acc);
      step<T, MB, kExact, 2>(code, zv, xl, acc);
      step<T, MB, kExact, 3>(code, zv, xl, acc);
      step<T, MB, kExact, 4>(code, zv, xl, acc);
      step<T, MB, kExact, 5>(code, zv, xl, acc);
      step<T, MB, kExact, 6>(code, zv, xl, acc);
      step<T, MB, kExact, 7>(code, zv, xl, acc);
    }
    for (int m = 0; m < MB; ++m)
      for (int c = 1; c < C; ++c) acc[m * C] = T::add(acc[m * C], acc[m * C + c]);
    const V sv = T::load(s + g * kTileN);
    if constexpr (kExact) {
      for (int m = 0; m < MB; ++m) out[m] = T::fmadd(sv, acc[m * C], out[m]);
    } else {
      const V scale = T::set1(T::kTrickScale);
      const V s16 = T::mul(sv, scale);
      const V c = T::mul(sv, T::add(zv, scale));
      for (int m = 0; m < MB; ++m) {
        out[m] = T::fmadd(s16, acc[m * C], out[m]);
        out[m] = T::fnmadd(c, T::set1(xs[g * rb + m]), out[m]);
      }
    }
  }
  for (int m = 0; m < MB; ++m) T::store(y + m * ldy + t * kTileN, out[m]);
}

template <class T, bool kExact>
void run_rows(const FusedArgs& a, int64_t t, int64_t block, int64_t mb) {
  const CpuWeights& w = *a.w;
  const int64_t ldy = w.tiles * kTileN;
  const float* xp = a.xp + block * w.lines * a.rb * 8;
  const float* xs = a.xs + block * w.groups * a.rb;
  float* y = a.y + block * a.rb * ldy;
  switch (mb) {
#define NIBBLE_ROWS(n) \
  case n: if constexpr (n <= T::kMaxRows) row_block<T, n, kExact>(w, t, xp, a.rb, xs, y, ldy); break;
    NIBBLE_ROWS(1) NIBBLE_ROWS(2) NIBBLE_ROWS(3) NIBBLE_ROWS(4) NIBBLE_ROWS(5) NIBBLE_ROWS(6) NIBBLE_ROWS(7) NIBBLE_ROWS(8)
#undef NIBBLE_ROWS
    default: break;
  }
}

template <class T>
void run(const FusedArgs& a, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b * a.rb < a.m; ++b) {
      const int64_t mb = a.m - b * a.rb < a.rb ? a.m - b * a.rb : a.rb;
      if (a.exact) run_rows<T, true>(a, t, b, mb);
      else run_rows<T, false>(a, t, b, mb);
    }
}

}  // namespace nibble::cpu::fused
