// Concurrency stress test: many threads selecting, preparing and applying on one registry, and on
// weights prepared once and shared, for a bounded time (NIBBLE_STRESS_SECONDS, default 3). Every
// result must equal, bit for bit, what one thread computed before the threads started.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "test_util.h"

#ifdef _OPENMP
#include <omp.h>
#endif

using namespace nibble;

std::string nibble::test::skip_reason() {
  if (test::env_or("NIBBLE_TEST_PLUGIN_DIRS").empty()) return "NIBBLE_TEST_PLUGIN_DIRS is not set";
  return {};
}

namespace {
struct Case {
  CanonicalLinear w;
  Tensor x;
  std::shared_ptr<Backend> backend;
  std::shared_ptr<PreparedLinear> shared;
  Tensor expect;
};

// Two layers per available backend, prepared once, and what one thread computes for them.
std::vector<Case> make_cases(Registry& reg) {
  std::vector<Case> cases;
  int idx = 0;
  for (const auto& b : reg.backends()) {
    if (!b->probe().available) continue;
    for (auto [wt, g, ao] : {std::tuple{WeightType::uint4b8, 128, false}, std::tuple{WeightType::uint4, 64, true}}) {
      LinearSpec s;
      s.name = fmt::format("stress.{}.{}", b->name(), idx++);
      s.k = 256; s.n = 96; s.group_size = g; s.weight_type = wt; s.act_order = ao;
      s.act_dtype = DType::f16; s.scale_dtype = DType::f16;
      if (!b->check_capabilities(s).empty() || !b->can_implement(s).empty()) continue;
      Case c{random_canonical(s, uint64_t(idx)), random_activations(5, s.k, DType::f16, uint64_t(idx) + 50), b, nullptr, {}};
      try {
        c.shared = b->prepare(c.w);  // the fault plugins fail here: not part of this test
        c.expect = c.shared->apply(c.x);
      } catch (const Error&) {
        continue;
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}
}  // namespace

TEST_CASE("threads sharing a registry and prepared weights agree with one thread") {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  const double seconds = std::stod(test::env_or("NIBBLE_STRESS_SECONDS", "3"));
  std::vector<Case> cases = make_cases(*reg);
  REQUIRE(!cases.empty());
  std::atomic<int64_t> runs{0}, mismatches{0}, errors{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = t; std::chrono::steady_clock::now() < deadline; ++i) {
        Case& c = cases[std::size_t(i) % cases.size()];
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

// A host that calls apply from inside its own OpenMP parallel region: the plugin's region inside
// it gets a team of one thread (nested regions are off), fewer than the threads it asks for
// (NIBBLE_NUM_THREADS=4 here), and that thread must still compute every tile, bit for bit as the
// call from outside did.
TEST_CASE("apply inside a host's OpenMP region, with a team smaller than asked, agrees with a call outside") {
#ifndef _OPENMP
  FAIL("test_stress is built without OpenMP: the host's region cannot be made");
#else
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  std::vector<Case> cases = make_cases(*reg);
  REQUIRE(!cases.empty());
  const std::string saved = test::env_or("NIBBLE_NUM_THREADS");
  setenv("NIBBLE_NUM_THREADS", "4", 1);
  omp_set_max_active_levels(1);
  std::atomic<int64_t> calls{0}, mismatches{0}, errors{0};
#pragma omp parallel num_threads(2)
  for (std::size_t i = std::size_t(omp_get_thread_num()); i < 4 * cases.size(); i += std::size_t(omp_get_num_threads())) {
    const Case& c = cases[i % cases.size()];
    try {
      Tensor y = c.shared->apply(c.x);
      if (std::memcmp(y.data(), c.expect.data(), y.nbytes()) != 0) ++mismatches;
      ++calls;
    } catch (const Error&) {
      ++errors;
    }
  }
  if (saved.empty()) unsetenv("NIBBLE_NUM_THREADS");
  else setenv("NIBBLE_NUM_THREADS", saved.c_str(), 1);
  CHECK(calls == int64_t(4 * cases.size()));
  CHECK(mismatches == 0);
  CHECK(errors == 0);
#endif
}
