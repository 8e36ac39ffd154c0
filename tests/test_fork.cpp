// A host that forks after it has applied layers: the child must be able to apply them too (a
// plugin's worker threads do not survive a fork, and a lock held by one of them at the fork would
// hang the child), and give the same result, bit for bit; the parent goes on applying. Forks come
// while another thread of the parent applies, so that some land while a call is in flight.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "test_util.h"

using namespace nibble;

std::string nibble::test::skip_reason() {
  if (test::env_or("NIBBLE_TEST_PLUGIN_DIRS").empty()) return "NIBBLE_TEST_PLUGIN_DIRS is not set";
  return {};
}

namespace {

// Applies every case once; the number that differ from what they gave before the threads started.
int mismatches(std::vector<test::SharedCase>& cases) {
  int bad = 0;
  for (auto& c : cases) {
    try {
      Tensor y = c.shared->apply(c.x);
      bad += std::memcmp(y.data(), c.expect.data(), y.nbytes()) != 0;
    } catch (const Error&) {
      ++bad;
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("a forked child applies prepared layers, bit for bit as the parent did") {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  std::vector<test::SharedCase> cases = test::shared_cases(*reg);
  REQUIRE(!cases.empty());
  REQUIRE(mismatches(cases) == 0);
  std::atomic<bool> stop{false};
  std::atomic<int> busy_bad{0};
  std::thread busy([&] {
    while (!stop) busy_bad += mismatches(cases);
  });
  for (int round = 0; round < 8; ++round) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(mismatches(cases) == 0 && mismatches(cases) == 0 ? 0 : 1);  // no doctest in the child
    int status = -1;
    pid_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (got == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
    }
    CHECK_MESSAGE(got == pid, "the child hung (killed after 60 s)");
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0),
                  "the child's results differ, or it failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(round % 3));
  }
  stop = true;
  busy.join();
  CHECK(busy_bad == 0);
  CHECK(mismatches(cases) == 0);
}
