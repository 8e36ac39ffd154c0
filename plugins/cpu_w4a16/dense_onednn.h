// Dense matmul through oneDNN: the plugin's dense baseline (bf16 / f32 weights) for benchmarks.
#pragma once

#include <cstdint>
#include <memory>

namespace nibble::cpu {

class DenseMatmul {
 public:
  /// weight_kn: host [K, N] of `dtype` (NIBBLE_DTYPE_BF16 or NIBBLE_DTYPE_F32), copied.
  DenseMatmul(int64_t k, int64_t n, int32_t dtype, const void* weight_kn);
  ~DenseMatmul();
  /// y[M, N] = x[M, K] * W, both of the same dtype. Thread-safe.
  void run(const void* x, void* y, int64_t m) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nibble::cpu
