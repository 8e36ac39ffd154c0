// cuBLAS through dlopen (see cublas_loader.h). Only types and enums come from the cuBLAS header;
// every function is resolved at run time.
#include "cublas_loader.h"

#include "capture.h"

#include <cublas_api.h>
#include <dlfcn.h>

#include <map>
#include <mutex>

namespace nibble::cuda {
namespace {

using create_fn = cublasStatus_t (*)(cublasHandle_t*);
using set_stream_fn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using status_string_fn = const char* (*)(cublasStatus_t);
using gemm_ex_fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                      const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

struct Cublas {
  bool ok = false;
  std::string error;
  create_fn create = nullptr;
  set_stream_fn set_stream = nullptr;
  status_string_fn status_string = nullptr;
  gemm_ex_fn gemm_ex = nullptr;
  std::mutex mu;                           // a handle is used by one thread at a time
  std::map<int, cublasHandle_t> handles;   // per device; never destroyed (process lifetime)
};

Cublas& lib() {
  // Leaked on purpose: destroying handles at exit races the CUDA runtime's own teardown.
  static Cublas* c = [] {
    auto* c = new Cublas;
    void* h = nullptr;
    std::string tried;
    for (const char* name : {"libcublas.so.13", "libcublas.so"}) {
      h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (e ? e : name);
    }
    if (!h) {
      c->error = "cuBLAS not found (tried libcublas.so.13, libcublas.so): " + tried;
      return c;
    }
    c->create = reinterpret_cast<create_fn>(dlsym(h, "cublasCreate_v2"));
    c->set_stream = reinterpret_cast<set_stream_fn>(dlsym(h, "cublasSetStream_v2"));
    c->status_string = reinterpret_cast<status_string_fn>(dlsym(h, "cublasGetStatusString"));
    c->gemm_ex = reinterpret_cast<gemm_ex_fn>(dlsym(h, "cublasGemmEx"));
    if (!c->create || !c->set_stream || !c->gemm_ex) {
      c->error = "libcublas loaded but lacks cublasCreate_v2 / cublasSetStream_v2 / cublasGemmEx";
      return c;
    }
    c->ok = true;
    return c;
  }();
  return *c;
}

std::string status_str(Cublas& c, cublasStatus_t s) {
  return c.status_string ? c.status_string(s) : "cuBLAS status " + std::to_string(int(s));
}

}  // namespace

bool cublas_available(std::string* why) {
  Cublas& c = lib();
  if (!c.ok && why) *why = c.error;
  return c.ok;
}

int cublas_gemm_rowmajor(int32_t act, int64_t m, int64_t n, int64_t k, const void* x, const void* w, int64_t ldw,
                         void* y, int64_t ldy, GemmOut out, cudaStream_t stream, std::string* why) {
  Cublas& c = lib();
  if (!c.ok) {
    *why = c.error;
    return 1;
  }
  if (m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || ldw > INT32_MAX || ldy > INT32_MAX) {
    *why = "cublasGemmEx: a dimension exceeds 2^31";
    return 1;
  }
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) {
    *why = std::string("cudaGetDevice failed: ") + cudaGetErrorString(e);
    return 1;
  }
  std::lock_guard<std::mutex> lock(c.mu);
  cublasHandle_t& h = c.handles[dev];
  if (!h) {
    RelaxedCapture relaxed;  // the first call may come while the caller captures a graph
    if (cublasStatus_t s = c.create(&h); s != CUBLAS_STATUS_SUCCESS) {
      h = nullptr;
      *why = "cublasCreate failed: " + status_str(c, s);
      return 1;
    }
  }
  if (cublasStatus_t s = c.set_stream(h, stream); s != CUBLAS_STATUS_SUCCESS) {
    *why = "cublasSetStream failed: " + status_str(c, s);
    return 1;
  }
  // Row-major Y = X W is column-major Y^T = W^T X^T: A = W (N x K, ld ldw), B = X (K x M, ld K).
  const cudaDataType t = act == 2 ? CUDA_R_16BF : CUDA_R_16F, ty = out == GemmOut::f32 ? CUDA_R_32F : t;
  const float alpha = 1.f, beta = out == GemmOut::accumulate ? 1.f : 0.f;
  if (cublasStatus_t s = c.gemm_ex(h, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, w, t, int(ldw), x, t,
                                   int(k), &beta, y, ty, int(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      s != CUBLAS_STATUS_SUCCESS) {
    *why = "cublasGemmEx failed: " + status_str(c, s);
    return 1;
  }
  return 0;
}

}  // namespace nibble::cuda
