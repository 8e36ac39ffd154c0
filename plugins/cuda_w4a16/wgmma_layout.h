// The shared-memory images and fragment mappings of the sm_90a kernel (wgmma.cu), as index
// functions shared by the kernel and the host-side replay in layout_check.cpp. Plain C++ usable
// from both nvcc and g++. The global packed layout is layout.h's, unchanged: this kernel reads the
// same units as the mma.sync kernels.
//
// Block tile: kWgBN = 256 output features (8 strips) x BM rows of x for BM <= 128, 128 features
// (4 strips) x 256 rows for BM 256; K in stages of 64 (2 units). Two consumer warpgroups of 4
// warps each; consumer warp c (0..7) owns strip c of the tile (BN 256), or n16 half c / 4 of strip
// c % 4 (BN 128: each warpgroup one m64 of the tile's 128 features, m64n256 per wgmma).
//
// Weights: the A operand, from registers (wgmma's RS form). wgmma.m64nNk16's A fragment of a warp
// is mma.m16n8k16's A fragment (row gid + 8 (j & 1), column 2 tig + 8 (j >> 1) of the warp's 16
// rows), so word 2 ks + nt of a lane's unit word (layout.h) dequantizes into exactly the lane's
// A registers for k16 step ks and n16 half nt of its strip. Warp w of a warpgroup supplies rows
// 16 w .. 16 w + 15 of the m64 tile: one wgmma per (k16 step, n16 half) covers the warpgroup's 4
// strips' halves nt, its D row 16 w + r being feature 32 (4 g + w) + 16 nt + r of the tile (g: the
// warpgroup). Each stage holds, per strip, its 2 units as in global memory (one 1 KiB bulk copy).
//
// x: the B operand, from shared memory through a matrix descriptor: K-major, 128-byte swizzle.
// Row r of the stage (a row of x) is 128 bytes, the 8-row atoms 1024 bytes apart (SBO), and the
// 16-byte chunk c of row r sits at chunk position c ^ (r % 8) (the swizzle, on absolute addresses:
// every stage's x tile starts on a 1024-byte boundary). wgmma reads k16 step t of the stage at
// start address + 32 t. Since the packed rows inside a unit are in layout.h's K permutation (which
// suits mma.sync's register B fragments), the producer stores x permuted the same way: the word
// holding k = 2p, 2p + 1 of a stage (p = 0..31, physical order) goes to the mma's k index of that
// row pair, 4-byte word j = 4 (w & 1) + w / 2 of its k16 step (w = p % 8).
#pragma once

#include <cstdint>

#include "layout.h"

namespace nibble::cuda {

constexpr int kWgBN = 256;  // output features per block tile
constexpr int kWgStrips = kWgBN / kStripN;
constexpr int kWgXRowBytes = 128;  // one row of x per stage: 64 k x 2 bytes
constexpr int kWgUnitsPerStage = kTileK / kUnitK;

/// Byte offset, inside a stage's x tile, of the 4-byte word holding x[row r][k = 2p, 2p + 1] of the
/// stage (p = 0..31, k in the packed physical order).
NIBBLE_HD uint32_t wg_x_offset(int r, int p) {
  const int step = p >> 3, w = p & 7;
  const int j = ((w & 1) << 2) | (w >> 1);  // word of the mma's k order within the k16 step
  const int chunk = 2 * step + (j >> 2);    // 16-byte chunk before the swizzle
  return uint32_t(r * kWgXRowBytes + ((chunk ^ (r & 7)) << 4) + 4 * (j & 3));
}

/// The x image (GemmParams::x_image, written by launch_wgmma_x_image): per m tile mt and k stage ks
/// (kt stages per m tile) the x tile of that stage exactly as the kernel's shared memory holds it,
/// bm * 128 bytes at this offset, so that one bulk copy fills a stage's x.
NIBBLE_HD int64_t wg_x_image_tile(int64_t mt, int ks, int kt, int bm) {
  return (mt * kt + ks) * int64_t(bm) * kWgXRowBytes;
}

/// Which word the image-building thread `idx` (0 .. m_tiles * kt * bm * 32 - 1) writes: word p of
/// row r of the tile of (mt, ks). 32-bit divisions (idx < 2^36; a 64-bit division is a call).
NIBBLE_HD void wg_x_image_word(int64_t idx, int bm, int kt, int64_t* mt, int* ks, int* r, int* p) {
  *p = int(idx & 31);
  const uint32_t row_all = uint32_t(idx >> 5), tile = row_all / uint32_t(bm), m_tile = tile / uint32_t(kt);
  *r = int(row_all - tile * uint32_t(bm));
  *ks = int(tile - m_tile * uint32_t(kt));
  *mt = int64_t(m_tile);
}

/// The wgmma descriptor of k16 step t (0..3) of the x tile at shared address `x_tile` (a multiple
/// of 1024): start address + 32 t, LBO 16 (unused by swizzled K-major layouts), SBO 1024, 128-byte
/// swizzle (PTX ISA, "Matrix Descriptor Format").
NIBBLE_HD uint64_t wg_x_desc(uint32_t x_tile, int t) {
  const uint32_t start = x_tile + 32u * uint32_t(t);
  return uint64_t((start & 0x3FFFFu) >> 4) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}

/// The shared address wgmma reads for element (k, n) (k = 0..15 of the k16 step, n = 0..N-1) of a
/// K-major 128-byte-swizzled 16-bit B operand described by `desc`: the canonical layout (8-row
/// atoms of 128-byte rows, SBO between atoms), then the swizzle of the address bits [4, 7) by
/// [7, 10). Only the replay in layout_check.cpp calls this: it is how the hardware reads, written
/// down so the kernel's stores can be checked against it.
NIBBLE_HD uint32_t wg_b_address(uint64_t desc, int k, int n) {
  const uint32_t start = uint32_t(desc & 0x3FFFu) << 4;
  const uint32_t sbo = uint32_t((desc >> 32) & 0x3FFFu) << 4;
  const uint32_t logical = start + uint32_t(n >> 3) * sbo + uint32_t(n & 7) * 128u + uint32_t(k) * 2u;
  return logical ^ (((logical >> 7) & 7u) << 4);
}

/// Byte offsets inside a stage's weight, scale and zero images (one bulk copy per strip for the
/// weights, per unit for the records of the tile's 8 strips).
NIBBLE_HD uint32_t wg_w_offset(int strip, int unit, int lane) {
  return uint32_t(strip * 1024 + unit * 512 + lane * 16);
}
NIBBLE_HD uint32_t wg_s_offset(int unit, int strip, int gid) {
  return uint32_t(unit * 512 + strip * 64 + gid * 8);
}
NIBBLE_HD uint32_t wg_z_offset(int unit, int strip, int gid) {
  return uint32_t(unit * 256 + strip * 32 + gid * 4);
}

/// Accumulator element i (0 .. N/2 - 1) of lane `lane` of warp w of a warpgroup, for one
/// m64nNk16 result: row of the m64 tile and column n (a row of x within the tile).
NIBBLE_HD void wg_acc_position(int w, int lane, int i, int* row, int* col) {
  const int gid = lane >> 2, tig = lane & 3;
  *row = 16 * w + gid + 8 * ((i >> 1) & 1);
  *col = 8 * (i >> 2) + 2 * tig + (i & 1);
}

/// Where accumulator element i of accumulator set nt of lane `lane` of consumer warp cw (0..7)
/// lands in the block tile: output feature and row of x. `halves` is the tile's n16 halves per
/// warp: 2 for BN 256 (warp cw owns strip cw, set nt is its half nt: D row 16 w + r is feature
/// 32 cw + 16 nt + r), 1 for BN 128 (warp cw owns half cw / 4 of strip cw % 4, one set).
NIBBLE_HD void wg_output_position(int halves, int cw, int lane, int nt, int i, int* feature, int* row) {
  int r64, col;
  wg_acc_position(cw & 3, lane, i, &r64, &col);
  const int strip = halves == 2 ? cw : (cw & 3), half = halves == 2 ? nt : (cw >> 2);
  *feature = strip * kStripN + 16 * half + (r64 - 16 * (cw & 3));
  *row = col;
}

// The persistent stream-K grid: `work` = tiles x k stages items in tile-major order over `blocks`
// blocks, block b owning items [wg_sk_begin(b), wg_sk_begin(b + 1)).
NIBBLE_HD int64_t wg_sk_begin(int64_t b, int64_t blocks, int64_t work) { return b * work / blocks; }
/// The block owning item i.
NIBBLE_HD int64_t wg_sk_block_of(int64_t i, int64_t blocks, int64_t work) {
  return ((i + 1) * blocks + work - 1) / work - 1;
}
/// The split fix-up of a tile shared by blocks bf .. bl: participant pi = b - bf of np = bl - bf
/// (every block but bl) sums chunks [wg_split_chunk(pi), wg_split_chunk(pi + 1)) of `chunks`.
NIBBLE_HD int wg_split_chunk(int pi, int np, int chunks) { return pi * chunks / np; }

// Whole waves (GemmParams::wg_sched & kWgSchedWaves): the tiles, in the raster order below, are
// first dealt whole, wave by wave (tile b + j * blocks to block b), and only the tail, between one
// and two waves of tiles, is split stream-K over all blocks (wg_sk_* on the tail's items). All
// blocks then work on one wave of neighbouring tiles at a time, so the x panels and the weight
// panels of a wave are read from HBM once and shared through L2, where the plain stream-K
// order (each block a contiguous range of the whole tile list) keeps every block on a different
// part of both. Without the flag there are no whole waves and the raster group covers every m
// tile: the order and the split are plain stream-K's.
constexpr int kWgRasterGroup = 8;  // m tiles per raster band

/// Tiles dealt whole before the stream-K tail: every tile when they fill whole waves, else all but
/// the last two (partial) waves' worth, so the tail has `blocks` to 2 `blocks` - 1 tiles.
NIBBLE_HD int64_t wg_whole_tiles(int64_t tiles, int64_t blocks) {
  const int64_t waves = tiles / blocks;
  if (tiles % blocks == 0) return tiles;
  return waves >= 2 ? (waves - 1) * blocks : 0;
}

/// Tile `t` (0 .. m_tiles * n_tiles - 1) in the raster order: bands of `group` m tiles, and inside
/// a band, columns of its m tiles one n tile after another. With group >= m_tiles this is the
/// plain order (m tile t % m_tiles, n tile t / m_tiles). 32-bit divisions: tiles < 2^31.
NIBBLE_HD void wg_tile_coords(int64_t t, int m_tiles, int n_tiles, int group, int* mti, int* nti) {
  const uint32_t g = uint32_t(group < m_tiles ? group : m_tiles);
  const uint32_t band_tiles = g * uint32_t(n_tiles), band = uint32_t(t) / band_tiles;
  const uint32_t r = uint32_t(t) - band * band_tiles, m0 = band * g;
  const uint32_t gm = uint32_t(m_tiles) - m0 < g ? uint32_t(m_tiles) - m0 : g;  // the last band may be narrower
  const uint32_t n = r / gm;
  *nti = int(n);
  *mti = int(m0 + r - n * gm);
}

/// The stream-K tail of a launch and one block's range of its items.
struct WgTail {
  int64_t whole;       // tiles dealt whole before the tail (wg_whole_tiles, or 0)
  int64_t work;        // items of the tail: (tiles - whole) * k stages
  int64_t begin, end;  // this block's items of the tail, numbered from the tail's first
};
NIBBLE_HD WgTail wg_tail(int64_t b, int64_t blocks, int64_t tiles, int kts, bool waves) {
  WgTail t;
  t.whole = waves ? wg_whole_tiles(tiles, blocks) : 0;
  t.work = (tiles - t.whole) * kts;
  t.begin = wg_sk_begin(b, blocks, t.work);
  t.end = wg_sk_begin(b + 1, blocks, t.work);
  return t;
}

/// What a block's walk needs besides the grid's constants: its whole tiles, and where its range
/// of the tail starts (tile before the raster, k stage).
struct WgTailStart {
  int whole;  // whole tiles of each block
  int tile, kt;
};

/// The (tile, k stage) items of one block, in the order the block runs them: its whole tiles
/// (b, b + blocks, ...), then its range of the tail. Every role of the kernel (producer, x warps,
/// consumers) walks the same sequence with next(); the consumers skip to a tile's end with
/// tile_end(). Three registers: the producer warps run on 56, and the consumers' k loop holds 128
/// accumulators beside it; the grid's constants (k stages per tile, blocks) and where the tail
/// starts (in shared memory, in the kernel) are passed in.
struct WgItems {
  int tile, kt;    // the current item: tile (before the raster) and k stage
  int whole_left;  // whole tiles left, the current one included (0: in the tail)

  /// Block b's whole tiles and start of the tail; returns its number of items.
  NIBBLE_HD static int plan(const WgTail& tail, int kts, int64_t blocks, WgTailStart* start) {
    const int64_t t0 = tail.begin / kts;
    start->whole = int(tail.whole / blocks);  // whole: a multiple of blocks
    start->tile = int(tail.whole + t0);
    start->kt = int(tail.begin - t0 * kts);
    return int(int64_t(start->whole) * kts + (tail.end - tail.begin));
  }
  /// Starts at block b's first item.
  NIBBLE_HD void init(int b, const WgTailStart& start) {
    whole_left = start.whole;
    tile = whole_left > 0 ? b : start.tile;
    kt = whole_left > 0 ? 0 : start.kt;
  }
  /// The next item.
  NIBBLE_HD void next(int kts, int blocks, const WgTailStart& start) {
    if (++kt < kts) return;
    kt = 0;
    if (whole_left > 1) {
      --whole_left;
      tile += blocks;
    } else if (whole_left == 1) {
      whole_left = 0;
      tile = start.tile;
      kt = start.kt;
    } else {
      ++tile;
    }
  }
  /// The first item of the next tile (the rest of the current tile skipped).
  NIBBLE_HD void tile_end(int kts, int blocks, const WgTailStart& start) {
    kt = kts - 1;
    next(kts, blocks, start);
  }
  /// Whether the current tile is dealt whole to this block (never shared with another).
  NIBBLE_HD bool in_whole() const { return whole_left > 0; }
};

}  // namespace nibble::cuda
