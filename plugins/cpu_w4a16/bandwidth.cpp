// The plugin's bandwidth probe: the "BW" of the roofline, measured as nibble's kernels read.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "kernels.h"

namespace nibble::cpu {

double read_bandwidth(size_t bytes, int threads) {
  bytes = bytes / 4096 * 4096;
  auto* p = static_cast<uint64_t*>(stream_alloc(bytes));  // the weights' allocation, pages included
  std::memset(p, 1, bytes);
  const std::string isa = best_fused_kernel(NIBBLE_DTYPE_F32).name;  // the widest loads: any act dtype
  uint64_t (*stream)(const void*, size_t) = isa == "avx512" ? read_stream_avx512 : isa == "avx2" ? read_stream_avx2 : nullptr;
  const size_t chunk = size_t(1) << 20;  // 1 MiB pieces, handed out statically
  const size_t chunks = bytes / chunk;
  double best = 1e30;
  volatile uint64_t sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
    for (size_t c = 0; c < chunks; ++c) {
      const uint64_t* q = p + c * (chunk / 8);
      if (stream) {
        total += stream(q, chunk);
      } else {
        for (size_t i = 0; i < chunk / 8; i += 8) total += q[i] + q[i + 1] + q[i + 2] + q[i + 3] + q[i + 4] + q[i + 5] + q[i + 6] + q[i + 7];
      }
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sink = sink + total;
  }
  stream_free(p, bytes);
  return double(chunks * chunk) / best;
}

}  // namespace nibble::cpu
