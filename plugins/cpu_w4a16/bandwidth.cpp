// The plugin's bandwidth probe: the "BW" of the roofline, measured as nibble's kernels read.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels.h"

namespace nibble::cpu {

double read_bandwidth(size_t bytes, int threads) {
  bytes = bytes / 4096 * 4096;
  auto* p = static_cast<uint64_t*>(::operator new(bytes, std::align_val_t(64)));
  std::memset(p, 1, bytes);
  const size_t words = bytes / 8;
  double best = 1e30;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
    for (size_t i = 0; i < words; i += 8) {
      // Eight independent words per line; the compiler turns this into wide loads and adds.
      total += p[i] + p[i + 1] + p[i + 2] + p[i + 3] + p[i + 4] + p[i + 5] + p[i + 6] + p[i + 7];
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sink = sink + total;
  }
  ::operator delete(p, std::align_val_t(64));
  return double(bytes) / best;
}

}  // namespace nibble::cpu
