// cuBLAS, loaded on first use with dlopen, so that the plugin itself never needs cuBLAS to load
// (the CUDA runtime is linked statically; cuBLAS is 700 MB and only the dense baseline and the
// optional dequantize + GEMM path of large M use it).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace nibble::cuda {

/// Loads libcublas.so.13 (then libcublas.so) once per process. On success returns true; on failure
/// false and `why` names the libraries tried and dlerror().
bool cublas_available(std::string* why);

/// How Y is written: in the activation dtype, or += (beta = 1: Y's old value added), or as fp32.
enum class GemmOut { act, accumulate, f32 };

/// Y[M,N] = X[M,K] W[K,N], all row-major in device memory, X and W of dtype act (nibble_dtype F16
/// or BF16), fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F) on `stream`; Y per `out`: act
/// dtype, act dtype += (the dense path's bias for fp16), or fp32 (the dense path's bias for bf16:
/// measured on the H200, beta = 1 left y rounded twice, docs/cuda.md "Outlier activations").
/// ldw is W's row pitch and ldy Y's (elements); X is dense [M][K]. Returns 0 or an error message
/// in `why`.
int cublas_gemm_rowmajor(int32_t act, int64_t m, int64_t n, int64_t k, const void* x, const void* w, int64_t ldw,
                         void* y, int64_t ldy, GemmOut out, cudaStream_t stream, std::string* why);

}  // namespace nibble::cuda
