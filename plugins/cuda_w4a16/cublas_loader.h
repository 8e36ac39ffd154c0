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

/// How cuBLAS may sum the partial products of a split K: in fp32 (`kFp32`,
/// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: the plugin's own path, which must hold the
/// conformance tolerance), or as cuBLAS does by default, which for bf16 may round partial sums to
/// bf16 (`kCublasDefault`: the dense baseline, as a framework such as PyTorch runs it by default).
/// With activations of 256x outliers the default exceeded the bf16 tolerance by up to 1.25x on an
/// H100 (tests/test_conformance.cpp's add_outliers).
enum class Reduction { kFp32, kCublasDefault };

/// Y[M,N] = X[M,K] W[K,N], all row-major in device memory, dtype act (nibble_dtype F16 or BF16),
/// fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F) on `stream`, split-K partial sums as
/// `reduction` says. ldw is W's row pitch and ldy Y's (elements); X is dense [M][K]. Returns 0 or an
/// error message in `why`.
int cublas_gemm_rowmajor(int32_t act, int64_t m, int64_t n, int64_t k, const void* x, const void* w, int64_t ldw,
                         void* y, int64_t ldy, Reduction reduction, cudaStream_t stream, std::string* why);

}  // namespace nibble::cuda
