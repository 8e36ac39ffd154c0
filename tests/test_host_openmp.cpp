// A host that calls apply from inside its own OpenMP parallel region (nested regions off): the
// calls must compute every tile, bit for bit as the same call from outside did (both with
// NIBBLE_NUM_THREADS=4: for small layers the thread count decides how K is split). The CPU plugin
// runs them on its own thread team, which the host's OpenMP team does not shrink, and the two
// host threads' calls take turns on it; a plugin whose kernels ran in an OpenMP region would get a
// team of one thread there. (Not run under ThreadSanitizer: libgomp's barriers are not
// instrumented, so it reports their synchronization as races.)
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

TEST_CASE("apply inside a host's OpenMP region agrees with a call outside") {
  const std::string saved = test::env_or("NIBBLE_NUM_THREADS");
  setenv("NIBBLE_NUM_THREADS", "4", 1);
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  std::vector<test::SharedCase> cases = test::shared_cases(*reg);
  REQUIRE(!cases.empty());
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
