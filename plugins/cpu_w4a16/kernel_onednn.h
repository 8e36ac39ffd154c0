// The compute-bound path for large M: dequantize K x 64 panels of the weights and multiply them
// with oneDNN: bf16 brgemm for bf16 activations on CPUs with AVX-512 BF16, f32 brgemm otherwise.
// Only bf16 activations may go through bf16: rounding fp16 x (11 significant bits) or f32 x to
// bf16 (8) is outside their tolerance (found by the conformance suite on a Sapphire Rapids host).
#pragma once

#include <cstdint>
#include <memory>

#include "cpu_weights.h"

namespace nibble::cpu {

class OnednnPath {
 public:
  /// `bf16_act`: the activations are bf16 (so the bf16 brgemm is exact enough, where the CPU has it).
  OnednnPath(const CpuWeights& w, bool bf16_act);
  /// Whether this path multiplies in bf16 (else f32).
  bool bf16() const;
  /// Whether a path for activations that are bf16 (`bf16_act`) or not multiplies in bf16 on this CPU.
  static bool multiplies_bf16(bool bf16_act);
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
