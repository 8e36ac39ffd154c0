// Matmul kernels of the cpu_w4a16 plugin.
#pragma once

#include <cstdint>

#include "cpu_weights.h"

namespace nibble::cpu {

/// Number of threads the kernels use (NIBBLE_NUM_THREADS, else the OpenMP default); settable
/// through the plugin option "num_threads".
int num_threads();
void set_num_threads(int n);

/// y[M, N] (f32) = x[M, K] (f32, rows already in the weights' permuted order) * W. Portable C++:
/// dequantizes (q - z) exactly in fp32, accumulates each group in fp32 and applies the group's
/// scale once. Bias is not added here.
void matmul_portable(const CpuWeights& w, const float* x, int64_t m, float* y);

}  // namespace nibble::cpu
