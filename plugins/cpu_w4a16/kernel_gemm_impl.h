// The GEMM forms' common parts: the walk over a call's tiles, rows and K (run), written once for
// every GEMM form, each of which brings its block function (MB rows x NT tiles of accumulators
// over a run of segments) compiled with its own instruction set, as a table indexed by (MB, NT);
// and the block function of the f32 GEMM form (gemm-avx2: block_f32, over the one-tile form's
// traits of kernel_fused_impl.h; written over the traits, not AVX2 itself: an AVX-512 instance,
// gemm-avx512 with 12 rows, was measured and removed, docs/benchmarks.md "gemm-avx2").
//
// Cache blocking (Blocking): the weights of a group of block_tiles tiles are walked in K blocks of
// at most block_lines lines, once per block of rows, row_blocks blocks of rows sharing one pass: the
// weights come from memory for the first block of rows and from L2 for the others, and each
// block of rows' x for the K block is read once and then from L1 by the block's groups of tiles.
// Outputs stay in y between K blocks (the block functions write the first segment of the call's
// K slice and accumulate the others).
#pragma once

#include <algorithm>
#include <array>
#include <cassert>
#include <cstdlib>
#include <cstdint>
#include <utility>

#include "kernel_fused_impl.h"
#include "kernels.h"

namespace nibble::cpu::gemm {
// Internal linkage, as kernel_fused_impl.h: each ISA's file compiles its own copy.
namespace {

// The decoded variant (block_f32_decoded) from kMinDecodedBlocks blocks of rows: on a Zen 3 it beat
// the direct variant from 3 blocks of rows on, tied at 2 and lost at one (the operands written
// and read back for nothing; docs/benchmarks.md "gemm-avx2"). K blocks of 32, 64 or 128 lines
// measured alike; 64 lines are 32 KiB of operands.
constexpr int64_t kDecodedLines = 64, kMinDecodedBlocks = 3;

/// Block function: tiles [t, t + NT) for MB rows, segments [s0, s1); `first`: the call's first
/// segment (y is written, not accumulated); xp: the block of rows' x, [lines][rb][x words]; xs:
/// its [segments][2][rb]; y: its first row; pf: words ahead of the line it reads that it prefetches
/// for the first block of rows of a pass (0 for the others, whose weights are in L2: the bf16 form
/// then prefetches its own line, as measured; the f32 form nothing).
using Block = void (*)(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const uint32_t* xp,
                       int64_t rb, const float* xs, float* y, int64_t ldy, int64_t pf);

/// The sizes of a form's blocking.
struct Blocking {
  int tiles;              ///< NT at most: the column blocking (KernelForm::quantum); MB is FusedArgs::rb
  int64_t x_words;        ///< 32-bit words of xp per line and row
  int64_t block_tiles;    ///< tiles of one block of the weights
  int64_t block_lines;    ///< lines of one K block at most
  int64_t row_blocks;     ///< blocks of rows sharing one pass over a block of the weights
  int64_t prefetch_lines; ///< how far ahead the first block of rows prefetches each tile
};

/// The table of a form's block functions, entry (MB - 1) * B.tiles + (NT - 1): F<MB, NT>::run.
template <template <int, int> class F, int kTiles, int... I>
constexpr auto table(std::integer_sequence<int, I...>) {
  return std::array<Block, sizeof...(I)>{&F<I / kTiles + 1, I % kTiles + 1>::run...};
}

/// The passes of a walk over tiles [t0, t1) and the K slice [a.seg0, a.seg1): groups of
/// B.block_tiles tiles, groups of B.row_blocks blocks of rows, K blocks of at most `lines` lines
/// (whole segments); f(tb, tb1, b0, b1, s0, s1) for each.
template <class F>
void passes(const FusedArgs& a, int64_t t0, int64_t t1, const Blocking& B, int64_t lines, F&& f) {
  const CpuWeights& w = *a.w;
  const int64_t blocks = (a.m + a.rb - 1) / a.rb;
  for (int64_t tb = t0; tb < t1; tb += B.block_tiles) {
    const int64_t tb1 = std::min(t1, tb + B.block_tiles);
    for (int64_t b0 = 0; b0 < blocks; b0 += B.row_blocks) {
      const int64_t b1 = std::min(blocks, b0 + B.row_blocks);
      for (int64_t s0 = a.seg0; s0 < a.seg1;) {
        int64_t s1 = s0 + 1;
        while (s1 < a.seg1 && w.seg_line[size_t(s1 + 1)] - w.seg_line[size_t(s0)] <= lines) ++s1;
        f(tb, tb1, b0, b1, s0, s1);
        s0 = s1;
      }
    }
  }
}

/// Tiles [t0, t1) (a multiple of B.tiles but at the end of the layer) for all a.m rows, the K slice
/// [a.seg0, a.seg1).
template <size_t N>
void run(const FusedArgs& a, int64_t t0, int64_t t1, const Blocking& B, const std::array<Block, N>& blocks_of) {
  const CpuWeights& w = *a.w;
  const int64_t segs = w.segments(), ldy = a.ldy;
  passes(a, t0, t1, B, B.block_lines, [&](int64_t tb, int64_t tb1, int64_t b0, int64_t b1, int64_t s0, int64_t s1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t mb = std::min(a.m - b * a.rb, a.rb);
      const auto* xp = reinterpret_cast<const uint32_t*>(a.xp) + b * w.lines * a.rb * B.x_words;
      const float* xs = a.xs + b * segs * 2 * a.rb;
      for (int64_t t = tb; t < tb1; t += B.tiles) {
        const int64_t nt = std::min<int64_t>(B.tiles, tb1 - t);
        blocks_of[size_t((mb - 1) * B.tiles + (nt - 1))](w, t, s0, s1, a.seg0, xp, a.rb, xs, a.y + b * a.rb * ldy,
                                                         ldy, b == b0 ? B.prefetch_lines * kTileN : 0);
      }
    }
  });
}

// The f32 GEMM forms' block: MB rows x one tile of accumulators, so that each operand made from a
// line's codes (the one-tile form's trick or exact form, T::trick / T::exact) feeds MB
// multiply-adds. The one-tile forms hold a few rows (each row's accumulators and outputs in
// registers: 3 with AVX2, 8 with AVX-512) and make, with AVX2, as many integer operations as
// multiply-adds (about 40% of the FMA peak at M >= 64 on a Zen 3). Outputs stay in y between
// segments: the accumulators start at -A (the trick; 0 for the exact form), so a segment ends with
// one multiply-add per accumulator. T: the 4-bit or the 2-bit traits (a line of 2-bit words holds
// lines l and l + 1; segments start at even lines); kExact: f32 activations, t = q - z.
template <class T, int MB, bool kExact, bool kAsym>
void block_f32(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const uint32_t* xp, int64_t rb,
               const float* xs, float* y, int64_t ldy, int64_t pf) {
  using V = typename T::V;
  constexpr int kX = T::kXWords;  // f32 x: 8 words per line and row
  const uint32_t* q = w.tile_codes(t);
  const float* z = w.tile_zeros(t);
  for (int64_t sg = s0; sg < s1; ++sg) {
    const int64_t g = w.seg_group[size_t(sg)];
    const float* xa = xs + sg * 2 * rb;  // A, then X
    const V zv = z ? T::load(z + g * kTileN) : T::set1(w.sym_zero);
    V acc[MB];
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) acc[m] = kExact ? T::zero() : T::set1(-xa[m]);
    // Step R of the code words (row R of the word), x of the line at xl.
    const auto step = [&]<int R>(const typename T::W& code, const uint32_t* xl) {
      const V tv = kExact ? T::template exact<R>(code, zv) : T::template trick<R>(code);
#pragma GCC unroll 16
      for (int m = 0; m < MB; ++m) acc[m] = T::madd(tv, xl + m * kX + R % 8, acc[m]);
    };
    const auto steps = [&]<int H, int... J>(const typename T::W& code, const uint32_t* xl,
                                            std::integer_sequence<int, J...>) {
      (step.template operator()<T::kBits == 2 ? 8 * H + J : J>(code, xl), ...);
    };
    const int64_t l1 = w.seg_line[size_t(sg + 1)];
    for (int64_t l = w.seg_line[size_t(sg)]; l < l1; l += T::kBits == 2 ? 2 : 1) {
      const uint32_t* c = q + w.line_offset(l);
      // An integer address: past the last tile it runs beyond the array, which a prefetch may.
      if (pf) _mm_prefetch(reinterpret_cast<const char*>(uintptr_t(c) + uintptr_t(pf) * sizeof(uint32_t)), _MM_HINT_T0);
      const typename T::W code = T::load_codes(c);
      steps.template operator()<0>(code, xp + l * rb * kX, std::make_integer_sequence<int, 8>{});
      if (T::kBits == 2 && l + 1 < l1)
        steps.template operator()<1>(code, xp + (l + 1) * rb * kX, std::make_integer_sequence<int, 8>{});
    }
    const V sv = T::load_scales(w.group_scales(t, g), w.scale_type);
    const V sS = kExact ? sv : T::mul(sv, T::set1(T::kScale));
    const V sz = T::mul(sv, zv);
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      float* yp = y + m * ldy + t * kTileN;
      V out = sg == first ? T::mul(sS, acc[m]) : T::fmadd(sS, acc[m], T::load(yp));
      if (!kExact && kAsym) out = T::fnmadd(sz, T::set1(xa[rb + m]), out);  // else folded into A
      T::store(yp, out);
    }
  }
}

// The decoded variant of the f32 block, for many blocks of rows: the operands of a tile's K block
// (T::trick / T::exact of every line and row: [lines][8][16 columns] f32) are made once by
// decode_f32 into `ops`, and every block of rows of the pass multiplies them from there (the
// multiply-adds take them as memory operands), so the integer work is paid once per K block of a
// tile instead of once per block of rows.
template <class T, bool kExact>
void decode_f32(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, float* ops) {
  using V = typename T::V;
  const uint32_t* q = w.tile_codes(t);
  const float* z = w.tile_zeros(t);
  const int64_t l0 = w.seg_line[size_t(s0)];
  for (int64_t sg = s0; sg < s1; ++sg) {
    const V zv = z ? T::load(z + w.seg_group[size_t(sg)] * kTileN) : T::set1(w.sym_zero);
    const auto steps = [&]<int H, int... J>(const typename T::W& code, float* out, std::integer_sequence<int, J...>) {
      ((T::store(out + J * kTileN, kExact ? T::template exact<T::kBits == 2 ? 8 * H + J : J>(code, zv)
                                          : T::template trick<T::kBits == 2 ? 8 * H + J : J>(code))),
       ...);
    };
    const int64_t l1 = w.seg_line[size_t(sg + 1)];
    for (int64_t l = w.seg_line[size_t(sg)]; l < l1; l += T::kBits == 2 ? 2 : 1) {
      const typename T::W code = T::load_codes(q + w.line_offset(l));
      steps.template operator()<0>(code, ops + (l - l0) * 8 * kTileN, std::make_integer_sequence<int, 8>{});
      if (T::kBits == 2 && l + 1 < l1)
        steps.template operator()<1>(code, ops + (l + 1 - l0) * 8 * kTileN, std::make_integer_sequence<int, 8>{});
    }
  }
}

template <class T, int MB, bool kExact, bool kAsym>
void block_f32_decoded(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const float* ops,
                       const uint32_t* xp, int64_t rb, const float* xs, float* y, int64_t ldy) {
  using V = typename T::V;
  constexpr int kX = T::kXWords;
  const float* z = w.tile_zeros(t);
  const int64_t l0 = w.seg_line[size_t(s0)];
  for (int64_t sg = s0; sg < s1; ++sg) {
    const int64_t g = w.seg_group[size_t(sg)];
    const float* xa = xs + sg * 2 * rb;  // A, then X
    V acc[MB];
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) acc[m] = kExact ? T::zero() : T::set1(-xa[m]);
    const int64_t l1 = w.seg_line[size_t(sg + 1)];
    for (int64_t l = w.seg_line[size_t(sg)]; l < l1; ++l) {
      const float* o = ops + (l - l0) * 8 * kTileN;
      const uint32_t* xl = xp + l * rb * kX;
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const V tv = T::load(o + j * kTileN);
#pragma GCC unroll 16
        for (int m = 0; m < MB; ++m) acc[m] = T::madd(tv, xl + m * kX + j, acc[m]);
      }
    }
    const V sv = T::load_scales(w.group_scales(t, g), w.scale_type);
    const V sS = kExact ? sv : T::mul(sv, T::set1(T::kScale));
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      float* yp = y + m * ldy + t * kTileN;
      V out = sg == first ? T::mul(sS, acc[m]) : T::fmadd(sS, acc[m], T::load(yp));
      if (!kExact && kAsym) out = T::fnmadd(T::mul(sv, T::load(z + g * kTileN)), T::set1(xa[rb + m]), out);
      T::store(yp, out);
    }
  }
}

// The walk of the decoded variant: as run(), with a tile's K block decoded once and then taken by
// every block of rows of the pass (tiles outside, blocks of rows inside).
template <class T, int kRows, bool kExact, bool kAsym, int... I>
void run_decoded(const FusedArgs& a, int64_t t0, int64_t t1, const Blocking& B, std::integer_sequence<int, I...>) {
  using Dec = void (*)(const CpuWeights&, int64_t, int64_t, int64_t, int64_t, const float*, const uint32_t*, int64_t,
                       const float*, float*, int64_t);
  static constexpr Dec blocks_of[] = {&block_f32_decoded<T, I + 1, kExact, kAsym>...};
  const CpuWeights& w = *a.w;
  const int64_t segs = w.segments(), ldy = a.ldy;
  // The longest K block: kDecodedLines, or one segment (kSegmentLines) where that is longer.
  alignas(64) float ops[std::max<int64_t>(kDecodedLines, kSegmentLines) * 8 * kTileN];
  passes(a, t0, t1, B, kDecodedLines, [&](int64_t tb, int64_t tb1, int64_t b0, int64_t b1, int64_t s0, int64_t s1) {
    for (int64_t t = tb; t < tb1; ++t) {
      decode_f32<T, kExact>(w, t, s0, s1, ops);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t mb = std::min(a.m - b * a.rb, a.rb);
        const auto* xp = reinterpret_cast<const uint32_t*>(a.xp) + b * w.lines * a.rb * B.x_words;
        blocks_of[size_t(mb - 1)](w, t, s0, s1, a.seg0, ops, xp, a.rb, a.xs + b * segs * 2 * a.rb,
                                  a.y + b * a.rb * ldy, ldy);
      }
    }
  });
}

template <class T, bool kExact, bool kAsym>
struct BlocksF32 {
  template <int MB, int NT>
  struct F {
    static void run(const CpuWeights& w, int64_t t, int64_t s0, int64_t s1, int64_t first, const uint32_t* xp,
                    int64_t rb, const float* xs, float* y, int64_t ldy, int64_t pf) {
      block_f32<T, MB, kExact, kAsym>(w, t, s0, s1, first, xp, rb, xs, y, ldy, pf);
    }
  };
};

template <class T, int kRows, bool kExact, bool kAsym>
void run_f32_with(const FusedArgs& a, int64_t t0, int64_t t1, const Blocking& B) {
  assert(B.x_words == T::kXWords && B.tiles == 1);
  // NIBBLE_CPU_GEMM_DECODED=0 or 1 forces the direct or the decoded variant (for A/B runs).
  static const int forced = [] {
    const char* e = std::getenv("NIBBLE_CPU_GEMM_DECODED");
    return e && (*e == '0' || *e == '1') ? *e - '0' : -1;
  }();
  const bool decoded = forced >= 0 ? forced == 1 : (a.m + a.rb - 1) / a.rb >= kMinDecodedBlocks;
  if (decoded) return run_decoded<T, kRows, kExact, kAsym>(a, t0, t1, B, std::make_integer_sequence<int, kRows>{});
  static constexpr auto blocks = table<BlocksF32<T, kExact, kAsym>::template F, 1>(std::make_integer_sequence<int, kRows>{});
  run(a, t0, t1, B, blocks);
}

/// The f32 GEMM form: T the 4-bit traits, T2 the 2-bit ones, kRows rows at most per block
/// (FusedArgs::rb), B.tiles = 1.
template <class T, class T2, int kRows>
void run_f32(const FusedArgs& a, int64_t t0, int64_t t1, const Blocking& B) {
  const bool asym = a.w->tile_zeros(0) != nullptr;
  const auto with = [&]<class U>() {
    // The exact form subtracts the zero points per operand (zv): kAsym changes nothing there.
    if (a.exact) run_f32_with<U, kRows, true, false>(a, t0, t1, B);
    else asym ? run_f32_with<U, kRows, false, true>(a, t0, t1, B) : run_f32_with<U, kRows, false, false>(a, t0, t1, B);
  };
  if (a.w->code_bits == 2) with.template operator()<T2>();
  else with.template operator()<T>();
}

}  // namespace
}  // namespace nibble::cpu::gemm
