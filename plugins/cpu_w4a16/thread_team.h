// The cpu_w4a16 plugin's own team of threads: the threads that run apply's work, kept between calls
// (spinning briefly, then asleep on a futex) so that a call costs a few microseconds to start and
// end, not the tens that a fresh OpenMP region costs on a many-core server.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nibble::cpu {

class ThreadTeam;

/// One member's view of a job: its index (0 is the thread that called ThreadTeam::run), how many
/// members run the job, and the team's barrier.
class TeamMember {
 public:
  TeamMember(ThreadTeam* team, int index, int size) : team_(team), index_(index), size_(size) {}
  int index() const { return index_; }
  int size() const { return size_; }
  /// Returns once every member of the job has called it (as many times as this one).
  void barrier() const;
  /// Members [0, size) split `n` items statically: this member's first item and one past its last.
  int64_t share_begin(int64_t n) const { return n * index_ / size_; }
  int64_t share_end(int64_t n) const { return n * (index_ + 1) / size_; }

 private:
  ThreadTeam* team_;
  int index_, size_;
};

/// A team of worker threads that run jobs together with the thread that calls run().
///
/// Concurrent calls queue: one job runs at a time, on the whole team, and the others wait for it
/// (a mutex). The team is sized to the cores; two jobs at once would share them anyway, and a
/// memory-bound job gains nothing from sharing the memory with another, so a call that waits
/// loses about what it would lose running beside the other.
///
/// Workers that have nothing to do spin for kSpinNanos (a host's decode loop calls layer after
/// layer with little in between), then sleep on a futex until the next job. A fork of the host
/// process is safe (pthread_atfork): the fork waits for a running job to end, and the child
/// starts a team of its own on its first job.
class ThreadTeam {
 public:
  using Job = void (*)(void* ctx, const TeamMember& me);
  /// How long an idle worker, a member waiting at the barrier or the caller waiting for the
  /// others spins before it sleeps.
  static constexpr int64_t kSpinNanos = 100'000;

  ThreadTeam();
  ~ThreadTeam();  ///< not while a job runs
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  /// Runs job(ctx, member) on `threads` members at once, the calling thread as member 0, and
  /// returns when all of them have returned; the first exception a member threw is rethrown here
  /// (after every member is done). Where the system refuses to start as many threads, the job runs
  /// on fewer members (TeamMember::size says how many); returns that size.
  int run(int threads, Job job, void* ctx);
  template <class F>
  int run(int threads, F& f) {
    return run(
        threads, [](void* c, const TeamMember& me) { (*static_cast<F*>(c))(me); }, &f);
  }

  /// NUMA placement: worker i (member i of a job, i >= 1) runs on the CPUs of
  /// placement[(i - 1) % placement.size()] (a list of CPU numbers per node), and the caller,
  /// whose CPU is the host's business, belongs to no node. Empty: no pinning, one node. Applies to
  /// the running workers too.
  void set_placement(std::vector<std::vector<int>> placement);
  /// The node member `index` of a job runs on under the placement: 0 without one; -1 for the
  /// caller (member 0) with one.
  int node_of(int index) const {
    const int n = nodes_.load(std::memory_order_relaxed);
    return n == 0 ? 0 : index < 1 ? -1 : (index - 1) % n;
  }
  /// Nodes of the placement (1 without one).
  int nodes() const { return std::max(1, nodes_.load(std::memory_order_relaxed)); }

  /// Workers started so far.
  int workers() const;

  /// The plugin's team, made on first use and never destroyed (its workers may still be asleep
  /// in it while the process exits). A team that is destroyed stops and joins its workers.
  static ThreadTeam& process();

 private:
  friend class TeamMember;
  struct alignas(64) Worker {
    std::atomic<uint32_t> epoch{0};  // bumped by run() to start this worker on the current job
    std::atomic<int> sleepers{0};
    std::thread thread;
  };
  void work(Worker* me, int index);
  void barrier_wait();
  void after_fork_in_child();
  void pin(std::thread& t, int index);

  std::mutex mu_;  // one job at a time; held by the pthread_atfork prepare handler across a fork
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<int> started_{0};
  // The current job, written under mu_ before the workers' epochs are bumped (release).
  Job job_ = nullptr;
  void* ctx_ = nullptr;
  int size_ = 1;
  alignas(64) std::atomic<uint32_t> pending_{0};  // workers of the job not yet done
  std::atomic<int> caller_sleepers_{0};
  alignas(64) std::atomic<uint32_t> arrived_{0};  // members at the barrier
  std::atomic<uint32_t> phase_{0};                // barrier generation (a futex word)
  std::atomic<int> barrier_sleepers_{0};
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::atomic<bool> stop_{false};  // set by the destructor
  std::mutex placement_mu_;
  std::vector<std::vector<int>> placement_;
  std::atomic<int> nodes_{0};

  static void fork_prepare();
  static void fork_parent();
  static void fork_child();
};

}  // namespace nibble::cpu
