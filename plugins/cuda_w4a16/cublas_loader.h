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

/// Y[M,N] = X[M,K] W[K,N] (accumulate: Y += X W), all row-major in device memory, dtype act
/// (nibble_dtype F16 or BF16), fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F) on `stream`.
/// With accumulate, Y's old value is added in fp32 before the one rounding to act (beta = 1): the
/// dense path puts the bias there, so that y is rounded once, not once by cuBLAS and again by a
/// bias kernel. ldw is W's row pitch and ldy Y's (elements); X is dense [M][K]. Returns 0 or an
/// error message in `why`.
int cublas_gemm_rowmajor(int32_t act, int64_t m, int64_t n, int64_t k, const void* x, const void* w, int64_t ldw,
                         void* y, int64_t ldy, bool accumulate, cudaStream_t stream, std::string* why);

}  // namespace nibble::cuda
