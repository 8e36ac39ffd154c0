// One small header of aliases so that rocm_w4a16's HIP source also compiles with nvcc (as ggml's
// vendors/hip.h does the other way round). The plugin and kernel sources spell everything the HIP
// way; with NIBBLE_HIP_ON_CUDA defined (the test-only rocm_w4a16_on_cuda build) each name used
// below maps onto its CUDA twin. Only names this plugin uses are listed: add one here when a
// source starts using it, never an #ifdef in the kernels for a mere spelling difference.
//
// Included by g++-compiled host code (plugin.cpp: the runtime API only) and by hipcc/nvcc-compiled
// kernel code (kernels.hip: runtime, fp16 intrinsics and the warp helpers below). A third mode,
// NIBBLE_GPU_EMULATION, runs the kernels on the CPU for a test (gpu_emulation.h).
#pragma once

#include <cstdint>

#if defined(NIBBLE_GPU_EMULATION)

#include "gpu_emulation.h"  // test_rocm_emulated: the kernels on the CPU

#elif defined(NIBBLE_HIP_ON_CUDA)

#include <cuda_runtime_api.h>
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// HIP's launch macro; HIP_KERNEL_NAME protects the commas of a template kernel's arguments.
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#endif

// ---- runtime API ----
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorMemoryAllocation cudaErrorMemoryAllocation
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipGetDevice cudaGetDevice
#define hipGetDeviceCount cudaGetDeviceCount
#define hipDeviceProp_t cudaDeviceProp
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipFuncAttributes cudaFuncAttributes
#define hipFuncGetAttributes cudaFuncGetAttributes
#define hipStream_t cudaStream_t
#define hipStreamSynchronize cudaStreamSynchronize
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipMemcpyKind cudaMemcpyKind
#define hipEvent_t cudaEvent_t
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime

/// What this build runs on, for messages ("no AMD GPU" / "no CUDA device").
#define NIBBLE_GPU_KIND "CUDA device"

#else  // HIP on AMD

#include <hip/hip_runtime_api.h>
#if defined(__HIPCC__)
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#endif

#define NIBBLE_GPU_KIND "AMD GPU"

#endif

#if defined(__CUDACC__) || defined(__HIPCC__)

namespace nibble::rocm {

// ---- warp (wavefront) size, a compile-time constant of each device compilation ----
// CDNA (gfx9: gfx908, gfx90a, gfx94x) runs wave64; RDNA (gfx10+) runs wave32 under HIP (hip_runtime.h
// refuses -mwavefrontsize64 there), and NVIDIA warps are 32 wide. Kernels take it from here and
// never assume a value; the host never needs it (launch shapes are in threads, not warps).
#if defined(NIBBLE_HIP_ON_CUDA)
inline constexpr int kWarpSize = 32;
#elif defined(__HIP_DEVICE_COMPILE__)
inline constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
inline constexpr int kWarpSize = 64;  // host pass of hipcc: parsed, never run
#endif

/// Butterfly exchange with the lane whose index differs in `mask` (all lanes participate).
__device__ __forceinline__ float shfl_xor(float v, int mask) {
#if defined(NIBBLE_HIP_ON_CUDA)
  return __shfl_xor_sync(0xffffffffu, v, mask, kWarpSize);
#else
  return __shfl_xor(v, mask, kWarpSize);
#endif
}

}  // namespace nibble::rocm

#endif  // device compilers
