#include "thread_team.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace nibble::cpu {

namespace {

uint32_t* futex_word(std::atomic<uint32_t>& a) { return reinterpret_cast<uint32_t*>(&a); }
void futex_wait(std::atomic<uint32_t>& a, uint32_t old) {
  syscall(SYS_futex, futex_word(a), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& a) {
  syscall(SYS_futex, futex_word(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Waits until `word` is no longer `old`: spins for `spin_nanos`, then sleeps on the futex. After
// the first ThreadTeam::kYieldAfterNanos of the spin it yields the core on every round: where the
// machine has more runnable threads than cores (other processes, a host's own threads, a team
// larger than the CPUs), the member it waits for may be the one that needs this core. The waker
// stores the new value and then wakes if `sleepers` is non-zero; both sides use sequentially
// consistent operations, so either the waker sees the sleeper or the sleeper sees the new value
// before it sleeps (and FUTEX_WAIT itself returns at once if the word has changed).
void wait_for_change(std::atomic<uint32_t>& word, uint32_t old, std::atomic<int>& sleepers,
                     int64_t spin_nanos) {
  if (word.load(std::memory_order_acquire) != old) return;
  const auto start = std::chrono::steady_clock::now();
  bool yielding = false;
  for (int i = 1;; ++i) {
    if (yielding)
      sched_yield();
    else
      cpu_relax();
    if (word.load(std::memory_order_acquire) != old) return;
    if (yielding || i % 64 == 0) {
      const auto spun = std::chrono::steady_clock::now() - start;
      if (spun > std::chrono::nanoseconds(spin_nanos)) break;
      yielding = spun > std::chrono::nanoseconds(ThreadTeam::kYieldAfterNanos);
    }
  }
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  while (word.load(std::memory_order_seq_cst) == old) futex_wait(word, old);
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void wake_if_asleep(std::atomic<uint32_t>& word, std::atomic<int>& sleepers) {
  if (sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(word);
}

void publish(std::atomic<uint32_t>& word, uint32_t value, std::atomic<int>& sleepers) {
  word.store(value, std::memory_order_seq_cst);
  wake_if_asleep(word, sleepers);
}

int affinity_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadTeam* g_process_team = nullptr;

}  // namespace

void TeamMember::barrier() const {
  if (dynamic_) throw std::logic_error("TeamMember::barrier in a dynamic job (ThreadTeam::run_dynamic)");
  if (size_ > 1) team_->barrier_wait();
}

void TeamCount::add(uint32_t n) {
  value_.fetch_add(n, std::memory_order_seq_cst);
  wake_if_asleep(value_, sleepers_);
}

int64_t TeamMember::spin_nanos() const {
  return team_ ? team_->spin_nanos_.load(std::memory_order_relaxed) : ThreadTeam::kSpinNanos;
}

void TeamCount::wait_until(uint32_t target, const TeamMember& me) const {
  for (uint32_t v; (v = value_.load(std::memory_order_acquire)) < target;)
    wait_for_change(value_, v, sleepers_, me.spin_nanos());
}

ThreadTeam::ThreadTeam() : cpus_(affinity_cpus()) {}

// Stops and joins the workers (a team of a test; the process team is never destroyed).
ThreadTeam::~ThreadTeam() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_.store(true, std::memory_order_seq_cst);
  for (auto& w : workers_) publish(w->epoch, w->epoch.load(std::memory_order_relaxed) + 1, w->sleepers);
  for (auto& w : workers_) w->thread.join();
}

void ThreadTeam::barrier_wait() {
  // The phase is read before arriving: the last member to arrive moves it on, and a member that
  // read it after its own arrival could already see the next phase and wait for one more.
  const uint32_t phase = phase_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(size_)) {
    arrived_.store(0, std::memory_order_relaxed);
    publish(phase_, phase + 1, barrier_sleepers_);
    return;
  }
  wait_for_change(phase_, phase, barrier_sleepers_, spin_nanos_.load(std::memory_order_relaxed));
}

// Called with placement_mu_ held.
void ThreadTeam::pin(std::thread& t, int index) {
  if (placement_.empty() || index < 1) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : placement_[size_t(index - 1) % placement_.size()])
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  // Advice: where the host's own affinity forbids these CPUs the worker stays where it was.
  pthread_setaffinity_np(t.native_handle(), sizeof set, &set);
}

void ThreadTeam::set_placement(std::vector<std::vector<int>> placement) {
  std::lock_guard<std::mutex> lock(mu_);  // no job runs while the workers move
  std::lock_guard<std::mutex> plock(placement_mu_);
  placement_ = std::move(placement);
  nodes_.store(int(placement_.size()), std::memory_order_relaxed);
  for (size_t i = 0; i < workers_.size(); ++i) pin(workers_[i]->thread, int(i) + 1);
}

int ThreadTeam::workers() const { return started_.load(std::memory_order_acquire); }

void ThreadTeam::run_as(int index, bool dynamic) {
  try {
    job_(ctx_, TeamMember(this, index, size_, dynamic));
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadTeam::work(Worker* me, int index) {
  uint32_t seen = 0;
  uint64_t last = 0;
  for (;;) {
    wait_for_change(me->epoch, seen, me->sleepers, spin_nanos_.load(std::memory_order_relaxed));
    seen = me->epoch.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    // The invitation is written before the epoch moves, so a worker can see it one wake early,
    // and then again: each is taken once.
    const uint64_t invite = me->invite.load(std::memory_order_acquire);
    if (invite == last) continue;
    last = invite;
    if (!(invite & 1)) {
      run_as(index, false);
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1) wake_if_asleep(pending_, caller_sleepers_);
      continue;
    }
    // A dynamic job: join first, then look whether it is still open (both sequentially consistent,
    // against the caller's closing store and its read of joined_: either the caller waits for
    // this worker or this worker sees it closed). Only a worker that joined reads the job.
    const uint64_t number = invite >> 1;
    joined_.fetch_add(1, std::memory_order_seq_cst);
    if (open_job_.load(std::memory_order_seq_cst) == number) run_as(index, true);
    if (joined_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        open_job_.load(std::memory_order_seq_cst) != number) {
      left_.fetch_add(1, std::memory_order_seq_cst);
      wake_if_asleep(left_, left_sleepers_);
    }
  }
}

int ThreadTeam::start(int threads, Job job, void* ctx, bool dynamic) {
  std::lock_guard<std::mutex> lock(mu_);
  threads = std::max(1, threads);
  while (int(workers_.size()) < threads - 1) {
    auto w = std::make_unique<Worker>();
    Worker* raw = w.get();
    const int index = int(workers_.size()) + 1;
    try {
      w->thread = std::thread([this, raw, index] { work(raw, index); });
    } catch (const std::system_error&) {
      break;  // the system refuses more threads: run on the members there are
    }
    {
      std::lock_guard<std::mutex> plock(placement_mu_);
      pin(w->thread, index);
    }
    workers_.push_back(std::move(w));
    started_.store(int(workers_.size()), std::memory_order_release);
  }
  const int size = std::min(threads, int(workers_.size()) + 1);
  const int64_t spin = size > cpus_ ? kThrottledSpinNanos : kSpinNanos;
  spin_nanos_.store(spin, std::memory_order_relaxed);
  job_ = job;
  ctx_ = ctx;
  size_ = size;
  error_ = nullptr;
  const uint64_t number = ++jobs_;
  if (dynamic)
    open_job_.store(number, std::memory_order_seq_cst);
  else
    pending_.store(uint32_t(size - 1), std::memory_order_relaxed);
  // Every worker's epoch first, so that the spinning ones start at once, then a system call for
  // each one asleep.
  for (int i = 1; i < size; ++i) {
    Worker& w = *workers_[size_t(i - 1)];
    w.invite.store(number << 1 | uint64_t(dynamic), std::memory_order_release);
    w.epoch.store(w.epoch.load(std::memory_order_relaxed) + 1, std::memory_order_seq_cst);
  }
  for (int i = 1; i < size; ++i)
    wake_if_asleep(workers_[size_t(i - 1)]->epoch, workers_[size_t(i - 1)]->sleepers);
  std::exception_ptr mine;
  try {
    job(ctx, TeamMember(this, 0, size, dynamic));
  } catch (...) {
    mine = std::current_exception();
  }
  if (dynamic) {
    open_job_.store(0, std::memory_order_seq_cst);  // closed: a worker that has not joined skips it
    for (;;) {
      const uint32_t l = left_.load(std::memory_order_seq_cst);
      if (joined_.load(std::memory_order_seq_cst) == 0) break;
      wait_for_change(left_, l, left_sleepers_, spin);
    }
  } else {
    for (uint32_t left; (left = pending_.load(std::memory_order_acquire)) != 0;)
      wait_for_change(pending_, left, caller_sleepers_, spin);
  }
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
  return size;
}

// Fork: the prepare handler takes the job mutex, so no job is half done when the address space
// is copied; the child has none of the workers (only the forking thread survives a fork), so it
// forgets them and starts new ones on its first job.
void ThreadTeam::fork_prepare() {
  if (!g_process_team) return;
  g_process_team->mu_.lock();
  g_process_team->placement_mu_.lock();
}
void ThreadTeam::fork_parent() {
  if (!g_process_team) return;
  g_process_team->placement_mu_.unlock();
  g_process_team->mu_.unlock();
}
void ThreadTeam::fork_child() {
  if (!g_process_team) return;
  g_process_team->after_fork_in_child();
  g_process_team->placement_mu_.unlock();
  g_process_team->mu_.unlock();
}

void ThreadTeam::after_fork_in_child() {
  // The workers' threads do not exist here: their std::thread objects must be neither joined nor
  // destroyed (a joinable one terminates the process), so the Worker objects are let go of as they
  // are, a few hundred bytes each.
  for (auto& w : workers_) (void)w.release();
  workers_.clear();
  started_.store(0, std::memory_order_relaxed);
  pending_.store(0, std::memory_order_relaxed);
  caller_sleepers_.store(0, std::memory_order_relaxed);
  open_job_.store(0, std::memory_order_relaxed);
  joined_.store(0, std::memory_order_relaxed);
  left_sleepers_.store(0, std::memory_order_relaxed);
  arrived_.store(0, std::memory_order_relaxed);
  barrier_sleepers_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
}

ThreadTeam& ThreadTeam::process() {
  static ThreadTeam* team = [] {
    g_process_team = new ThreadTeam;
    pthread_atfork(&ThreadTeam::fork_prepare, &ThreadTeam::fork_parent, &ThreadTeam::fork_child);
    return g_process_team;
  }();
  return *team;
}

}  // namespace nibble::cpu
