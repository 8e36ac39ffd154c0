// A shared object that is not a nibble plugin and must never be loaded: its static initializer
// aborts the process, so a registry that dlopens it fails every test that scans this directory.
#include <cstdio>
#include <cstdlib>

namespace {
struct Bomb {
  Bomb() {
    std::fprintf(stderr, "not_a_plugin.so was loaded: the registry must check the entry alias first\n");
    std::abort();
  }
} bomb;
}  // namespace

extern "C" __attribute__((visibility("default"))) int some_unrelated_function() { return 42; }
