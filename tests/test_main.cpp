// doctest's main for the test executables, with one addition: a test binary may ask to be
// reported as skipped (exit 77 under `meson test`) before any case runs, e.g. with no device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "test_util.h"

int main(int argc, char** argv) {
  if (auto why = nibble::test::skip_reason(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
