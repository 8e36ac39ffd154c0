// Helpers shared by the tests: hermetic plugin discovery and the skip hook.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "nibble/nibble.h"

namespace nibble::test {

/// Set by a test binary that must skip (e.g. the backend under test has no device). Defined once
/// per binary; the default says "run".
std::string skip_reason();

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

}  // namespace nibble::test
