// The walk of the GEMM forms (gemm-avx512bf16, gemm-avx2) over a call's tiles, rows and K: written
// once; each form brings its block function (MB rows x NT tiles of accumulators over a run of
// segments) compiled with its own instruction set, as a table indexed by (MB, NT).
//
// Cache blocking: the weights of a group of kBlockTiles tiles are walked in K blocks of at most
// kBlockLines lines, once per block of rows, kRowBlocks blocks of rows sharing one pass: the
// weights come from memory for the first block of rows and from L2 for the others, and each
// block of rows' x for the K block is read once and then from L1 by the block's groups of tiles.
// Outputs stay in y between K blocks (the block functions write the first segment of the call's
// K slice and accumulate the others).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "kernels.h"

namespace nibble::cpu::gemm {
// Internal linkage, as kernel_fused_impl.h: each ISA's file compiles its own copy.
namespace {

/// Block function: tiles [t, t + NT) for MB rows, segments [s0, s1); `first`: the call's first
/// segment (y is written, not accumulated); xp: the block of rows' x, [lines][rb][x words]; xs:
/// its [segments][2][rb]; y: its first row; pf: words ahead of the line it reads that it prefetches
/// (0: none, the weights are in L2).
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

/// Tiles [t0, t1) (a multiple of B.tiles but at the end of the layer) for all a.m rows, the K slice
/// [a.seg0, a.seg1).
template <size_t N>
void run(const FusedArgs& a, int64_t t0, int64_t t1, const Blocking& B, const std::array<Block, N>& blocks_of) {
  const CpuWeights& w = *a.w;
  const int64_t segs = w.segments(), ldy = a.ldy;
  const int64_t blocks = (a.m + a.rb - 1) / a.rb;
  for (int64_t tb = t0; tb < t1; tb += B.block_tiles) {
    const int64_t tb1 = std::min(t1, tb + B.block_tiles);
    for (int64_t b0 = 0; b0 < blocks; b0 += B.row_blocks) {
      const int64_t b1 = std::min(blocks, b0 + B.row_blocks);
      for (int64_t s0 = a.seg0; s0 < a.seg1;) {
        int64_t s1 = s0 + 1;
        while (s1 < a.seg1 && w.seg_line[size_t(s1 + 1)] - w.seg_line[size_t(s0)] <= B.block_lines) ++s1;
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
        s0 = s1;
      }
    }
  }
}

}  // namespace
}  // namespace nibble::cpu::gemm
