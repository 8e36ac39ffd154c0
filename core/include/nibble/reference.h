// The reference kernel: the definition of the right answer that every backend is tested against.
// Scalar, accumulates in double, no layout tricks.
#pragma once

#include "nibble/canonical.h"
#include "nibble/tensor.h"

namespace nibble {

/// y[m, n] = sum_k x[m, k] * w[k, n] (+ bias[n]) accumulated in double; x is [M, K] of any float
/// dtype; the result is f64 [M, N] (round it to the activation dtype yourself if needed).
Tensor reference_linear(const CanonicalLinear& w, const Tensor& x);

/// sum_k |x[m, k] * w[k, n]| (+ |bias[n]|) as f64 [M, N]: the scale against which rounding errors
/// of an implementation are judged.
Tensor reference_magnitude(const CanonicalLinear& w, const Tensor& x);

/// Outcome of comparing a backend's y against the reference.
struct Comparison {
  bool ok = true;
  double max_abs_err = 0;     ///< max |y - ref|
  double max_rel_to_tol = 0;  ///< max |y - ref| / tolerance (<= 1 passes)
  int64_t worst_m = 0, worst_n = 0;
  double worst_got = 0, worst_want = 0;
  int64_t failures = 0;
};

/// Tolerance rule, per element: |y - ref| <= eps_out * |ref| + eps_acc * mag + tiny, where eps_out is
/// the rounding of the output dtype (2^-11 f16, 2^-8 bf16, 2^-24 f32) and eps_acc covers products
/// rounded to 16 bits plus fp32 accumulation (2^-10 f16, 2^-8 bf16, 2^-20 f32). A wrong
/// code, zero or scale moves y by a whole quantization step times |x|, far beyond this.
Comparison compare_to_reference(const Tensor& y, const Tensor& ref, const Tensor& mag, DType act_dtype);

}  // namespace nibble
