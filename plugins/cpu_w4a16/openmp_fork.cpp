#include "openmp_fork.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace nibble::cpu {

namespace {
std::atomic<bool> g_used{false};
std::atomic<bool> g_lost{false};
// In the child of a fork: the parent's (or an ancestor's) OpenMP threads are gone.
void after_fork_in_child() {
  if (g_used.load(std::memory_order_relaxed)) g_lost.store(true, std::memory_order_relaxed);
}
}  // namespace

void note_openmp_use() {
  if (g_used.load(std::memory_order_acquire)) return;
  static std::once_flag once;
  // Registered before the first use is recorded, so that no fork can fall between the two.
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, &after_fork_in_child); });
  g_used.store(true, std::memory_order_release);
}

bool openmp_lost_to_fork() { return g_lost.load(std::memory_order_relaxed); }

const char* openmp_fork_reason() {
  return "this process was forked after the cpu_w4a16 plugin had run OpenMP threads (its oneDNN path "
         "or dense baseline), and GNU libgomp cannot start them again in a forked child (it would hang); "
         "fork before the first such call, or use NIBBLE_CPU_PATH=fused";
}

}  // namespace nibble::cpu
