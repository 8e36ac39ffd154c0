// A scalar emulation of the AMX tile operations the AMX form uses (ldtilecfg, tilezero, tileloadd,
// tilestored, tdpbf16ps, tilerelease), with the checks where the hardware faults (#GP on a bad
// configuration, #UD on tiles that are not configured, alike, or of mismatched shapes), for
// testing kernel_amx_impl.h on CPUs without AMX (test_amx_emulated.cpp). tdpbf16ps follows the
// Intel SDM's operation: per element of C, an f32 sum of the even and one of the odd products
// over the 16 pairs, each a fused multiply-add with input denormals read as zero and output
// denormals flushed, round to nearest even, then the two added and the sum added to C.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "amx_tiles.h"
#include "kernels.h"

namespace nibble::cpu::amx {

struct EmuTiles {
  struct State {
    bool configured = false;
    int rows[8] = {}, colsb[8] = {};
    alignas(64) uint8_t reg[8][16][64] = {};
    int64_t dpbf16ps = 0;  ///< tdpbf16ps executed (for the tests)
  };
  /// This thread's tile state (the hardware's is per thread, too).
  static State& state() {
    thread_local State s;
    return s;
  }

  static void config(const TileConfig& c) {
    uint8_t raw[64];
    std::memcpy(raw, &c, 64);
    if (raw[0] != 1) fault("ldtilecfg: palette " + std::to_string(raw[0]) + ", expected 1");
    for (int i = 2; i < 16; ++i)
      if (raw[i]) fault("ldtilecfg: reserved byte " + std::to_string(i) + " set");
    for (int i = 32; i < 48; ++i)
      if (raw[i]) fault("ldtilecfg: reserved byte " + std::to_string(i) + " set (colsb of tmm8..15)");
    for (int i = 56; i < 64; ++i)
      if (raw[i]) fault("ldtilecfg: reserved byte " + std::to_string(i) + " set (rows of tmm8..15)");
    State& s = state();
    for (int t = 0; t < 8; ++t) {
      const int colsb = c.colsb[t], rows = c.rows[t];
      if (colsb > 64 || rows > 16 || (colsb == 0) != (rows == 0) || colsb % 4)
        fault("ldtilecfg: tmm" + std::to_string(t) + " of " + std::to_string(rows) + " rows x " +
              std::to_string(colsb) + " bytes");
      s.rows[t] = rows;
      s.colsb[t] = colsb;
    }
    if (c.start_row) fault("ldtilecfg: start_row set");
    std::memset(s.reg, 0, sizeof s.reg);
    s.configured = true;
  }
  static void release() {
    State& s = state();
    const int64_t dp = s.dpbf16ps;
    s = State{};
    s.dpbf16ps = dp;
  }
  template <int T>
  static void zero() {
    std::memset(tile(T).reg[T], 0, sizeof state().reg[T]);
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    State& s = tile(T);
    std::memset(s.reg[T], 0, sizeof s.reg[T]);
    for (int r = 0; r < s.rows[T]; ++r)
      std::memcpy(s.reg[T][r], static_cast<const uint8_t*>(p) + r * stride, size_t(s.colsb[T]));
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    State& s = tile(T);
    for (int r = 0; r < s.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, s.reg[T][r], size_t(s.colsb[T]));
  }
  template <int C, int A, int B>
  static void dpbf16ps() {
    State& s = tile(C);
    tile(A);
    tile(B);
    if (C == A || C == B || A == B) fault("tdpbf16ps: tiles must differ");
    // C = m x n f32, A = m x k pairs, B = k x n pairs.
    const int m = s.rows[C], n = s.colsb[C] / 4, k = s.rows[B];
    if (s.colsb[B] / 4 != n || s.rows[A] != m || s.colsb[A] / 4 != k || n > 16 || k > 16)
      fault("tdpbf16ps: shapes C " + shape(C) + ", A " + shape(A) + ", B " + shape(B) + " do not fit");
    for (int i = 0; i < m; ++i) {
      float even[16] = {}, odd[16] = {};
      for (int kk = 0; kk < k; ++kk)
        for (int j = 0; j < n; ++j) {
          even[j] = ftz(std::fma(bf16(s.reg[A][i], 2 * kk), bf16(s.reg[B][kk], 2 * j), even[j]));
          odd[j] = ftz(std::fma(bf16(s.reg[A][i], 2 * kk + 1), bf16(s.reg[B][kk], 2 * j + 1), odd[j]));
        }
      for (int j = 0; j < n; ++j) {
        float c;
        std::memcpy(&c, s.reg[C][i] + 4 * j, 4);
        c = ftz(daz(c) + ftz(even[j] + odd[j]));
        std::memcpy(s.reg[C][i] + 4 * j, &c, 4);
      }
    }
    ++s.dpbf16ps;
  }

 private:
  [[noreturn]] static void fault(const std::string& what) {
    throw std::logic_error("AMX emulation: " + what);
  }
  static State& tile(int t) {
    State& s = state();
    if (!s.configured) fault("tile used before ldtilecfg");
    if (t < 0 || t > 7 || !s.rows[t]) fault("tmm" + std::to_string(t) + " is not configured");
    return s;
  }
  static std::string shape(int t) {
    return std::to_string(state().rows[t]) + "x" + std::to_string(state().colsb[t]) + "B";
  }
  // Input denormals read as zero; output denormals flushed.
  static float daz(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }
  static float ftz(float f) { return daz(f); }
  static float bf16(const uint8_t* row, int i) {
    uint16_t h;
    std::memcpy(&h, row + 2 * i, 2);
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return daz(f);
  }
};

/// The AMX form over EmuTiles (amx_emulated_kernel.cpp, compiled with AVX-512 flags): the tests
/// call it, so that their own code needs no AVX-512.
void gemm_emulated(const FusedArgs& a, int64_t t0, int64_t t1);

}  // namespace nibble::cpu::amx
