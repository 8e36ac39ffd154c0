// A small reproducible random generator (splitmix64): the same seed gives the same numbers on every
// platform and standard library, which std::uniform_*_distribution does not promise.
#pragma once

#include <cstdint>

namespace nibble::detail {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed ^ 0x9e3779b97f4a7c15ull) {}
  uint64_t next() noexcept {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, n).
  uint64_t below(uint64_t n) noexcept { return next() % n; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept {
    return lo + (hi - lo) * double(next() >> 11) * (1.0 / 9007199254740992.0);
  }

 private:
  uint64_t s_;
};

}  // namespace nibble::detail
