// A host that calls apply from inside its own OpenMP parallel region: the plugin's region inside
// it gets a team of one thread (nested regions are off), fewer than the threads it asks for
// (NIBBLE_NUM_THREADS=4 here), and that thread must still compute every tile, bit for bit as the
// call from outside did. (Not run under ThreadSanitizer: libgomp's barriers are not instrumented,
// so it reports their synchronization as races.)
#include <doctest/doctest.h>
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "test_util.h"

using namespace nibble;

std::string nibble::test::skip_reason() {
  if (test::env_or("NIBBLE_TEST_PLUGIN_DIRS").empty()) return "NIBBLE_TEST_PLUGIN_DIRS is not set";
  return {};
}

TEST_CASE("apply inside a host's OpenMP region, with a team smaller than asked, agrees with a call outside") {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  std::vector<test::SharedCase> cases = test::shared_cases(*reg);
  REQUIRE(!cases.empty());
  const std::string saved = test::env_or("NIBBLE_NUM_THREADS");
  setenv("NIBBLE_NUM_THREADS", "4", 1);
  omp_set_max_active_levels(1);
  std::atomic<int64_t> calls{0}, mismatches{0}, errors{0};
  const std::size_t total = 4 * cases.size();
#pragma omp parallel num_threads(2)
  for (std::size_t i = std::size_t(omp_get_thread_num()); i < total; i += std::size_t(omp_get_num_threads())) {
    const test::SharedCase& c = cases[i % cases.size()];
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
  CHECK(calls == int64_t(total));
  CHECK(mismatches == 0);
  CHECK(errors == 0);
}
