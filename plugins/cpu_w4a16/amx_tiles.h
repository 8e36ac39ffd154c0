// The AMX tile configuration of the AMX form (kernel_amx_impl.h), apart from its kernel code, so
// that the tile emulation (amx_emulation.h) and its tests need no AVX-512.
#pragma once

#include <cstdint>

namespace nibble::cpu::amx {

/// The 64-byte operand of ldtilecfg (palette 1): bytes 16..31 the bytes per row of tmm0..7,
/// bytes 48..55 their rows; every other byte must be 0.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved0[14] = {};
  uint16_t colsb[8] = {};
  uint16_t reserved1[8] = {};
  uint8_t rows[8] = {};
  uint8_t reserved2[8] = {};
};
static_assert(sizeof(TileConfig) == 64);

/// Rows of a B tile: K pairs per step (32 K rows, 4 lines of codes).
constexpr int kPairsPerStep = 16;
constexpr int64_t kStepLines = 4;
/// C and A tiles of `rows` rows (x's rows of one block), B tiles of 16; all rows 64 bytes.
inline TileConfig tile_config(int rows) {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = uint8_t(t >= 6 ? kPairsPerStep : rows);
  }
  return c;
}

}  // namespace nibble::cpu::amx
