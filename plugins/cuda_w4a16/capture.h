// Stream capture (CUDA graphs) as apply() meets it. A host engine captures whole decode steps into
// graphs and replays them; what apply() enqueues is then recorded, not run, and the calls that
// could synchronize (cudaMalloc, cudaStreamSynchronize, a legacy-stream memset) are refused under
// the global capture mode most engines use, and would invalidate the capture.
#pragma once

#include <cuda_runtime_api.h>

namespace nibble::cuda {

/// Whether work enqueued on `stream` is being captured into a graph.
inline bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive;
}

/// For its lifetime, lets this thread make the calls that a capture in the global mode prohibits
/// (cudaThreadExchangeStreamCaptureMode, the runtime's own mechanism for libraries that must
/// allocate while a caller captures). What it allocates is not part of any graph.
class RelaxedCapture {
 public:
  RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { (void)cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace nibble::cuda
