// A CPU emulation of the few HIP features kernels.hip uses, for the test test_rocm_emulated only:
// it lets the kernel source run on any machine, at either wavefront width (NIBBLE_EMULATED_WARP:
// 64 as on CDNA, 32 as on RDNA and NVIDIA), so that the wave64 code paths are exercised in CI,
// where there is no AMD GPU. Included by gpu_vendor.h when NIBBLE_GPU_EMULATION is defined.
//
// Model: one std::thread per GPU thread of a block, blocks run one after another on the same
// threads; __shared__ arrays are function statics (one block at a time uses them); __syncthreads
// is a std::barrier; a shuffle is a store, a barrier, a load and a barrier (every kernel here
// shuffles with all threads of the block together). fp16 arithmetic rounds as IEEE does. It checks
// the kernels' indexing, reductions and arithmetic, not timing, memory ordering or hardware quirks.
#pragma once

#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "nibble/dtype.h"

#ifndef NIBBLE_EMULATED_WARP
#define NIBBLE_EMULATED_WARP 64
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define NIBBLE_GPU_KIND "emulated GPU"

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 { uint32_t x, y, z, w; };
struct int4 { int32_t x, y, z, w; };
struct float4 { float x, y, z, w; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline thread_local dim3 threadIdx, blockIdx;

typedef int hipError_t;
inline constexpr hipError_t hipSuccess = 0;
typedef void* hipStream_t;
inline hipError_t hipGetLastError() { return hipSuccess; }
inline const char* hipGetErrorString(hipError_t) { return "emulated"; }
struct hipFuncAttributes {};
inline hipError_t hipFuncGetAttributes(hipFuncAttributes*, const void*) { return hipSuccess; }

struct __half { uint16_t b; };
struct __half2 { __half lo, hi; };
inline __half __ushort_as_half(uint16_t b) { return {b}; }
inline uint16_t __half_as_ushort(__half h) { return h.b; }
inline float __half2float(__half h) { return nibble::f16_to_float(h.b); }
inline __half __float2half_rn(float f) { return {nibble::float_to_f16(f)}; }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __hsub2(__half2 a, __half2 b) {  // exact difference, rounded once to fp16
  return {__float2half_rn(__half2float(a.lo) - __half2float(b.lo)),
          __float2half_rn(__half2float(a.hi) - __half2float(b.hi))};
}
inline float __low2float(__half2 h) { return __half2float(h.lo); }
inline float __high2float(__half2 h) { return __half2float(h.hi); }
inline float __uint_as_float(uint32_t u) { return nibble::bits_float(u); }
inline uint32_t __float_as_uint(float f) { return nibble::float_bits(f); }

namespace nibble::rocm::emulation {
inline std::barrier<>* block_barrier = nullptr;
inline std::vector<float> shuffle_slots;

/// Runs body() as grid.x * grid.y blocks of block.x threads.
inline void launch(dim3 grid, dim3 block, const std::function<void()>& body) {
  std::barrier<> bar(std::ptrdiff_t(block.x));
  block_barrier = &bar;
  shuffle_slots.assign(block.x, 0.0f);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < block.x; ++t)
    threads.emplace_back([&, t] {
      threadIdx = dim3(t);
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          blockIdx = dim3(bx, by);
          body();
          bar.arrive_and_wait();  // the next block reuses the __shared__ statics
        }
    });
  for (auto& th : threads) th.join();
  block_barrier = nullptr;
}
}  // namespace nibble::rocm::emulation

inline void __syncthreads() { nibble::rocm::emulation::block_barrier->arrive_and_wait(); }

namespace nibble::rocm {
inline constexpr int kWarpSize = NIBBLE_EMULATED_WARP;
inline float shfl_xor(float v, int mask) {
  const unsigned t = threadIdx.x;
  emulation::shuffle_slots[t] = v;
  __syncthreads();
  const unsigned src = (t & ~unsigned(kWarpSize - 1)) | ((t & unsigned(kWarpSize - 1)) ^ unsigned(mask));
  const float r = emulation::shuffle_slots[src];
  __syncthreads();
  return r;
}
}  // namespace nibble::rocm

#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  ((void)(shmem), (void)(stream),                                    \
   ::nibble::rocm::emulation::launch(dim3(grid), dim3(block), [&] { kernel(__VA_ARGS__); }))
