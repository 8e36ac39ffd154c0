// Tests of cpu_w4a16's thread team (thread_team.h), plain C++ on any CPU, and the one part of the
// plugin's threading that ThreadSanitizer can check (scripts/sanitizers): every member runs, the
// barrier orders what members write, concurrent callers queue, an exception comes back to the
// caller, idle workers that went to sleep wake up, and a forked child runs jobs of its own.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "test_util.h"
#include "thread_team.h"

using nibble::cpu::TeamMember;
using nibble::cpu::ThreadTeam;

std::string nibble::test::skip_reason() { return {}; }

namespace {

// Every member writes its index, then, after the barrier, reads what all the others wrote: the
// barrier must make the writes visible (ThreadSanitizer reports a race if it does not).
int64_t barrier_round(ThreadTeam& team, int threads) {
  std::vector<int64_t> slot(size_t(threads), -1), seen(size_t(threads), 0);
  int ran = 0;
  auto job = [&](const TeamMember& me) {
    if (me.index() == 0) ran = me.size();
    slot[size_t(me.index())] = me.index() + 1;
    me.barrier();
    int64_t sum = 0;
    for (int i = 0; i < me.size(); ++i) sum += slot[size_t(i)];
    seen[size_t(me.index())] = sum;
    me.barrier();
    slot[size_t(me.index())] = 0;  // written again after everyone has read
  };
  CHECK(team.run(threads, job) == threads);
  CHECK(ran == threads);
  const int64_t want = int64_t(threads) * (threads + 1) / 2;
  for (int i = 0; i < threads; ++i) CHECK(seen[size_t(i)] == want);
  return want;
}

}  // namespace

TEST_CASE("every member runs, and the barrier orders their writes") {
  ThreadTeam team;
  for (int threads : {1, 2, 3, 5, 8, 4, 1}) barrier_round(team, threads);
  CHECK(team.workers() == 7);  // grown to the largest job, never shrunk
}

TEST_CASE("static shares cover every item exactly once") {
  for (int size = 1; size <= 9; ++size)
    for (int64_t n : {0, 1, 7, 64, 1001}) {
      std::vector<int> hits(size_t(n), 0);
      for (int i = 0; i < size; ++i) {
        const TeamMember me(nullptr, i, size);
        for (int64_t u = me.share_begin(n); u < me.share_end(n); ++u) ++hits[size_t(u)];
      }
      for (int h : hits) CHECK(h == 1);
    }
}

TEST_CASE("workers that went to sleep wake for the next job") {
  ThreadTeam team;
  barrier_round(team, 4);
  // Longer than the spin: every worker is asleep on its futex now.
  std::this_thread::sleep_for(std::chrono::nanoseconds(ThreadTeam::kSpinNanos) * 20);
  barrier_round(team, 4);
  std::this_thread::sleep_for(std::chrono::nanoseconds(ThreadTeam::kSpinNanos) * 20);
  // Members wait at the barrier long enough to sleep there too.
  std::atomic<int> after{0};
  auto job = [&](const TeamMember& me) {
    if (me.index() == 1) std::this_thread::sleep_for(std::chrono::nanoseconds(ThreadTeam::kSpinNanos) * 10);
    me.barrier();
    after.fetch_add(1);
  };
  team.run(3, job);
  CHECK(after == 3);
}

TEST_CASE("concurrent callers queue: one job at a time, each on the whole team") {
  ThreadTeam team;
  std::atomic<int> in_job{0}, overlaps{0}, jobs{0}, bad_sizes{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < 200; ++i) {
        const int threads = 1 + (c + i) % 4;
        std::atomic<int> members{0};
        auto job = [&](const TeamMember& me) {
          if (me.index() == 0 && in_job.fetch_add(1) != 0) overlaps.fetch_add(1);
          members.fetch_add(1);
          me.barrier();
          if (me.index() == 0) in_job.fetch_sub(1);
        };
        if (team.run(threads, job) != threads || members != threads) bad_sizes.fetch_add(1);
        jobs.fetch_add(1);
      }
    });
  for (auto& t : callers) t.join();
  CHECK(jobs == 800);
  CHECK(overlaps == 0);
  CHECK(bad_sizes == 0);
}

TEST_CASE("an exception in a member comes back from run, and the team still works") {
  ThreadTeam team;
  auto job = [](const TeamMember& me) {
    if (me.index() == 2) throw std::runtime_error("member 2 failed");
  };
  CHECK_THROWS_WITH(team.run(4, job), "member 2 failed");
  barrier_round(team, 4);
}

TEST_CASE("placement: the caller on no node, workers round robin over the nodes") {
  ThreadTeam team;
  CHECK(team.nodes() == 1);
  CHECK(team.node_of(0) == 0);
  CHECK(team.node_of(5) == 0);
  const int cpus = int(std::thread::hardware_concurrency());
  std::vector<int> all;
  for (int c = 0; c < cpus; ++c) all.push_back(c);
  team.set_placement({all, all});  // two "nodes" of every CPU: pinning changes nothing here
  CHECK(team.nodes() == 2);
  CHECK(team.node_of(0) == -1);
  CHECK(team.node_of(1) == 0);
  CHECK(team.node_of(2) == 1);
  CHECK(team.node_of(3) == 0);
  barrier_round(team, 5);
  team.set_placement({});
  CHECK(team.node_of(0) == 0);
}

#if !defined(__SANITIZE_THREAD__)  // ThreadSanitizer stops a child that starts threads after a fork
TEST_CASE("a forked child runs jobs on a team of its own; the parent's team still works") {
  ThreadTeam& team = ThreadTeam::process();
  barrier_round(team, 4);
  // Another thread keeps the team busy while the main thread forks: the fork waits for the job.
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop) barrier_round(team, 3);
  });
  for (int round = 0; round < 5; ++round) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Only doctest-free code here: the child reports through its exit status.
      int failures = 0;
      for (int threads : {1, 4, 2}) {
        std::vector<int> slot(size_t(threads), 0);
        std::vector<int> seen(size_t(threads), 0);
        auto job = [&](const TeamMember& me) {
          slot[size_t(me.index())] = 1;
          me.barrier();
          for (int i = 0; i < me.size(); ++i) seen[size_t(me.index())] += slot[size_t(i)];
        };
        if (team.run(threads, job) != threads) ++failures;
        for (int s : seen) failures += s != threads;
      }
      _exit(failures == 0 ? 0 : 1);
    }
    int status = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    pid_t got = 0;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (got == 0) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    CHECK_MESSAGE(got == pid, "the child hung (killed after 30 s)");
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  stop = true;
  busy.join();
  barrier_round(team, 4);
}
#endif
