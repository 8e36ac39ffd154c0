// The plugin's bandwidth probe: the "BW" of the roofline, measured as nibble's kernels read, by the
// same team of threads.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kernels.h"
#include "thread_team.h"

namespace nibble::cpu {

double read_bandwidth(size_t bytes, int threads) {
  const size_t chunk = size_t(1) << 20;  // 1 MiB pieces, a static share of them per member
  bytes = std::max(chunk, bytes / chunk * chunk);
  const size_t chunks = bytes / chunk;
  auto* p = static_cast<uint8_t*>(stream_alloc(bytes));  // the weights' allocation, pages included
  // The widest loads this CPU has: any activation dtype.
  uint64_t (*stream)(const void*, size_t) =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? read_stream_avx512
      : __builtin_cpu_supports("avx2")                                        ? read_stream_avx2
                                                                              : nullptr;
  ThreadTeam& team = ThreadTeam::process();
  std::atomic<uint64_t> sink{0};
  // Each member reads the range it wrote first, so that on several NUMA nodes every page sits on
  // the node of the member that reads it, as the placed weights do.
  auto touch = [&](const TeamMember& me) {
    for (size_t c = size_t(me.share_begin(int64_t(chunks))); c < size_t(me.share_end(int64_t(chunks))); ++c)
      std::memset(p + c * chunk, 1, chunk);
  };
  team.run(threads, touch);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    std::chrono::steady_clock::time_point t0;
    auto read = [&](const TeamMember& me) {
      me.barrier();  // every member started: the clock starts here
      if (me.index() == 0) t0 = std::chrono::steady_clock::now();
      uint64_t total = 0;
      for (size_t c = size_t(me.share_begin(int64_t(chunks))); c < size_t(me.share_end(int64_t(chunks)));
           ++c) {
        const uint8_t* q = p + c * chunk;
        if (stream) {
          total += stream(q, chunk);
        } else {
          const auto* v = reinterpret_cast<const uint64_t*>(q);
          for (size_t i = 0; i < chunk / 8; i += 8)
            total += v[i] + v[i + 1] + v[i + 2] + v[i + 3] + v[i + 4] + v[i + 5] + v[i + 6] + v[i + 7];
        }
      }
      sink.fetch_add(total, std::memory_order_relaxed);
    };
    team.run(threads, read);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  stream_free(p, bytes);
  return double(chunks * chunk) / best;
}

}  // namespace nibble::cpu
