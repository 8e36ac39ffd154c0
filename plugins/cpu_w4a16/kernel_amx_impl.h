// The AMX-BF16 form of the fused kernel, written once over a "tiles" type: kernel_amx.cpp
// instantiates it with the hardware's tile instructions, test_amx_emulated.cpp with the scalar
// emulation of amx_emulation.h, so that its data movement and layouts are tested on CPUs without
// AMX. The rest is AVX-512 (F, BW, VL, DQ).
//
// tdpbf16ps C, A, B computes, for every row m of A and column n of B,
//   C[m][n] += sum over k < 16 of A[m].bf16[2k] B[k].bf16[2n] + A[m].bf16[2k+1] B[k].bf16[2n+1]
// (Intel SDM: two f32 partial sums per element, even and odd pairs, then added to C; input
// denormals read as zero, output denormals flushed, round to nearest). So one B row is one pair
// of K rows for 16 columns, each 32-bit lane a bf16 pair (low half, high half): exactly what one
// shift and one vpternlogd make from a line of codes (cpu_weights.h: pair p of a line is rows p
// and p + 4, at bits 4p and 16 + 4p): pair p of line i, 16 lanes of 128 + q, is row 4i + p of the
// B tile of the K step (32 rows = 4 lines). And one A row is x's row m over those 32 K rows, the
// bf16 pairs in the same order: gather_x's tile layout (kernels.h XLayout).
//
// 2-bit codes (cpu_weights.h: row j of line l at bit 16 (l mod 2) + 2j of its word) put pair p at
// 16 (l mod 2) + 2p and 8 bits above: one vpmultishiftqb (AVX-512 VBMI, which every CPU with AMX
// has; amx_unavailable checks it) per pair picks, for each 32-bit lane, the bytes at those
// offsets into bytes 0 and 2, then the same vpternlogd masks them to 2 bits.
//
// Per call (tiles [t0, t1), segments [seg0, seg1)), with tiles configured once:
//   for each column block (NB tiles) and K block (SB segments):
//     dequantize the block's codes into B tiles (128 + q, exact in bf16), once: the weights are
//     read from memory once per call
//     for each pair of row blocks (2 x rb rows; 1 for fp16 x, whose hi and lo parts take two A
//     tiles), each pair of tiles of the column block, each segment:
//       C (2 x 2 tiles) = 0; per K step of the segment: load 2 A tiles (x, reused across the
//       column block from L1/L2) and 2 B tiles, 4 tdpbf16ps
//       store C, and end the segment as the other bf16 kernels do: y += s (C - A) - s z X
//       (kernel_fused_impl.h), y = for the first segment of the slice
// At one block of rows (decode), NB = 2 and SB = 1: each B tile is used as soon as it is made,
// from L1. Tiles: C tmm0..3 ([row block][column tile]), A tmm4, tmm5, B tmm6, tmm7 (tdpbf16ps
// needs its three tiles distinct).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "amx_tiles.h"
#include "kernels.h"
#include "scales_avx512.h"

namespace nibble::cpu::amx {
// Internal linkage, as kernel_fused_impl.h: each file that includes this compiles it with its own
// tiles type and flags, and nothing of it may be exported from the plugin: as weak symbols of
// default visibility, the member functions and the lambdas the compiler kept out of line were
// called through the PLT from the plugin (docs/benchmarks.md, "The AMX form's calls").
namespace {

/// Bytes of B tiles one K block may use when several blocks of rows reuse them (L2).
constexpr int64_t kBlockBytes = 128 << 10;
/// Column block when several blocks of rows reuse it: the menu's preferred chunk (kernel_choice.cpp).
constexpr int64_t kColumnBlock = 8;
/// Lines the software prefetch of the codes runs ahead, per tile.
constexpr int64_t kPrefetchLines = 64;

template <int N, class F>
inline __attribute__((always_inline)) void unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}

// A diagnostic tiles type (bench_amx_kernels.cpp) may leave out the dequantization or the
// segment ends, to time the rest of the kernel; the hardware's and the emulation's leave out
// nothing (neither declares the flags).
template <class Tiles>
inline constexpr bool kSkipsDequantize = requires { requires Tiles::kSkipDequantize; };
template <class Tiles>
inline constexpr bool kSkipsSegmentEnds = requires { requires Tiles::kSkipSegmentEnds; };

// The per-thread buffers: B tiles of one column and K block, and the stored C tiles.
struct Scratch {
  std::vector<uint32_t, CacheAligned<uint32_t>> b;
  std::vector<float, CacheAligned<float>> c;
};

template <class Tiles, int P, bool kAsym>
class Gemm {
 public:
  Gemm(const FusedArgs& a, Scratch& s) : a_(a), w_(*a.w) {
    segs_ = w_.segments();
    steps_ = a.tile_steps;
    rb_ = a.rb;
    blocks_ = (a.m + rb_ - 1) / rb_;
    // B tiles used by one pass of row blocks (every row in one segment() call: M <= 32 for bf16
    // x, M <= 16 for fp16) are used once, as soon as they are made, from L1: a pair of tiles and
    // one segment at a time. Only several passes reuse a larger block, from L2.
    const bool reused = blocks_ > kRowBlocks;
    nb_ = reused ? kColumnBlock : 2;
    sb_ = reused ? std::max<int64_t>(1, kBlockBytes / (nb_ * steps_ * kPairsPerStep * 64)) : 1;
    const size_t bwords = size_t(nb_ * sb_ * steps_ * kPairsPerStep * 16);
    if (s.b.size() < bwords) s.b.resize(bwords);
    if (s.c.size() < 4 * 256) s.c.resize(4 * 256);
    b_ = s.b.data();
    c_ = s.c.data();
  }

  void run(int64_t t0, int64_t t1) {
    const TileConfig cfg = tile_config(int(rb_));
    Tiles::config(cfg);
    for (int64_t tb = t0; tb < t1; tb += nb_) {
      const int64_t nb = std::min(nb_, t1 - tb);
      for (int64_t sb = a_.seg0; sb < a_.seg1; sb += sb_) {
        const int64_t se = std::min(a_.seg1, sb + sb_);
        if constexpr (!kSkipsDequantize<Tiles>)
          for (int64_t ti = 0; ti < nb; ++ti)
            for (int64_t sg = sb; sg < se; ++sg) dequantize(tb + ti, ti, sg, sg - sb);
        for (int64_t block = 0; block < blocks_; block += kRowBlocks) {
          [[maybe_unused]] const bool two_blocks = kRowBlocks == 2 && block + 1 < blocks_;
          for (int64_t ti = 0; ti < nb; ti += 2) {
            const bool two_tiles = ti + 1 < nb;
            for (int64_t sg = sb; sg < se; ++sg) {
              if constexpr (kRowBlocks == 2) {
                if (two_blocks) {
                  if (two_tiles)
                    segment<2, 2>(block, tb, ti, sg, sg - sb);
                  else
                    segment<2, 1>(block, tb, ti, sg, sg - sb);
                  continue;
                }
              }
              if (two_tiles)
                segment<1, 2>(block, tb, ti, sg, sg - sb);
              else
                segment<1, 1>(block, tb, ti, sg, sg - sb);
            }
          }
        }
      }
    }
    Tiles::release();
  }

 private:
  // Row blocks one segment() call covers: 2 of bf16 x (2 x 2 C tiles), 1 of fp16 x (whose hi and
  // lo parts take both A tiles).
  static constexpr int64_t kRowBlocks = P == 1 ? 2 : 1;

  const uint32_t* a_tile(int64_t block, int64_t sg, int64_t step, int part) const {
    return reinterpret_cast<const uint32_t*>(a_.xp) +
           ((((block * segs_ + sg) * steps_ + step) * P + part) * rb_) * 16;
  }
  uint32_t* b_tile(int64_t ti, int64_t sgi, int64_t step) const {
    return b_ + ((ti * sb_ + sgi) * steps_ + step) * kPairsPerStep * 16;
  }
  int64_t used_steps(int64_t sg) const {
    return (w_.seg_line[size_t(sg + 1)] - w_.seg_line[size_t(sg)] + kStepLines - 1) / kStepLines;
  }

  // The B tiles of segment sg of tile t: row 4i + p of step j = pair p of line 4j + i as 16
  // lanes of bf16 (128 + q_p, 128 + q_p+4); rows past the segment's end 0 (their A is 0 too,
  // and 0 x 0 keeps out whatever the buffer held).
  void dequantize(int64_t t, int64_t ti, int64_t sg, int64_t sgi) {
    if (w_.code_bits == 2)
      dequantize_bits<2>(t, ti, sg, sgi);
    else if (a_.prefetch == Prefetch::kT0)
      dequantize_4bit<Prefetch::kT0>(t, ti, sg, sgi);
    else if (a_.prefetch == Prefetch::kNta)
      dequantize_4bit<Prefetch::kNta>(t, ti, sg, sgi);
    else
      dequantize_4bit<Prefetch::kNone>(t, ti, sg, sgi);
  }
  // 4-bit codes: a segment's lines are one run of codes and its B tiles one run of rows (4 per
  // line), so the loop is a line's load, 3 shifts, 4 vpternlogd and 4 stores, and its prefetch.
  template <Prefetch H>
  void dequantize_4bit(int64_t t, int64_t ti, int64_t sg, int64_t sgi) {
    const __m512i mask = _mm512_set1_epi32(0x000f000f), one = _mm512_set1_epi32(0x43004300);
    const int64_t l0 = w_.seg_line[size_t(sg)], lines = w_.seg_line[size_t(sg + 1)] - l0;
    const uint32_t* src = w_.tile_codes(t) + w_.line_offset(l0);
    uint32_t* rows = b_tile(ti, sgi, 0);
    // Integer arithmetic, not a pointer: the prefetch may run past the end of the codes.
    uintptr_t ahead = uintptr_t(src + kPrefetchLines * kTileN);
    for (int64_t i = 0; i < lines; ++i, src += kTileN, rows += 4 * 16, ahead += kTileN * sizeof(uint32_t)) {
      if constexpr (H == Prefetch::kNta) _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_NTA);
      else if constexpr (H == Prefetch::kT0) _mm_prefetch(reinterpret_cast<const char*>(ahead), _MM_HINT_T0);
      const __m512i codes = _mm512_load_si512(src);
      _mm512_store_si512(rows, _mm512_ternarylogic_epi32(codes, mask, one, 0xea));  // rows 0, 4 at bits 0, 16
      _mm512_store_si512(rows + 16, _mm512_ternarylogic_epi32(_mm512_srli_epi32(codes, 4), mask, one, 0xea));
      _mm512_store_si512(rows + 32, _mm512_ternarylogic_epi32(_mm512_srli_epi32(codes, 8), mask, one, 0xea));
      _mm512_store_si512(rows + 48, _mm512_ternarylogic_epi32(_mm512_srli_epi32(codes, 12), mask, one, 0xea));
    }
    // Rows past the segment's end, to the end of its last K step.
    for (int64_t i = lines; i < used_steps(sg) * kStepLines; ++i, rows += 4 * 16)
      for (int p = 0; p < 4; ++p) _mm512_store_si512(rows + p * 16, _mm512_setzero_si512());
  }
  template <int B>
  void dequantize_bits(int64_t t, int64_t ti, int64_t sg, int64_t sgi) {
    const __m512i mask = _mm512_set1_epi32(B == 2 ? 0x00030003 : 0x000f000f), one = _mm512_set1_epi32(0x43004300);
    // 2-bit codes: the byte picks of pair p for the even (h = 0) and odd (h = 1) line of a word.
    __m512i pick[2][4];
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 4; ++p) {
        const uint64_t lo = uint64_t(16 * h + 2 * p) | uint64_t(16 * h + 2 * p + 8) << 16;  // bytes 0 and 2 of a lane
        pick[h][p] = _mm512_set1_epi64(int64_t(lo | (lo + 0x00200020u) << 32));  // the odd column: 32 bits on
      }
    const uint32_t* q = w_.tile_codes(t);
    const int64_t l0 = w_.seg_line[size_t(sg)], l1 = w_.seg_line[size_t(sg + 1)];
    for (int64_t j = 0; j < used_steps(sg); ++j) {
      uint32_t* bt = b_tile(ti, sgi, j);
      for (int64_t i = 0; i < kStepLines; ++i) {
        const int64_t l = l0 + j * kStepLines + i;
        uint32_t* rows = bt + i * 4 * 16;
        if (l >= l1) {
          for (int p = 0; p < 4; ++p) _mm512_store_si512(rows + p * 16, _mm512_setzero_si512());
          continue;
        }
        // Integer arithmetic, not a pointer: the prefetch may run past the end of the codes. The
        // call's hint (FusedArgs::prefetch): a branch the predictor settles on at once, beside a
        // line's 4 stores.
        const auto ahead = reinterpret_cast<const char*>(uintptr_t(q + w_.line_offset(l) + kPrefetchLines * kTileN));
        if (B == 4 || l % 2 == 0) {  // once per 64-byte line of codes
          if (a_.prefetch == Prefetch::kNta) _mm_prefetch(ahead, _MM_HINT_NTA);
          else if (a_.prefetch == Prefetch::kT0) _mm_prefetch(ahead, _MM_HINT_T0);
        }
        const __m512i codes = _mm512_load_si512(q + w_.line_offset(l));
        const int h = B == 2 ? int(l & 1) : 0;
        unroll<4>([&](auto p) {
          __m512i moved;
          if constexpr (B == 4) {
            moved = p == 0 ? codes : _mm512_srli_epi32(codes, 4 * p);  // rows p, p + 4 at bits 0, 16
          } else {
            // Byte b of a 64-bit lane takes the 8 bits from offset pick.byte[b] of that lane
            // (bytes 1 and 3 are cleared by the mask below).
            moved = _mm512_multishift_epi64_epi8(pick[h][p], codes);
          }
          _mm512_store_si512(rows + p * 16, _mm512_ternarylogic_epi32(moved, mask, one, 0xea));
        });
      }
    }
  }

  // One segment for RB blocks of rows and NT tiles (tb + ti, ...): the K steps on the tiles,
  // then the segment's end.
  template <int RB, int NT>
  void segment(int64_t block, int64_t tb, int64_t ti, int64_t sg, int64_t sgi) {
    unroll<RB>([&](auto r) { unroll<NT>([&](auto n) { Tiles::template zero<r * 2 + n>(); }); });
    const int64_t steps = used_steps(sg);
    for (int64_t j = 0; j < steps; ++j) {
      unroll<RB>([&](auto r) {
        unroll<P>([&](auto p) { Tiles::template load<4 + r * P + p>(a_tile(block + r, sg, j, p), 64); });
      });
      unroll<NT>([&](auto n) { Tiles::template load<6 + n>(b_tile(ti + n, sgi, j), 64); });
      unroll<RB>([&](auto r) {
        unroll<NT>([&](auto n) {
          unroll<P>([&](auto p) { Tiles::template dpbf16ps<r * 2 + n, 4 + r * P + p, 6 + n>(); });
        });
      });
    }
    unroll<RB>([&](auto r) {
      unroll<NT>([&](auto n) { Tiles::template store<r * 2 + n>(c_ + (r * 2 + n) * 256, 64); });
    });
    if constexpr (kSkipsSegmentEnds<Tiles>) return;
    const int64_t g = w_.seg_group[size_t(sg)];
    const bool first = sg == a_.seg0;
    unroll<NT>([&](auto n) {
      const int64_t t = tb + ti + n;
      const __m512 sv = load_scales_avx512(w_.group_scales(t, g), w_.scale_type);
      __m512 sz = _mm512_setzero_ps();
      if constexpr (kAsym) sz = _mm512_mul_ps(sv, _mm512_loadu_ps(w_.tile_zeros(t) + g * kTileN));
      unroll<RB>([&](auto r) {
        const int64_t b = block + r;
        const int64_t rows = std::min(rb_, a_.m - b * rb_);
        const float* xa = a_.xs + (b * segs_ + sg) * 2 * rb_;  // A, then X
        const float* c = c_ + (r * 2 + n) * 256;
        for (int64_t i = 0; i < rows; ++i) {
          float* yp = a_.y + (b * rb_ + i) * a_.ldy + t * kTileN;
          const __m512 acc = _mm512_sub_ps(_mm512_load_ps(c + i * 16), _mm512_set1_ps(xa[i]));
          __m512 out = first ? _mm512_mul_ps(sv, acc) : _mm512_fmadd_ps(sv, acc, _mm512_loadu_ps(yp));
          if constexpr (kAsym)
            out = _mm512_fnmadd_ps(sz, _mm512_set1_ps(xa[rb_ + i]), out);  // else folded into A
          _mm512_storeu_ps(yp, out);
        }
      });
    });
  }

  const FusedArgs& a_;
  const CpuWeights& w_;
  int64_t segs_, steps_, rb_, blocks_, nb_, sb_;
  uint32_t* b_;
  float* c_;
};

/// The AMX form over `Tiles`: tiles [t0, t1) of a.
template <class Tiles>
void gemm(const FusedArgs& a, int64_t t0, int64_t t1) {
  thread_local Scratch scratch;
  const bool asym = a.w->tile_zeros(0) != nullptr;
  if (a.xform == XForm::kBf16x2) {
    if (asym)
      Gemm<Tiles, 2, true>(a, scratch).run(t0, t1);
    else
      Gemm<Tiles, 2, false>(a, scratch).run(t0, t1);
  } else {
    if (asym)
      Gemm<Tiles, 1, true>(a, scratch).run(t0, t1);
    else
      Gemm<Tiles, 1, false>(a, scratch).run(t0, t1);
  }
}

}  // namespace
}  // namespace nibble::cpu::amx
