// The portable kernel: plain C++ that the compiler vectorizes; the fallback on any CPU and the
// reference the SIMD kernels are tested against.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "kernels.h"

namespace nibble::cpu {

namespace {
std::atomic<int> g_threads{0};
}

int num_threads() {
  int t = g_threads.load(std::memory_order_relaxed);
  if (t > 0) return t;
  if (const char* env = std::getenv("NIBBLE_NUM_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  return omp_get_max_threads();
}

void set_num_threads(int n) { g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

void matmul_portable(const CpuWeights& w, const float* x, int64_t m, float* y) {
  constexpr int64_t kTileN = 64;  // columns per task: one cache line of 16 u32 words x 4
  constexpr int64_t kRows = 4;    // activation rows per pass over a weight tile
  const int64_t N = w.n, K = w.k;
  const int64_t tiles = (N + kTileN - 1) / kTileN;
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n0 = t * kTileN, nt = std::min(kTileN, N - n0);
    float acc[kRows][kTileN], out[kRows][kTileN], wq[kTileN];
    for (int64_t m0 = 0; m0 < m; m0 += kRows) {
      const int64_t mr = std::min(kRows, m - m0);
      for (int64_t r = 0; r < mr; ++r) std::fill(out[r], out[r] + nt, 0.0f);
      for (int64_t g = 0; g < w.groups; ++g) {
        for (int64_t r = 0; r < mr; ++r) std::fill(acc[r], acc[r] + nt, 0.0f);
        const float* z = &w.zeros[size_t(g * N + n0)];
        for (int64_t k = w.group_start[size_t(g)]; k < w.group_start[size_t(g + 1)]; ++k) {
          const uint32_t* qrow = &w.q[size_t((k / 8) * N + n0)];
          const int shift = int(4 * (k % 8));
          for (int64_t c = 0; c < nt; ++c) wq[c] = float((qrow[c] >> shift) & 0xfu) - z[c];
          for (int64_t r = 0; r < mr; ++r) {
            const float xv = x[(m0 + r) * K + k];
            for (int64_t c = 0; c < nt; ++c) acc[r][c] += xv * wq[c];
          }
        }
        const float* s = &w.scales[size_t(g * N + n0)];
        for (int64_t r = 0; r < mr; ++r)
          for (int64_t c = 0; c < nt; ++c) out[r][c] += s[c] * acc[r][c];
      }
      for (int64_t r = 0; r < mr; ++r) std::copy(out[r], out[r] + nt, y + (m0 + r) * N + n0);
    }
  }
}

}  // namespace nibble::cpu
