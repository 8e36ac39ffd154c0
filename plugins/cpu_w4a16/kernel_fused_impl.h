// The fused int4 kernel, written once over an ISA "traits" type (kernel_avx512.cpp,
// kernel_avx512bf16.cpp and kernel_avx2.cpp instantiate it with their flags). For one 16-column
// tile and a block of MB rows:
//
//   for each segment s (<= 16 lines of one group g):
//       acc[m] = sum over the segment's rows k of x[m, k] * t(k)
//       y[m]  += sS * acc[m] - sS * A[m, s] - sz * X[m, s]
//
// with t(k) = a_j + q(k)/S the trick form of kernels.h (f32: the nibble or-ed into the mantissa of
// 16.0f or 1.0f, S = 16, a_j = 16 or 1 by the row's parity j; bf16: 128 + q, S = 1), so that
//   sum x (q - z) = S acc - S A - z X,   A = sum a_j x,   X = sum x,   sS = S s,   sz = s z.
// The products x * t are exact in fp32 (x has at most 11 significant bits, t 9); only the fp32
// accumulation rounds, and the cancellation S (acc - A) costs up to 8 bits of it, which the
// 16-bit activations' tolerance (2^-10) leaves room for; segments bound how far the sums grow.
// f32 activations use the exact form t(k) = q(k) - z instead (`kExact`), since their tolerance is
// 2^-20.
//
// The integer forms (T::kInteger: dot-avx512vnni, dot-avx2; x as XForm::kInt8 or kInt8Bytes) use
// the same walk with t(k) = q(k) as bytes and int32 accumulators (T::Acc), and end a segment in
// int_segment_end below instead.
//
// A line is 16 u32 words = 8 rows x 16 columns: 8 extractions feed 8 * MB FMAs, so the kernel is
// bandwidth-bound at small M and runs at most of the FMA peak at MB = 8. An 8-bit layer's line
// (8 nibble rows = 4 codes per word) read as bytes (XForm::kF32Bytes, kInt8Bytes) is 4 steps of
// one code each, or 1 step of 4 codes for vpdpbusd.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include <xmmintrin.h>

#include "kernels.h"

namespace nibble::cpu::fused {
// Internal linkage: each ISA's file compiles this with its own instruction set, and no copy one of
// them compiles may stand in for another's.
namespace {

// What the f32 kernels (AVX-512, AVX2) share in their traits: x in f32, one operand per row of a
// line (t = a_j + q / 16, kernels.h), an exact form for f32 activations, and one output chain per
// row, since the f32 trick cancels 256:1 and needs its subtraction per segment (row_block).
struct F32Form {
  static constexpr int kBits = 4;  // the 2-bit traits set 2 (native 2-bit codes)
  static constexpr int kSteps = 8;
  static constexpr int kParts = 1;
  static constexpr int kXWords = x_words(XForm::kF32);
  static constexpr float kScale = trick_scale(XForm::kF32);
  static constexpr bool kHasExact = true;
  static constexpr int out_chains(int) { return 1; }
};

// The accumulators of a traits type: T::Acc where it has one (the integer forms: int32 lanes),
// else T::V.
template <class T, class = void>
struct AccOf {
  using type = typename T::V;
  static type zero() { return T::zero(); }
};
template <class T>
struct AccOf<T, std::void_t<typename T::Acc>> {
  using type = typename T::Acc;
  static type zero() { return T::acc_zero(); }
};
template <class T, class = void>
struct IsInteger : std::false_type {};
template <class T>
struct IsInteger<T, std::void_t<decltype(T::kInteger)>> : std::bool_constant<T::kInteger> {};
// The word of a row's xp slot of a line that step J, part p multiplies: T::x_word(p, J) where the
// traits say (the byte forms: XForm::kF32Bytes step J takes row 2J, kInt8Bytes part p parity 0),
// else p T::kSteps + J.
template <class T, class = void>
struct XWord {
  static constexpr int at(int p, int j) { return p * T::kSteps + j; }
};
template <class T>
struct XWord<T, std::void_t<decltype(T::x_word(0, 0))>> {
  static constexpr int at(int p, int j) { return T::x_word(p, j); }
};

// A 32-bit word of xp as the f32 it holds (the compilers fold this into a broadcast load).
inline float as_float(const uint32_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}

// A traits type T gives the ISA's vector types and operations, and how a line's codes become
// operands: T::kSteps operands per line (8 rows one by one, 4 pairs of rows, 2 parities of 4
// rows, or an 8-bit layer's 4 codes), each multiplied by T::kParts broadcast words of x per row,
// word XWord<T>::at(p, J) of the row's slot (kernel_avx512.cpp, kernel_avx2.cpp,
// kernel_avx512bf16.cpp, kernel_avx512vnni.cpp).
//
// Independent accumulator chains per row, T::chains(MB): a multiply-add waits ~4-6 cycles for the
// previous one into the same register and two issue per cycle, so about 8-12 chains in all keep
// the units busy. Lines are taken two at a time so that a chain can also alternate between them
// (the slot of step J, part P of line H of the pair is (H kSteps kParts + P kSteps + J) mod C).
//
// 2-bit codes (T::kBits == 2): one load of 16 words holds the codes of a pair of lines, row
// 8H + J of the word for step J of line H of the pair.
template <class T, int MB, bool kExact, int H, int J>
inline __attribute__((always_inline)) void step(const typename T::W& code, const typename T::V& zv, const uint32_t* xl,
                                                typename AccOf<T>::type* acc) {
  constexpr int R = T::kBits == 2 ? 8 * H + J : J;  // the code's row within the word
  const auto t = [&] {
    if constexpr (kExact) return T::template exact<R>(code, zv);
    else return T::template trick<R>(code);
  }();
  constexpr int C = T::chains(MB);
#pragma GCC unroll 8
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 2
    for (int p = 0; p < T::kParts; ++p) {
      constexpr int base = H * T::kSteps * T::kParts + J;
      const int slot = (base + p * T::kSteps) % C;
      acc[m * C + slot] = T::madd(t, xl + m * T::kXWords + XWord<T>::at(p, J), acc[m * C + slot]);
    }
}

template <class T, int MB, bool kExact, int H, int... J>
inline __attribute__((always_inline)) void line(const uint32_t* q, const typename T::V& zv, const uint32_t* xl,
                                                typename AccOf<T>::type* acc, std::integer_sequence<int, J...>) {
  const typename T::W code = T::load_codes(q);
  (step<T, MB, kExact, H, J>(code, zv, xl, acc), ...);
}

// A pair of lines of 2-bit codes: one load, then both lines' steps.
template <class T, int MB, bool kExact, int... J>
inline __attribute__((always_inline)) void line_pair(const uint32_t* q, const typename T::V& zv, const uint32_t* xl0,
                                                     const uint32_t* xl1, typename AccOf<T>::type* acc,
                                                     std::integer_sequence<int, J...>) {
  const typename T::W code = T::load_codes(q);
  (step<T, MB, kExact, 0, J>(code, zv, xl0, acc), ...);
  (step<T, MB, kExact, 1, J>(code, zv, xl1, acc), ...);
}

// Lines the software prefetch runs ahead of the loads: 128 (8 KiB). Measured on the Zen 5 in its
// high bandwidth state (M = 1, 3 shapes, interleaved runs): 64 lines 62-67 GB/s, 128 lines 72-75,
// 256 lines 68-76; on the Skylake VM 64 was best (docs/benchmarks.md). Measured with prefetcht0;
// the kernels now prefetch non-temporally at the same distance (their prefetch()).
constexpr int64_t kPrefetchLines = 128;

// One line's prefetch with the hint of the call (FusedArgs::prefetch; a template parameter, so
// that the loop holds no branch for it). Non-temporal was measured against prefetcht0 on the
// Zen 5 (10 rounds, runs sorted by bandwidth state): low state M = 1-2 +7-15% (4096x4096 43.6 ->
// 48.2 GB/s), high state +1-2%, M = 16 the same. (The GEMM form, which reuses its weights from L2,
// always prefetches with prefetcht0.)
template <Prefetch H>
inline __attribute__((always_inline)) void prefetch_line(uintptr_t p) {
  if constexpr (H == Prefetch::kNta) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_NTA);
  else if constexpr (H == Prefetch::kT0) _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
}
// Bytes of x one K block may use: x stays in L2 while the block's lines of every tile stream
// past it (16 KiB for L1 measured slower on a Zen 5: runs of 32 KiB per tile; docs/benchmarks.md).
constexpr int64_t kXBlockBytes = 256 << 10;

// The end of a segment of the float forms: y's output chains += S s (acc - A) - s z X
// (kernels.h's trick; kExact: += s acc). xa: the segment's A of the block's rows, then its X.
template <class T, int MB, int C, int CO, bool kExact>
inline __attribute__((always_inline)) void float_segment_end(bool asym, const typename T::V& zv, const typename T::V& sv,
                                                             const float* xa, int64_t rb, typename T::V* acc,
                                                             typename T::V* out) {
  using V = typename T::V;
  if constexpr (CO > 1 && !kExact) {
    const V sS = T::mul(sv, T::set1(T::kScale));
    const V sz = T::mul(sv, zv);
    for (int m = 0; m < MB; ++m) {
      for (int c = 0; c < C; ++c) out[m * CO + c % CO] = T::fmadd(sS, acc[m * C + c], out[m * CO + c % CO]);
      out[m * CO] = T::fnmadd(sS, T::set1(xa[m]), out[m * CO]);
      if (asym) out[m * CO + 1] = T::fnmadd(sz, T::set1(xa[rb + m]), out[m * CO + 1]);  // else folded into A
    }
    return;
  }
  // The chains of each row summed as a tree (depth log2 C, not C - 1 dependent adds).
  for (int m = 0; m < MB; ++m)
    for (int half = C / 2; half >= 1; half /= 2)
      for (int c = 0; c < half; ++c) acc[m * C + c] = T::add(acc[m * C + c], acc[m * C + c + half]);
  if constexpr (kExact) {
    for (int m = 0; m < MB; ++m) out[m * CO] = T::fmadd(sv, acc[m * C], out[m * CO]);
  } else {
    const V sS = T::mul(sv, T::set1(T::kScale));
    const V sz = T::mul(sv, zv);
    for (int m = 0; m < MB; ++m) {
      // S s (acc - A) first: acc and A are close, and their difference is the signal.
      out[m * CO] = T::fmadd(sS, T::sub(acc[m * C], T::set1(xa[m])), out[m * CO]);
      if (asym) out[m * CO] = T::fnmadd(sz, T::set1(xa[rb + m]), out[m * CO]);  // else folded into A
    }
  }
}

// The end of a segment of the integer forms (XForm::kInt8, kInt8Bytes): chain c holds part
// (c mod SP) / S of its row (the slots of step() with S = T::kSteps steps x 3 parts, SP = 3 S),
// exact int32 sums of q times the part. Per row, in the unit 2^e of the segment's parts (xa:
// A = 2^e, then X = the segment's x in that unit):
//   y += s 2^e (P0 + P1 2^-7 + P2 2^-14 - z X).
template <class T, int MB, int C>
inline __attribute__((always_inline)) void int_segment_end(const typename T::V& zv, const typename T::V& sv, const float* xa,
                                                           int64_t rb, typename T::Acc* acc, typename T::V* out) {
  constexpr int S = T::kSteps, SP = 3 * S;
  static_assert(C % SP == 0 && T::kParts == 3 && T::out_chains(MB) == 1);
  using V = typename T::V;
  constexpr float kStep = 1.0f / (1 << kInt8PartShift);
  for (int m = 0; m < MB; ++m) {
    typename T::Acc part[3];
    for (int p = 0; p < 3; ++p) {
      part[p] = acc[m * C + p * S];
      for (int c = p * S + 1; c < C; ++c)
        if ((c % SP) / S == p) part[p] = T::acc_add(part[p], acc[m * C + c]);
    }
    V f = T::fmadd(T::to_float(part[2]), T::set1(kStep), T::to_float(part[1]));
    f = T::fmadd(f, T::set1(kStep), T::to_float(part[0]));
    f = T::fnmadd(zv, T::set1(xa[rb + m]), f);
    out[m] = T::fmadd(T::mul(sv, T::set1(xa[m])), f, out[m]);
  }
}

// One tile's share of the K block of segments [s0, s1) for MB rows: y += the block's terms.
// xp: this row block's [lines][rb][8]; xs: its [segments][2][rb]; y: its first row; next: the
// first line the caller reads after this block (where the prefetch goes once it passes the end).
// `first`: s0 is the first segment of the call's K slice (y is written, not accumulated).
template <class T, int MB, bool kExact, Prefetch H>
void row_block(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, bool first, const uint32_t* xp, int64_t rb,
               const float* xs, float* y, int64_t ldy, const uint32_t* next) {
  using V = typename T::V;
  using Steps = std::make_integer_sequence<int, T::kSteps>;
  const uint32_t* q = w.tile_codes(t);
  const float* z = w.tile_zeros(t);
  constexpr int C = T::chains(MB);
  // With T::out_chains(MB) > 1, a row has several output chains and each accumulator chain c
  // goes into output chain c mod CO (out += S s acc_c), so a segment ends with independent
  // multiply-adds instead of a tree of adds and two dependent ones; the corrections go into the
  // first two output chains, and the chains are summed once at the end. The cancellation of S s acc against S s A then spans the layer instead of one
  // segment, which costs ~log2(128 / 8) bits more of fp32 for the bf16 trick (t = 128 + q) and is
  // why the f32 trick (a_j / (q / 16) = 256) does not do this.
  constexpr int CO = T::out_chains(MB);
  V out[MB * CO];
  typename AccOf<T>::type acc[MB * C];
  for (int m = 0; m < MB; ++m) {
    out[m * CO] = first ? T::zero() : T::load(y + m * ldy + t * kTileN);
    for (int c = 1; c < CO; ++c) out[m * CO + c] = T::zero();
  }
  // The prefetch address walks this block's lines, then continues at `next`. Integers, not
  // pointers: it runs past the ends of arrays, which prefetching may but pointers may not.
  const uintptr_t end = uintptr_t(q + w.line_offset(w.seg_line[size_t(s1)]));
  uintptr_t pf = uintptr_t(q) + uintptr_t(w.line_offset(w.seg_line[size_t(s0)]) + kPrefetchLines * kTileN) * sizeof(uint32_t);
  if (pf >= end) pf = uintptr_t(next) + (pf - end);
  for (int64_t sg = s0; sg < s1; ++sg) {
    const int64_t g = w.seg_group[size_t(sg)];
    for (int i = 0; i < MB * C; ++i) acc[i] = AccOf<T>::zero();
    const V zv = z ? T::load(z + g * kTileN) : T::set1(w.sym_zero);
    const int64_t l1 = w.seg_line[size_t(sg + 1)];
    const auto advance = [&] {
      prefetch_line<H>(pf);
      pf += kTileN * sizeof(uint32_t);  // one line
      if (pf == end) pf = uintptr_t(next);
    };
    int64_t l = w.seg_line[size_t(sg)];
    if constexpr (T::kBits == 2) {
      // Segments start at even lines (groups padded to 16 rows: cpu_weights.h); one 64-byte line
      // of codes per pair of lines.
      for (; l + 1 < l1; l += 2) {
        advance();
        line_pair<T, MB, kExact>(q + (l >> 1) * kTileN, zv, xp + l * rb * T::kXWords,
                                 xp + (l + 1) * rb * T::kXWords, acc, Steps{});
      }
      if (l < l1) {
        advance();
        line<T, MB, kExact, 0>(q + (l >> 1) * kTileN, zv, xp + l * rb * T::kXWords, acc, Steps{});
      }
    } else {
      for (; l + 1 < l1; l += 2) {
        advance();
        line<T, MB, kExact, 0>(q + l * kTileN, zv, xp + l * rb * T::kXWords, acc, Steps{});
        advance();
        line<T, MB, kExact, 1>(q + (l + 1) * kTileN, zv, xp + (l + 1) * rb * T::kXWords, acc, Steps{});
      }
      if (l < l1) {
        advance();
        line<T, MB, kExact, 0>(q + l * kTileN, zv, xp + l * rb * T::kXWords, acc, Steps{});
      }
    }
    const V sv = T::load_scales(w.group_scales(t, g), w.scale_type);
    if constexpr (IsInteger<T>::value) {
      int_segment_end<T, MB, C>(zv, sv, xs + sg * 2 * rb, rb, acc, out);
    } else {
      float_segment_end<T, MB, C, CO, kExact>(z != nullptr, zv, sv, xs + sg * 2 * rb, rb, acc, out);
    }
  }
  for (int m = 0; m < MB; ++m) {
    for (int half = CO / 2; half >= 1; half /= 2)
      for (int c = 0; c < half; ++c) out[m * CO + c] = T::add(out[m * CO + c], out[m * CO + c + half]);
    T::store(y + m * ldy + t * kTileN, out[m * CO]);
  }
}

template <class T, bool kExact, Prefetch H>
void run_rows(const FusedArgs& a, int64_t t, int64_t s0, int64_t s1, int64_t block, int64_t mb, const uint32_t* next) {
  const CpuWeights& w = *a.w;
  const int64_t ldy = a.ldy;
  const auto* xp = reinterpret_cast<const uint32_t*>(a.xp) + block * w.lines * a.rb * T::kXWords;
  const float* xs = a.xs + block * w.segments() * 2 * a.rb;
  float* y = a.y + block * a.rb * ldy;
  switch (mb) {
#define NIBBLE_ROWS(n) \
  case n: if constexpr (n <= T::kMaxRows) row_block<T, n, kExact, H>(w, t, s0, s1, s0 == a.seg0, xp, a.rb, xs, y, ldy, next); break;
    NIBBLE_ROWS(1) NIBBLE_ROWS(2) NIBBLE_ROWS(3) NIBBLE_ROWS(4) NIBBLE_ROWS(5) NIBBLE_ROWS(6) NIBBLE_ROWS(7) NIBBLE_ROWS(8)
#undef NIBBLE_ROWS
    default: break;
  }
}

// Tiles [t0, t1) of the K slice [a.seg0, a.seg1) in K blocks: for each block of segments whose x
// fits kXBlockBytes, every tile (and every row block of x) takes its share, accumulating into y.
// So x is read from L2, and the weights still stream once, in runs of the block's lines per tile.
template <class T, Prefetch H>
void run_with(const FusedArgs& a, int64_t t0, int64_t t1) {
  const CpuWeights& w = *a.w;
  const int64_t segs = a.seg1;
  // One block of rows: K blocks sized for L1. Several blocks of rows (m > rb): the whole of K at
  // once, tile after tile, as the K blocks would make every block of rows reload and store its
  // outputs.
  const int64_t max_lines = a.m > a.rb ? w.lines : std::max<int64_t>(kSegmentLines, kXBlockBytes / (a.rb * T::kXWords * int64_t(sizeof(float))));
  for (int64_t s0 = a.seg0; s0 < segs;) {
    int64_t s1 = s0 + 1;
    while (s1 < segs && w.seg_line[size_t(s1 + 1)] - w.seg_line[size_t(s0)] <= max_lines) ++s1;
    for (int64_t t = t0; t < t1; ++t) {
      // Read after this tile's block: the next tile's block, else the first tile's next block,
      // else (the slice done) the slice of the tile after the range, which a thread alone reads
      // next.
      const uint32_t* next = t + 1 < t1    ? w.tile_codes(t + 1) + w.line_offset(w.seg_line[size_t(s0)])
                             : s1 < segs ? w.tile_codes(t0) + w.line_offset(w.seg_line[size_t(s1)])
                                         : w.tile_codes(t1) + w.line_offset(w.seg_line[size_t(a.seg0)]);
      for (int64_t b = 0; b * a.rb < a.m; ++b) {
        const int64_t mb = std::min(a.m - b * a.rb, a.rb);
        if constexpr (T::kHasExact) {
          if (a.exact) {
            run_rows<T, true, H>(a, t, s0, s1, b, mb, next);
            continue;
          }
        }
        run_rows<T, false, H>(a, t, s0, s1, b, mb, next);
      }
    }
    s0 = s1;
  }
}

template <class T>
void run_hinted(const FusedArgs& a, int64_t t0, int64_t t1) {
  switch (a.prefetch) {
    case Prefetch::kNta: run_with<T, Prefetch::kNta>(a, t0, t1); break;
    case Prefetch::kT0: run_with<T, Prefetch::kT0>(a, t0, t1); break;
    case Prefetch::kNone: run_with<T, Prefetch::kNone>(a, t0, t1); break;
  }
}

// T for 4-bit codes, T2 (if not void) for 2-bit ones, T8 (if not void) for an 8-bit layer's
// bytes (x in XForm::kF32Bytes or kInt8Bytes). A form without T2 is never given 2-bit codes, nor
// one without T8 x of the byte forms (the plugin checks: apply(), KernelForm::layout).
template <class T, class T2 = void, class T8 = void>
void run(const FusedArgs& a, int64_t t0, int64_t t1) {
  if constexpr (!std::is_void_v<T2>) {
    if (a.w->code_bits == 2) return run_hinted<T2>(a, t0, t1);
  }
  if constexpr (!std::is_void_v<T8>) {
    if (a.xform == XForm::kF32Bytes || a.xform == XForm::kInt8Bytes) return run_hinted<T8>(a, t0, t1);
  }
  run_hinted<T>(a, t0, t1);
}

}  // namespace
}  // namespace nibble::cpu::fused
