// The cpu_w4a16 plugin's own team of threads: the threads that run apply's work, kept between calls
// (spinning for a while, then asleep on a futex) so that a call costs a few microseconds to start and
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
/// members the job was given, and the team's barrier.
class TeamMember {
 public:
  TeamMember(ThreadTeam* team, int index, int size, bool dynamic = false)
      : team_(team), index_(index), size_(size), dynamic_(dynamic) {}
  int index() const { return index_; }
  int size() const { return size_; }
  /// Returns once every member of the job has called it (as many times as this one). Only in jobs
  /// that every member runs (ThreadTeam::run): in a dynamic job it throws std::logic_error.
  void barrier() const;
  /// Members [0, size) split `n` items statically: this member's first item and one past its last.
  /// Only for jobs that every member runs.
  int64_t share_begin(int64_t n) const { return n * index_ / size_; }
  int64_t share_end(int64_t n) const { return n * (index_ + 1) / size_; }

 private:
  friend class TeamCount;
  int64_t spin_nanos() const;
  ThreadTeam* team_;
  int index_, size_;
  bool dynamic_;
};

/// A count that the members of a dynamic job add to and wait on: the end of a phase of work handed
/// out at run time (the gather of x, a call's K slices), where a barrier would wait for members
/// that may never come. A phase counts the units it hands out, failed ones too, so that a count
/// reaches its target whenever every unit taken has been given up on or done. Waiting spins as
/// the team's waiters do (ThreadTeam::kSpinNanos), then sleeps on a futex.
class alignas(64) TeamCount {
 public:
  void add(uint32_t n);
  /// Returns once the count has reached `target`; what the adders wrote before is visible then.
  void wait_until(uint32_t target, const TeamMember& me) const;
  uint32_t value() const { return value_.load(std::memory_order_acquire); }

 private:
  mutable std::atomic<uint32_t> value_{0};  // a futex word, which the waiters' calls take as mutable
  mutable std::atomic<int> sleepers_{0};
};

/// A team of worker threads that run jobs together with the thread that calls run().
///
/// Concurrent calls queue: one job runs at a time, on the whole team, and the others wait for it
/// (a mutex). The team is sized to the cores; two jobs at once would share them anyway, and a
/// memory-bound job gains nothing from sharing the memory with another, so a call that waits
/// loses about what it would lose running beside the other.
///
/// Workers that have nothing to do spin for kSpinNanos (a host's decode loop calls layer after
/// layer with little in between; on a virtual machine a sleeping worker can take hundreds of
/// microseconds to run again), then sleep on a futex until the next job; where a job has more
/// members than the process has CPUs they spin only kThrottledSpinNanos. A fork of the host
/// process is safe (pthread_atfork): the fork waits for a running job to end, and the child starts
/// a team of its own on its first job.
class ThreadTeam {
 public:
  using Job = void (*)(void* ctx, const TeamMember& me);
  /// How long an idle worker, a member waiting at the barrier or on a TeamCount, or the caller
  /// waiting for the others spins before it sleeps; every waiter yields the core after the first
  /// kYieldAfterNanos of it.
  static constexpr int64_t kSpinNanos = 2'000'000;
  static constexpr int64_t kThrottledSpinNanos = 50'000;
  static constexpr int64_t kYieldAfterNanos = 20'000;

  ThreadTeam();
  ~ThreadTeam();  ///< not while a job runs
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  /// Runs job(ctx, member) on `threads` members at once, the calling thread as member 0, and
  /// returns when all of them have returned; the first exception a member threw is rethrown here
  /// (after every member is done). Where the system refuses to start as many threads, the job runs
  /// on fewer members (TeamMember::size says how many); returns that size.
  int run(int threads, Job job, void* ctx) { return start(threads, job, ctx, false); }
  template <class F>
  int run(int threads, F& f) {
    return run(threads, &call<F>, &f);
  }

  /// A dynamic job: as run(), but its members take their work at run time from shared state (no
  /// barrier, no static shares), so that any subset of them gets it all done. The caller runs it
  /// first; a worker that starts only after the caller's job(ctx, member 0) has returned skips it,
  /// so a worker the OS runs late never holds up the call (the caller still waits for the workers
  /// that started). Returns the number of members it was given.
  int run_dynamic(int threads, Job job, void* ctx) { return start(threads, job, ctx, true); }
  template <class F>
  int run_dynamic(int threads, F& f) {
    return run_dynamic(threads, &call<F>, &f);
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
  template <class F>
  static void call(void* c, const TeamMember& me) {
    (*static_cast<F*>(c))(me);
  }
  struct alignas(64) Worker {
    std::atomic<uint32_t> epoch{0};  // bumped by run() to start this worker (a futex word)
    std::atomic<int> sleepers{0};
    // The job it is asked to: (job number << 1) | dynamic, written before the epoch is bumped.
    std::atomic<uint64_t> invite{0};
    std::thread thread;
  };
  int start(int threads, Job job, void* ctx, bool dynamic);
  void work(Worker* me, int index);
  void run_as(int index, bool dynamic);
  void barrier_wait();
  void after_fork_in_child();
  void pin(std::thread& t, int index);

  std::mutex mu_;  // one job at a time; held by the pthread_atfork prepare handler across a fork
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<int> started_{0};
  int cpus_ = 1;  // CPUs of the process's affinity mask when the team was made
  std::atomic<int64_t> spin_nanos_{kSpinNanos};
  uint64_t jobs_ = 0;  // jobs started (under mu_)
  // The current job, written under mu_ before the workers' epochs are bumped (release). A worker
  // of a dynamic job reads them only once it has joined (below).
  Job job_ = nullptr;
  void* ctx_ = nullptr;
  int size_ = 1;
  alignas(64) std::atomic<uint32_t> pending_{0};  // workers of a job run() started, not yet done
  std::atomic<int> caller_sleepers_{0};
  // A dynamic job: the number of the job workers may join now (0: none), and the workers that
  // joined one and are not done; `left_` moves on when the last of them leaves after the caller
  // closed the job (a futex word).
  alignas(64) std::atomic<uint64_t> open_job_{0};
  std::atomic<uint32_t> joined_{0};
  std::atomic<uint32_t> left_{0};
  std::atomic<int> left_sleepers_{0};
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
