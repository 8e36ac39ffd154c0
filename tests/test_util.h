// Helpers shared by the tests: hermetic plugin discovery, the skip hook, layers for the
// concurrency tests.
#pragma once

#include <fmt/format.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "nibble/nibble.h"

namespace nibble::test {

/// Set by a test binary that must skip (e.g. the backend under test has no device). Defined once
/// per binary; the default says "run".
std::string skip_reason();

inline bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

/// The message of the nibble::Error that f() throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

/// A fresh directory under the system's temporary directory, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() / fmt::format("nibble_test_{}_{}", ::getpid(), counter++);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::string env_or(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string(fallback);
}

/// Registry over exactly the directories in the colon-separated env variable `var` (no install
/// dir, no NIBBLE_PLUGIN_PATH): tests never load plugins from the system.
inline std::shared_ptr<Registry> hermetic_registry(const std::string& dirs) {
  DiscoveryOptions o;
  o.use_default_dirs = false;
  o.use_env = false;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    std::size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    if (end > start) o.dirs.emplace_back(dirs.substr(start, end - start));
    start = end + 1;
  }
  return Registry::discover(o);
}

/// A layer prepared once by one backend, with activations and what one call from one thread
/// computed for them: the concurrency tests compare other calls against `expect`, bit for bit.
struct SharedCase {
  CanonicalLinear w;
  Tensor x;
  std::shared_ptr<Backend> backend;
  std::shared_ptr<PreparedLinear> shared;
  Tensor expect;
};

/// Two layers per available backend of `reg` (uint4b8 G = 128; uint4 G = 64 with act order),
/// K = 256, N = 96, 5 rows of fp16 activations; a backend whose prepare or apply fails is left
/// out (the fault plugins: not what these tests are about).
inline std::vector<SharedCase> shared_cases(Registry& reg) {
  std::vector<SharedCase> cases;
  int idx = 0;
  for (const auto& b : reg.backends()) {
    if (!b->probe().available) continue;
    for (auto [wt, g, ao] : {std::tuple{WeightType::uint4b8, 128, false}, std::tuple{WeightType::uint4, 64, true}}) {
      LinearSpec s;
      s.name = fmt::format("shared.{}.{}", b->name(), idx++);
      s.k = 256; s.n = 96; s.group_size = g; s.weight_type = wt; s.act_order = ao;
      s.act_dtype = DType::f16; s.scale_dtype = DType::f16;
      if (!b->check_capabilities(s).empty() || !b->can_implement(s).empty()) continue;
      SharedCase c{random_canonical(s, uint64_t(idx)), random_activations(5, s.k, DType::f16, uint64_t(idx) + 50), b, nullptr, {}};
      try {
        c.shared = b->prepare(c.w);
        c.expect = c.shared->apply(c.x);
      } catch (const Error&) {
        continue;
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

}  // namespace nibble::test
