// The tile instructions of <immintrin.h> as the "tiles" type of kernel_amx_impl.h, for the
// plugin's AMX form (kernel_amx.cpp) and the diagnostic variants of bench_amx. GCC's tile
// intrinsics are asm statements that tell the compiler nothing of the memory they read or write
// (tileloadd, tilestored) or of all 64 bytes of the configuration (ldtilecfg): each is fenced by a
// compiler barrier, so that the stores that make a B tile are done before it is loaded, a stored C
// tile is read only after the store, and a buffer is not rewritten before the tile load that
// reads it. Include it only where the AMX flags are on (-mamx-tile -mamx-bf16).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "amx_tiles.h"

namespace nibble::cpu::amx {

inline void compiler_barrier() { asm volatile("" ::: "memory"); }

// The intrinsics take the tile number as a literal (they paste it into the instruction).
#define NIBBLE_TILE_CASES(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

struct HwTiles {
  static void config(const TileConfig& c) {
    compiler_barrier();
    _tile_loadconfig(&c);
    compiler_barrier();
  }
  static void release() { _tile_release(); }
  template <int T>
  static void zero() {
#define NIBBLE_TILE(n) \
  if constexpr (T == n) _tile_zero(n);
    NIBBLE_TILE_CASES(NIBBLE_TILE)
#undef NIBBLE_TILE
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    compiler_barrier();
#define NIBBLE_TILE(n) \
  if constexpr (T == n) _tile_loadd(n, p, stride);
    NIBBLE_TILE_CASES(NIBBLE_TILE)
#undef NIBBLE_TILE
    compiler_barrier();
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    compiler_barrier();
#define NIBBLE_TILE(n) \
  if constexpr (T == n) _tile_stored(n, p, stride);
    NIBBLE_TILE_CASES(NIBBLE_TILE)
#undef NIBBLE_TILE
    compiler_barrier();
  }
  // The kernel's tiles: C tmm0..3, A tmm4..5, B tmm6..7.
  template <int C, int A, int B>
  static void dpbf16ps() {
    static_assert(C >= 0 && C < 4 && (A == 4 || A == 5) && (B == 6 || B == 7));
#define NIBBLE_DP(c, a, b) \
  if constexpr (C == c && A == a && B == b) _tile_dpbf16ps(c, a, b);
#define NIBBLE_DP_C(c) NIBBLE_DP(c, 4, 6) NIBBLE_DP(c, 4, 7) NIBBLE_DP(c, 5, 6) NIBBLE_DP(c, 5, 7)
    NIBBLE_DP_C(0) NIBBLE_DP_C(1) NIBBLE_DP_C(2) NIBBLE_DP_C(3)
#undef NIBBLE_DP_C
#undef NIBBLE_DP
  }
};

#undef NIBBLE_TILE_CASES

}  // namespace nibble::cpu::amx
