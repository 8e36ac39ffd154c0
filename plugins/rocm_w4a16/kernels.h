// The launcher interface of rocm_w4a16's kernels (kernels.hip), in plain C++: plugin.cpp is
// compiled by the host compiler and sees no HIP or CUDA types here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rocm_layout.h"

namespace nibble::rocm {

/// A prepared layer in device memory: the arrays of rocm_layout.h, uploaded as they are.
struct DeviceWeights {
  LayoutDims d;
  const uint32_t* codes = nullptr;   ///< [quads][lines][4], 16-byte aligned
  const float* scales = nullptr;     ///< [quads][groups][4], 16-byte aligned
  const uint16_t* zeros = nullptr;   ///< [quads][groups]
  const int32_t* row_src = nullptr;  ///< [k_pad], 16-byte aligned, or null (identity rows)
  const float* bias = nullptr;       ///< [quads * 4] or null
};

/// One matmul: y[m, n] = x[m, k] * W (+ bias), x and y row-major in the activation dtype.
struct MatmulArgs {
  const DeviceWeights* w = nullptr;
  const void* x = nullptr;  ///< [m, k] f16 or bf16, device memory
  void* y = nullptr;        ///< [m, n] same dtype, device memory
  int64_t m = 0;
  int32_t act_dtype = 0;    ///< NIBBLE_DTYPE_F16 or NIBBLE_DTYPE_BF16
};

/// Which kernel runs for `m` rows: the GEMV kernel with `gemv_rows` rows per launch, or (0) the
/// tiled kernel. Pure; the host uses it for describe_kernel.
int gemv_rows_for(int64_t m);
/// From this M on the tiled kernel runs.
inline constexpr int64_t kTiledMinM = 17;

/// Enqueues the matmul on `stream` (a hipStream_t / cudaStream_t, null = default). NIBBLE_OK, or a
/// nibble_status with a message.
int32_t run_matmul(const MatmulArgs& a, void* stream, char* msg, std::size_t cap);

/// Whether the kernels have code for the current device (a build for gfx90a has none for gfx942):
/// NIBBLE_OK, or NIBBLE_ERR_NO_DEVICE with the runtime's reason.
int32_t kernels_available(char* msg, std::size_t cap);

}  // namespace nibble::rocm
