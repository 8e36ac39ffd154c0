// The compute-bound path for large M: dequantize K x 64 panels of the weights and multiply them
// with oneDNN (bf16 brgemm on CPUs with AVX-512 BF16, f32 brgemm otherwise).
#pragma once

#include <cstdint>
#include <memory>

#include "cpu_weights.h"

namespace nibble::cpu {

class OnednnPath {
 public:
  explicit OnednnPath(const CpuWeights& w);
  ~OnednnPath();
  /// y f32 [m][y_stride()] = xp_rows f32 [m][lines * 8] (x gathered in the padded row order,
  /// plain row-major) times the weights. Uses num_threads() threads.
  void run(const float* xp_rows, int64_t m, float* y) const;
  /// Row stride of y: N rounded up to whole 64-column panels.
  int64_t y_stride() const;
  /// "onednn-f32" or "onednn-bf16".
  const char* name() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nibble::cpu
