// Dense matmul through oneDNN: the plugin's dense baseline (bf16 / f32 weights) for benchmarks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace nibble::cpu {

/// Empty where oneDNN can build a [M, K] x [K, N] matmul of `dtype` on this CPU, else why not (oneDNN
/// 2.6 runs bf16 only on CPUs with AVX-512; an AVX2 CPU has f32 only). Creates no threads.
std::string dense_unsupported(int64_t k, int64_t n, int32_t dtype);

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
