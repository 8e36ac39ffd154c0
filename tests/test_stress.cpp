// Concurrency stress test: many threads selecting, preparing and applying on one registry, and on
// weights prepared once and shared, for a bounded time (NIBBLE_STRESS_SECONDS, default 3). Every
// result must equal, bit for bit, what one thread computed before the threads started.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "test_util.h"

using namespace nibble;

std::string nibble::test::skip_reason() {
  if (test::env_or("NIBBLE_TEST_PLUGIN_DIRS").empty()) return "NIBBLE_TEST_PLUGIN_DIRS is not set";
  return {};
}

TEST_CASE("threads sharing a registry and prepared weights agree with one thread") {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  const double seconds = std::stod(test::env_or("NIBBLE_STRESS_SECONDS", "3"));
  std::vector<test::SharedCase> cases = test::shared_cases(*reg);
  REQUIRE(!cases.empty());
  std::atomic<int64_t> runs{0}, mismatches{0}, errors{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; std::chrono::steady_clock::now() < deadline; ++i) {
        test::SharedCase& c = cases[std::size_t(i) % cases.size()];
        try {
          Policy pin;
          pin.pin_strict(c.backend->name());
          auto chosen = reg->select_or_throw(c.w.spec, pin);
          auto own = chosen->prepare(c.w);
          for (const PreparedLinear* p : {own.get(), c.shared.get()}) {
            Tensor y = p->apply(c.x);
            if (std::memcmp(y.data(), c.expect.data(), y.nbytes()) != 0) ++mismatches;
          }
          ++runs;
        } catch (const Error&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  fmt::print("stress: {} cases on {} backend(s), {} iterations in {:.1f} s\n", cases.size(), reg->backends().size(), runs.load(), seconds);
  CHECK(runs > 0);
  CHECK(mismatches == 0);
  CHECK(errors == 0);
}
