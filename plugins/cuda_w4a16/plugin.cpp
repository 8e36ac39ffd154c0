// cuda_w4a16: the CUDA backend plugin. This file is the ABI glue: probe, can_implement,
// process_weights (layout plan, upload, repack on the device), apply (the plan's kernel, the
// per-stream workspace, the launch), options and the cuBLAS dense baseline. The kernel menu and
// the choice per call are plan.h, the layout planning layout_plan.h, the packed layout layout.h,
// the kernels kernels.h; device memory, timing and the ABI table come from the shared GPU
// skeleton (plugins/common/gpu_plugin.h).
//
// The CUDA runtime is linked statically (nvcc's default), so this module loads on machines without
// a GPU or driver; probe() then reports why. Every CUDA call is checked and a failure becomes a
// status plus a message naming the call and cudaGetErrorString.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <boost/dll/alias.hpp>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "capture.h"
#include "cublas_loader.h"
#include "gpu_plugin.h"
#include "kernels.h"
#include "layout.h"
#include "layout_plan.h"
#include "nibble/plugin_abi.h"
#include "nibble_planes.h"
#include "plan.h"
#include "plugin_support.h"

#ifndef NIBBLE_VERSION_STRING
#define NIBBLE_VERSION_STRING "0.0.0"
#endif

namespace nibble::cuda {

using plugin::fail;
using plugin::guarded;

namespace {

// ---- the CUDA runtime, for the shared GPU skeleton -------------------------------------------------

struct CudaRuntime {
  using Error = cudaError_t;
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;
  static constexpr Error kSuccess = cudaSuccess;
  static Error malloc(void** p, size_t n) { return cudaMalloc(p, n); }
  static Error free(void* p) { return cudaFree(p); }
  static Error memset_async(void* p, int v, size_t n, Stream s) { return cudaMemsetAsync(p, v, n, s); }
  static Error memcpy_async(void* d, const void* s, size_t n, int32_t kind, Stream st) {
    const cudaMemcpyKind k = kind == NIBBLE_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                             : kind == NIBBLE_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                                  : cudaMemcpyDeviceToDevice;
    return cudaMemcpyAsync(d, s, n, k, st);
  }
  static Error stream_sync(Stream s) { return cudaStreamSynchronize(s); }
  static Error event_create(Event* e) { return cudaEventCreate(e); }
  static Error event_destroy(Event e) { return cudaEventDestroy(e); }
  static Error event_record(Event e, Stream s) { return cudaEventRecord(e, s); }
  static Error event_sync(Event e) { return cudaEventSynchronize(e); }
  static Error event_elapsed_ms(float* ms, Event a, Event b) { return cudaEventElapsedTime(ms, a, b); }
  static Error last_error() { return cudaGetLastError(); }
  static const char* error_string(Error e) { return cudaGetErrorString(e); }
  static int32_t status(Error e) {
    switch (e) {
      case cudaErrorMemoryAllocation:
        return NIBBLE_ERR_OUT_OF_MEMORY;
      case cudaErrorNoDevice:
      case cudaErrorInsufficientDriver:
        return NIBBLE_ERR_NO_DEVICE;
      default:
        return NIBBLE_ERR_DEVICE;
    }
  }
};
using DeviceBuffer = plugin::DeviceBuffer<CudaRuntime>;
#define NIBBLE_CUDA_TRY(call) NIBBLE_GPU_TRY(CudaRuntime, call)

// Every width runs on the 4-bit kernels: 2 and 3 bits as one nibble plane, 8 bits as two
// (plugins/common/nibble_planes.h), on every kernel of the menu.
constexpr uint32_t kBits = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 8);
const nibble_capabilities kCaps = plugin::gpu_capabilities(plugin::weight_types_of_bits(kBits), kBits, 80);

// ---- per-device state ---------------------------------------------------------------------------

// Kernel tiles and occupancy, filled once per device.
struct DeviceState {
  bool ready = false;
  cudaError_t error = cudaSuccess;
  KernelInfo info[2][kNumKernels]{};  // [f16, bf16][KernelId]
  KernelInfo info8[2][kNumKernels]{};  // the same for the tiled kernels' one-pass 8-bit instances
  int sms = 0;
  int cc = 0;  // major * 10 + minor
};

std::mutex g_dev_mu;
std::map<int, DeviceState>& devices() {
  static auto* m = new std::map<int, DeviceState>;  // leaked: no CUDA calls during static teardown
  return *m;
}

int32_t device_state(int dev, const DeviceState** out, char* msg, size_t cap) {
  std::lock_guard<std::mutex> lock(g_dev_mu);
  DeviceState& d = devices()[dev];
  if (!d.ready) {
    int major = 0, minor = 0;
    d.error = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    if (d.error == cudaSuccess)
      d.error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (d.error == cudaSuccess)
      d.error = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    d.cc = major * 10 + minor;
    if (d.error == cudaSuccess) d.error = setup_gemv_kernels(d.info, d.sms);
    if (d.error == cudaSuccess) d.error = setup_mma_kernels(d.info, d.info8, d.sms);
#if defined(NIBBLE_CUDA_WGMMA)
    if (d.error == cudaSuccess && d.cc == 90) d.error = setup_wgmma_kernels(d.info, d.info8, d.sms);
#endif
    d.ready = true;
  }
  if (d.error != cudaSuccess)
    return fail(CudaRuntime::status(d.error), msg, cap,
                "kernel setup (cudaFuncSetAttribute / occupancy) failed: %s", cudaGetErrorString(d.error));
  *out = &d;
  return NIBBLE_OK;
}

// ---- options ----------------------------------------------------------------------------------

struct Options {
  std::mutex mu;
  PlanOptions plan = options_from_environment();
};
Options& options() {
  static auto* o = new Options;
  return *o;
}
PlanOptions current_options() {
  Options& o = options();
  std::lock_guard<std::mutex> lock(o.mu);
  return o.plan;
}

// ---- prepared weights ----------------------------------------------------------------------------

struct Prepared {
  nibble_linear_spec spec{};
  Act act = Act::f16;
  int device = 0;
  int64_t x_k = 0;  // columns of x (the real layer's K; lp.k is the 4-bit layer's)
  LayoutPlan lp;    // perm and gmap dropped after the upload
  DeviceBuffer w, scale_rec, zero_rec, bias;
  DeviceBuffer x_map;  // [k_pad] x column of each packed row (-1: zero), or none: x read as it is
  // dequantize + cuBLAS: an 8-bit layer's two planes summed into a dense copy of the real K rows
  // (planes8_dense_pairs), multiplied with x as it is; else the 4-bit image's k_pad rows and x gathered
  bool dense8 = false;
  // The tiled kernels' one-pass 8-bit instances (ShapeFacts::planes8): x of the low-plane rows
  // only, [ku / 2 * 32], real unit r's rows at r * 32 (x_map of unit r + upg (r / upg)), or none
  DeviceBuffer x_map8;
};

ShapeFacts shape_facts(const Prepared& p) {
  ShapeFacts s;
  s.k = p.lp.k;
  s.n = p.lp.n;
  s.n_pad = p.lp.n_pad;
  s.ku = p.lp.ku;
  s.kt = p.lp.kt;
  s.bits = p.spec.bits;
  s.planes8 = p.x_map8.p != nullptr && p.lp.g_eff / kUnitK < (1 << 15);
  s.kt8 = (p.lp.ku + 3) / 4;
  return s;
}

DeviceFacts device_facts(const Prepared& p, const DeviceState& d) {
  DeviceFacts f;
  f.cc = d.cc;
  f.info = d.info[p.act == Act::f16 ? 0 : 1];
  f.info8 = d.info8[p.act == Act::f16 ? 0 : 1];
  f.bf16 = p.act == Act::bf16;
  f.cublas = cublas_available(nullptr);
#if defined(NIBBLE_CUDA_WGMMA)
  f.sm90a_built = true;
#endif
  return f;
}

// Whether the GEMV runs an 8-bit layer's two nibble planes in one pass (launch_gemv_kernel's
// planes8): allowed by the options (gemv_planes8), v1 with fp16, zero points (every 8-bit layer has them as planes), x gathered through
// the planes' x map (every column valid), groups of an even number of units below 2^16, and no L2
// prefetch (an option of the plane-by-plane loop).
bool planes8_pass(const Prepared& p, const Plan& plan) {
  const int64_t upg = p.lp.g_eff / kUnitK;
  return plan.planes8 && p.spec.bits == 8 && gemv_has_planes8(plan.kernel, p.act) && p.zero_rec.p && p.x_map.p &&
         p.lp.perm.empty() && upg % 2 == 0 && upg < (1 << 16) && plan.prefetch == 0;
}

// Whether the GEMV runs its instance without bounds checks (launch_gemv_kernel's whole): allowed
// by the options (gemv_whole), and every batch whole: a warp's K range is whole batches of
// step_units when ku is a multiple of it, and x covers all ku * 32 columns (kx).
bool whole_pass(const Plan& plan, const KernelInfo& ki, int64_t ku, int64_t kx) {
  return plan.whole && ki.step_units > 0 && ku % ki.step_units == 0 && kx == ku * kUnitK;
}

// ---- per-stream workspace --------------------------------------------------------------------------

// Scratch that apply() needs on a stream: gathered x, the wgmma kernels' x image, stream-K partial
// tiles and arrival counters, and the dense temporary of the cuBLAS path. One per (device, stream): launches
// on one stream run in order, so they may share it; different streams get different ones, so concurrent
// apply() on one prepared weight is safe. Grows and never shrinks.
//
// CUDA graphs: a call captured on a stream records these buffers' addresses in the caller's graph,
// which may be replayed long after. So once a call on this stream has been captured, a buffer that
// is outgrown is kept (retired, for the process's life) rather than freed, and growing needs no
// synchronization; a buffer that must grow during a capture is allocated outside it (capture.h)
// and zeroed on a stream of its own, so that the graph and later direct calls both find it zeroed.
// Graphs captured on one stream share its workspace with each other and with that stream's direct
// calls: replay them in order on one stream, as the calls would run (docs/embedding.md).
struct Workspace {
  std::mutex mu;  // held from buffer lookup to launch
  DeviceBuffer xbuf, ximage, partials, counters, dense, dense_y;
  bool captured = false;        // a call on this stream has been captured into a graph
  std::vector<void*> retired;   // outgrown buffers a graph may still use (never freed)
  // dense_overlap: the stream the dequantization runs on beside the caller's, and the events that
  // order the two (fork; chunk dequantized, by buffer; GEMM done, by buffer). Made at first use,
  // kept for the process's life, like the workspace.
  cudaStream_t aux = nullptr;
  cudaEvent_t fork = nullptr, dequantized[2]{}, multiplied[2]{};
};
std::mutex g_ws_mu;
Workspace& workspace(int dev, void* stream) {
  static auto* m = new std::map<std::pair<int, void*>, std::unique_ptr<Workspace>>;  // leaked, see devices()
  std::lock_guard<std::mutex> lock(g_ws_mu);
  auto& w = (*m)[{dev, stream}];
  if (!w) w = std::make_unique<Workspace>();
  return *w;
}

// Zeroes fresh memory outside any capture: on a stream of its own, waited for.
cudaError_t zero_now(void* p, size_t bytes) {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return e;
  e = cudaMemsetAsync(p, 0, bytes, s);
  const cudaError_t e2 = cudaStreamSynchronize(s);
  (void)cudaStreamDestroy(s);
  return e != cudaSuccess ? e : e2;
}

int32_t ensure(Workspace& ws, DeviceBuffer& b, size_t bytes, bool zero, cudaStream_t stream, char* msg, size_t cap) {
  if (b.p && b.bytes >= bytes) return NIBBLE_OK;
  const bool in_capture = capturing(stream);
  const size_t grow = std::max(bytes, b.bytes + b.bytes / 2);
  RelaxedCapture relaxed;  // cudaMalloc and the zeroing below, while the caller may be capturing
  if (ws.captured || in_capture) {
    if (b.p) ws.retired.push_back(b.release());  // a graph may still read or write it
  } else {
    NIBBLE_CUDA_TRY(cudaStreamSynchronize(stream));  // earlier launches may still use the old buffer
    // and the second stream's (dense_overlap), which a call that failed halfway left unjoined
    if (ws.aux) NIBBLE_CUDA_TRY(cudaStreamSynchronize(ws.aux));
    b.reset();
  }
  NIBBLE_CUDA_TRY(b.alloc(grow));
  if (zero) NIBBLE_CUDA_TRY(in_capture ? zero_now(b.p, grow) : cudaMemsetAsync(b.p, 0, grow, stream));
  return NIBBLE_OK;
}

// The second stream and the events of dense_overlap, made once per workspace (outside any
// capture: stream and event creation are not captured work).
int32_t ensure_aux(Workspace& ws, char* msg, size_t cap) {
  if (ws.aux) return NIBBLE_OK;
  RelaxedCapture relaxed;
  cudaEvent_t ev[5]{};
  for (cudaEvent_t& e : ev) NIBBLE_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  NIBBLE_CUDA_TRY(cudaStreamCreateWithFlags(&ws.aux, cudaStreamNonBlocking));
  ws.fork = ev[0];
  ws.dequantized[0] = ev[1];
  ws.dequantized[1] = ev[2];
  ws.multiplied[0] = ev[3];
  ws.multiplied[1] = ev[4];
  return NIBBLE_OK;
}

// ---- ABI functions ------------------------------------------------------------------------------

int32_t probe(char* msg, size_t cap) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap,
                "no CUDA driver (or one older than the runtime): cudaGetDeviceCount: %s",
                cudaGetErrorString(e));
  if (e == cudaErrorNoDevice || (e == cudaSuccess && count == 0))
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no device: cudaGetDeviceCount: %s", cudaGetErrorString(e));
  if (e != cudaSuccess)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no usable CUDA device: cudaGetDeviceCount failed: %s",
                cudaGetErrorString(e));
  int dev = 0;
  NIBBLE_CUDA_TRY(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  NIBBLE_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
  if (prop.major < 8)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "device %d (%s) is sm_%d%d; cuda_w4a16 needs sm_80 or newer",
                dev, prop.name, prop.major, prop.minor);
  return fail(NIBBLE_OK, msg, cap, "%s, sm_%d%d, %d SMs, %.0f GiB (device %d of %d)", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, double(prop.totalGlobalMem) / (1u << 30), dev, count);
}

int32_t can_implement(const nibble_linear_spec* s, char* msg, size_t cap) {
  if (int32_t st = plugin::check_caps(kCaps, s, msg, cap)) return st;
  if (s->k > (int64_t(1) << 20) || s->n > (int64_t(1) << 30))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "K above 2^20 or N above 2^30 (K=%lld N=%lld)",
                (long long)s->k, (long long)s->n);
  return NIBBLE_OK;
}

size_t dtype_size(int32_t d) { return d == NIBBLE_DTYPE_F32 ? 4 : 2; }

int32_t process_weights(const nibble_linear_spec* s, const nibble_canonical_weights* cw, void* stream_v,
                        nibble_prepared** out, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!out || !cw) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
    *out = nullptr;
    if (int32_t st = can_implement(s, msg, cap)) return st;
    if (!cw->qweight || !cw->scales)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': qweight or scales missing",
                  s->layer_name);
    if (bool(s->has_bias) != (cw->bias != nullptr))
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': bias %s but has_bias=%d", s->layer_name,
                  cw->bias ? "present" : "missing", s->has_bias);
    // Every width as a 4-bit layer (vs, vw), its rows reading x through the layer's x map.
    PlannedLayer layer;
    std::string why;
    if (int32_t st = plan_layer(*s, *cw, &layer, &why)) return fail(st, msg, cap, "%s", why.c_str());
    const nibble_linear_spec* vs = &layer.spec;
    const nibble_canonical_weights& vw = layer.weights;
    const bool zp = vs->weight_type == NIBBLE_WT_UINT4;
    if (zp != (vw.zeros != nullptr))
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': zeros %s for weight type %d",
                  s->layer_name, zp ? "missing" : "present", s->weight_type);
    auto p = std::make_unique<Prepared>();
    p->dense8 = planes8_dense_pairs(layer, *s);
    p->lp = std::move(layer.lp);
    const std::vector<int32_t>& x_map = layer.x_map;
    p->x_k = s->k;
    const cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    p->spec = *s;
    p->spec.layer_name = nullptr;  // borrowed from the host; not kept
    p->act = s->act_dtype == NIBBLE_DTYPE_BF16 ? Act::bf16 : Act::f16;
    NIBBLE_CUDA_TRY(cudaGetDevice(&p->device));
    const DeviceState* dev = nullptr;
    if (int32_t st = device_state(p->device, &dev, msg, cap)) return st;
    const LayoutPlan& lp = p->lp;

    // Upload the canonical tensors, repack on the device, free the uploads.
    const int64_t groups = nibble_spec_num_groups(vs);
    const size_t qw_bytes = size_t((vs->k + 7) / 8) * size_t(vs->n) * 4;
    const size_t sc_bytes = size_t(groups) * size_t(s->n) * dtype_size(vs->scale_dtype);
    DeviceBuffer d_qw, d_sc, d_z, d_gmap;
    NIBBLE_CUDA_TRY(d_qw.alloc(qw_bytes));
    NIBBLE_CUDA_TRY(d_sc.alloc(sc_bytes));
    NIBBLE_CUDA_TRY(d_gmap.alloc(lp.gmap.size() * 4));
    NIBBLE_CUDA_TRY(cudaMemcpyAsync(d_qw.p, vw.qweight, qw_bytes, cudaMemcpyHostToDevice, stream));
    NIBBLE_CUDA_TRY(cudaMemcpyAsync(d_sc.p, vw.scales, sc_bytes, cudaMemcpyHostToDevice, stream));
    NIBBLE_CUDA_TRY(
        cudaMemcpyAsync(d_gmap.p, lp.gmap.data(), lp.gmap.size() * 4, cudaMemcpyHostToDevice, stream));
    if (zp) {
      NIBBLE_CUDA_TRY(d_z.alloc(size_t(groups) * size_t(s->n)));
      NIBBLE_CUDA_TRY(
          cudaMemcpyAsync(d_z.p, vw.zeros, size_t(groups) * size_t(s->n), cudaMemcpyHostToDevice, stream));
    }
    DeviceBuffer d_perm;
    if (!lp.perm.empty()) {
      NIBBLE_CUDA_TRY(d_perm.alloc(lp.perm.size() * 4));
      NIBBLE_CUDA_TRY(
          cudaMemcpyAsync(d_perm.p, lp.perm.data(), lp.perm.size() * 4, cudaMemcpyHostToDevice, stream));
    }
    if (!x_map.empty()) {
      NIBBLE_CUDA_TRY(p->x_map.alloc(x_map.size() * 4));
      NIBBLE_CUDA_TRY(
          cudaMemcpyAsync(p->x_map.p, x_map.data(), x_map.size() * 4, cudaMemcpyHostToDevice, stream));
    }
    if (p->dense8 && zp) {
      const std::vector<int32_t> x_map8 = low_plane_rows(x_map, lp);
      NIBBLE_CUDA_TRY(p->x_map8.alloc(x_map8.size() * 4));
      NIBBLE_CUDA_TRY(
          cudaMemcpyAsync(p->x_map8.p, x_map8.data(), x_map8.size() * 4, cudaMemcpyHostToDevice, stream));
      NIBBLE_CUDA_TRY(cudaStreamSynchronize(stream));  // x_map8 is released at the end of this block
    }
    if (s->has_bias) {
      NIBBLE_CUDA_TRY(p->bias.alloc(size_t(s->n) * 2));
      NIBBLE_CUDA_TRY(cudaMemcpyAsync(p->bias.p, vw.bias, size_t(s->n) * 2, cudaMemcpyHostToDevice, stream));
    }
    NIBBLE_CUDA_TRY(p->w.alloc(size_t(lp.strips) * size_t(lp.ku) * 512));
    NIBBLE_CUDA_TRY(p->scale_rec.alloc(size_t(lp.groups_pad) * size_t(lp.strips) * 64));
    if (zp) NIBBLE_CUDA_TRY(p->zero_rec.alloc(size_t(lp.groups_pad) * size_t(lp.strips) * 32));
    NIBBLE_CUDA_TRY(launch_repack_weights(static_cast<const uint32_t*>(d_qw.p), vs->k, vs->n,
                                          static_cast<const int32_t*>(d_perm.p), lp.strips, lp.ku, p->w.p,
                                          stream));
    NIBBLE_CUDA_TRY(launch_repack_records(d_sc.p, s->scale_dtype, static_cast<const uint8_t*>(d_z.p), s->n,
                                          static_cast<const int32_t*>(d_gmap.p), lp.groups_pad, lp.strips,
                                          p->act, p->scale_rec.p, static_cast<uint8_t*>(p->zero_rec.p),
                                          stream));
    NIBBLE_CUDA_TRY(cudaStreamSynchronize(stream));  // the host tensors and the uploads are released next
    p->lp.perm.clear();
    p->lp.perm.shrink_to_fit();
    *out = reinterpret_cast<nibble_prepared*>(p.release());
    return NIBBLE_OK;
  });
}

// dequantize + cuBLAS: the columns of one chunk of dense weights (kx rows, at most chunk_mib MiB,
// but at least one kNPad tile of columns).
int64_t dense_chunk_cols(const LayoutPlan& lp, int64_t kx, int32_t chunk_mib) {
  const int64_t nc = std::max<int64_t>(kNPad, (int64_t(chunk_mib) << 20) / (kx * 2) / kNPad * kNPad);
  return std::min(nc, lp.n_pad);
}
// The rows of x (and of the dense copy) dequantize + cuBLAS multiplies: apply()'s kx.
int64_t dense_kx(const Prepared& p) {
  const auto pad8 = [](int64_t k) { return (k + 7) / 8 * 8; };
  return p.dense8 ? pad8(p.x_k) : p.x_map.p ? p.lp.k_pad : pad8(p.lp.k);
}

// Dequantizes column chunks of at most `chunk_mib` MiB (dense_chunk_mib) into a dense temporary
// and multiplies each with cuBLAS (exllama's large-batch path): at large M the GEMM dominates and
// the dequantization adds 2.5 bytes per weight of traffic. x: [m][kx], gathered through the x map
// (the 4-bit image's k_pad rows) or, for dense8, the real x padded to kx columns (the dense rows
// past K are zeroed).
//
// With `overlap` (dense_overlap) and more than one chunk, the dequantization runs on the
// workspace's second stream into two buffers in turn, so that chunk i + 1 is dequantized while
// chunk i's GEMM runs on the caller's stream: the second stream forks from the caller's (event
// `fork`), each GEMM waits for its chunk (`dequantized`), each dequantization into a buffer waits
// for the GEMM that last read it (`multiplied`), and the last GEMM waits for the last
// dequantization, which joins the second stream back (so a graph capture stays one fork-join).
// Each event is recorded again only after the wait on its previous record has been issued.
int32_t apply_cublas(const Prepared& p, const void* xk, int64_t kx, int64_t m, void* y, int32_t chunk_mib,
                     bool overlap, Workspace& ws, cudaStream_t stream, char* msg, size_t cap) {
  const LayoutPlan& lp = p.lp;
  const int64_t nc = dense_chunk_cols(lp, kx, chunk_mib);
  const int64_t chunks = (lp.n + nc - 1) / nc;
  const bool piped = overlap && chunks > 1;
  const size_t buf_bytes = size_t(kx) * size_t(nc) * 2;
  if (int32_t st = ensure(ws, ws.dense, buf_bytes * (piped ? 2 : 1), false, stream, msg, cap)) return st;
  if (piped)
    if (int32_t st = ensure_aux(ws, msg, cap)) return st;
  const auto buffer = [&](int64_t i) {
    return static_cast<char*>(ws.dense.p) + (piped ? size_t(i % 2) * buf_bytes : 0);
  };
  if (p.dense8 && kx > p.x_k)
    for (int b = 0; b < (piped ? 2 : 1); ++b)
      NIBBLE_CUDA_TRY(cudaMemsetAsync(buffer(b) + size_t(p.x_k) * size_t(nc) * 2, 0,
                                      size_t(kx - p.x_k) * size_t(nc) * 2, stream));
  // The bias, with y rounded once where it matters: fp16 y starts as the bias rows and cuBLAS adds
  // X W to them (beta = 1); bf16 goes through an fp32 chunk of y that a kernel adds the bias to
  // and rounds once (with beta = 1 cuBLAS rounded bf16 X W before adding the bias, past the bf16
  // tolerance with outliers in x; fp16 holds its tolerance either way: docs/cuda.md "Outlier
  // activations").
  const bool with_bias = p.bias.p != nullptr, bias_f32 = with_bias && p.act == Act::bf16;
  if (with_bias && !bias_f32) NIBBLE_CUDA_TRY(launch_fill_bias(y, p.bias.p, m, lp.n, stream));
  if (bias_f32)
    if (int32_t st = ensure(ws, ws.dense_y, size_t(m) * size_t(nc) * 4, false, stream, msg, cap)) return st;
  const cudaStream_t dq_stream = piped ? ws.aux : stream;
  const auto dequantize = [&](int64_t i) -> cudaError_t {
    const int64_t n0 = i * nc, cols = std::min(nc, lp.n_pad - n0);
    if (p.dense8)
      return launch_dequant_dense_planes8(p.w.p, p.scale_rec.p, static_cast<const uint8_t*>(p.zero_rec.p),
                                          static_cast<const int32_t*>(p.x_map.p), lp.strips, lp.ku,
                                          lp.g_eff / kUnitK, int32_t(n0), int32_t(cols), p.act, buffer(i),
                                          dq_stream);
    return launch_dequant_dense(p.w.p, p.scale_rec.p, static_cast<const uint8_t*>(p.zero_rec.p), lp.strips, lp.ku,
                                lp.g_magic, int32_t(n0), int32_t(cols), p.act, buffer(i), dq_stream);
  };
  if (piped) {
    NIBBLE_CUDA_TRY(cudaEventRecord(ws.fork, stream));
    NIBBLE_CUDA_TRY(cudaStreamWaitEvent(ws.aux, ws.fork, 0));
    NIBBLE_CUDA_TRY(dequantize(0));
    NIBBLE_CUDA_TRY(cudaEventRecord(ws.dequantized[0], ws.aux));
  }
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t n0 = i * nc, cols = std::min(nc, lp.n_pad - n0);
    if (!piped) {
      NIBBLE_CUDA_TRY(dequantize(i));
    } else {
      if (i + 1 < chunks) {
        if (i >= 1) NIBBLE_CUDA_TRY(cudaStreamWaitEvent(ws.aux, ws.multiplied[(i + 1) % 2], 0));
        NIBBLE_CUDA_TRY(dequantize(i + 1));
        NIBBLE_CUDA_TRY(cudaEventRecord(ws.dequantized[(i + 1) % 2], ws.aux));
      }
      NIBBLE_CUDA_TRY(cudaStreamWaitEvent(stream, ws.dequantized[i % 2], 0));
    }
    std::string why;
    const int64_t ncols = std::min(cols, lp.n - n0);
    if (bias_f32) {
      if (cublas_gemm_rowmajor(int32_t(p.act), m, ncols, kx, xk, buffer(i), cols, ws.dense_y.p, ncols, GemmOut::f32,
                               stream, &why))
        return fail(NIBBLE_ERR_DEVICE, msg, cap, "%s", why.c_str());
      NIBBLE_CUDA_TRY(launch_bias_round_bf16(static_cast<const float*>(ws.dense_y.p), p.bias.p, m, n0, ncols, lp.n,
                                             y, stream));
    } else if (cublas_gemm_rowmajor(int32_t(p.act), m, ncols, kx, xk, buffer(i), cols,
                                    static_cast<char*>(y) + n0 * 2, lp.n,
                                    with_bias ? GemmOut::accumulate : GemmOut::act, stream, &why)) {
      return fail(NIBBLE_ERR_DEVICE, msg, cap, "%s", why.c_str());
    }
    if (piped && i + 2 < chunks) NIBBLE_CUDA_TRY(cudaEventRecord(ws.multiplied[i % 2], stream));
  }
  return NIBBLE_OK;
}

int32_t apply(const nibble_prepared* h, const nibble_tensor* x, nibble_tensor* y, void* stream_v, char* msg,
              size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
    const Prepared& p = *reinterpret_cast<const Prepared*>(h);
    const LayoutPlan& lp = p.lp;
    if (int32_t st = plugin::check_io(x, "x", p.spec.act_dtype, p.x_k, -1, msg, cap)) return st;
    const int64_t m = x->shape[0];
    if (int32_t st = plugin::check_io(y, "y", p.spec.act_dtype, lp.n, m, msg, cap)) return st;
    if (m > INT32_MAX) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "M=%lld above 2^31", (long long)m);
    const cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    int dev = 0;
    NIBBLE_CUDA_TRY(cudaGetDevice(&dev));
    if (dev != p.device)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "weights live on device %d, current device is %d",
                  p.device, dev);
    const DeviceState* d = nullptr;
    if (int32_t st = device_state(dev, &d, msg, cap)) return st;
    const DeviceFacts facts = device_facts(p, *d);
    const PlanOptions options = current_options();
    const ShapeFacts shape = shape_facts(p);
    const Plan plan = make_plan(shape, facts, options, m);
    if (!plan.declined.empty()) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "%s", plan.declined.c_str());
    const KernelDesc& kd = kernel_desc(plan.kernel);

    Workspace& ws = workspace(dev, stream_v);
    std::lock_guard<std::mutex> lock(ws.mu);
    if (capturing(stream)) ws.captured = true;
    // x as the kernels read it: rows 16-byte aligned, in packed row order. Act order and nibble
    // planes gather (columns through the x map, zeros for padding rows); an odd K or pointer only
    // pads.
    // The dense copy of an 8-bit layer (dense8) has the real K rows: x as it is, padded only.
    // The tiled kernels' one-pass 8-bit instances read x of the low-plane rows only (x_map8).
    const bool dense8 = kd.family == Family::cublas && p.dense8;
    const int64_t k_in = dense8 ? p.x_k : lp.k;
    const void* xk = x->data;
    int64_t ldx = k_in, kx = k_in;
    const bool gather = p.x_map.p != nullptr && !dense8;
    const int32_t* map = static_cast<const int32_t*>(plan.tiled_planes8 ? p.x_map8.p : p.x_map.p);
    if (gather || (k_in % 8) != 0 || (reinterpret_cast<uintptr_t>(x->data) % 16) != 0) {
      const int64_t kp = !gather ? (k_in + 7) / 8 * 8 : plan.tiled_planes8 ? lp.ku / 2 * kUnitK : lp.k_pad;
      if (int32_t st = ensure(ws, ws.xbuf, size_t(m) * size_t(kp) * 2, false, stream, msg, cap)) return st;
      NIBBLE_CUDA_TRY(launch_prep_x(x->data, m, p.x_k, gather ? map : nullptr, kp, ws.xbuf.p, stream));
      xk = ws.xbuf.p;
      ldx = kx = kp;
    }
    if (kd.family == Family::cublas)
      return apply_cublas(p, xk, kx, m, y->data, options.dense_chunk_mib, options.dense_overlap, ws, stream, msg,
                          cap);

    const KernelInfo& ki = kernel_info(kd, facts, shape);
    const bool gemv = kd.family == Family::gemv;
    const size_t part_bytes = gemv
                                  ? (plan.grid > 1 ? size_t(plan.grid) * size_t(m) * size_t(lp.n_pad) * 4 : 4)
                                  : size_t(2) * size_t(plan.grid) * size_t(ki.bm) * size_t(ki.bn) * 4;
    const size_t cnt_bytes = size_t(plan.m_tiles) * size_t(plan.n_tiles) * 4;
    if (int32_t st = ensure(ws, ws.partials, part_bytes, false, stream, msg, cap)) return st;
    if (int32_t st = ensure(ws, ws.counters, cnt_bytes, true, stream, msg, cap)) return st;

    GemmParams gp{};
    gp.w = p.w.p;
    gp.scale_rec = p.scale_rec.p;
    gp.zero_rec = static_cast<const uint8_t*>(p.zero_rec.p);
    gp.x = xk;
    gp.bias = p.bias.p;
    gp.y = y->data;
    gp.partials = static_cast<float*>(ws.partials.p);
    gp.counters = static_cast<int32_t*>(ws.counters.p);
    gp.ldx = ldx;
    gp.kx = kx;
    gp.m = int32_t(m);
    gp.n = int32_t(lp.n);
    gp.strips = lp.strips;
    gp.ku = lp.ku;
    gp.kt = kernel_stages(kd, shape);
    gp.g_magic = lp.g_magic;
    gp.m_tiles = plan.m_tiles;
    gp.n_tiles = plan.n_tiles;
    gp.evict_first = plan.m_tiles == 1;  // weights read once per call
    gp.overlap = plan.overlap;
    cudaError_t e = cudaErrorInvalidValue;
    switch (kd.family) {
      case Family::gemv:
        gp.prefetch = uint8_t(plan.prefetch);
        e = launch_gemv_kernel(plan.kernel, p.act, gp, plan.grid, planes8_pass(p, plan),
                               whole_pass(plan, facts.info[plan.kernel], gp.ku, gp.kx), stream);
        break;
      case Family::mma:
        e = launch_mma(plan.kernel, p.act, gp, plan.grid, plan.tiled_planes8, stream);
        break;
#if defined(NIBBLE_CUDA_WGMMA)
      case Family::wgmma:
        e = cudaSuccess;
        if (plan.x_image) {
          const size_t bytes = size_t(plan.m_tiles) * size_t(ki.bm) * size_t(gp.kt) * 128;
          if (int32_t st = ensure(ws, ws.ximage, bytes, false, stream, msg, cap)) return st;
          e = launch_wgmma_x_image(xk, ldx, kx, int32_t(m), ki.bm, plan.m_tiles, gp.kt, ws.ximage.p, stream);
          gp.x_image = ws.ximage.p;
        }
        gp.w_lsu = plan.w_lsu ? 1 : 0;
        gp.wg_sched = uint8_t((plan.split_fixup ? kWgSchedSplitFixup : 0) | (plan.waves ? kWgSchedWaves : 0) |
                              (plan.cluster ? kWgSchedCluster : 0));
        if (e == cudaSuccess) e = launch_wgmma(plan.kernel, p.act, gp, plan.grid, plan.tiled_planes8, stream);
        break;
#endif
      default:
        break;  // the plan declines what this build lacks
    }
    if (e != cudaSuccess) {
      // A failed launch may leave arrival counters non-zero: clear them for the next call.
      cudaMemsetAsync(ws.counters.p, 0, ws.counters.bytes, stream);
      return fail(CudaRuntime::status(e), msg, cap, "w4a16 kernel %s launch (grid %d, M=%lld) failed: %s",
                  kd.name, plan.grid, (long long)m, cudaGetErrorString(e));
    }
    return NIBBLE_OK;
  });
}

void release(nibble_prepared* h) { delete reinterpret_cast<Prepared*>(h); }

// "name (details)": the first word is the kernel's name in the plan's table (what `kernel=` takes).
int32_t describe_kernel(const nibble_prepared* h, int64_t m, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h || m < 1) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null handle or M < 1");
    const Prepared& p = *reinterpret_cast<const Prepared*>(h);
    const DeviceState* d = nullptr;
    if (int32_t st = device_state(p.device, &d, msg, cap)) return st;
    const DeviceFacts facts = device_facts(p, *d);
    const ShapeFacts shape = shape_facts(p);
    const Plan plan = make_plan(shape, facts, current_options(), m);
    const KernelDesc& kd = kernel_desc(plan.kernel);
    if (!plan.declined.empty()) return fail(NIBBLE_OK, msg, cap, "declined (%s)", plan.declined.c_str());
    if (kd.family == Family::cublas) {
      const PlanOptions o = current_options();
      const int64_t nc = dense_chunk_cols(p.lp, dense_kx(p), o.dense_chunk_mib);
      const int64_t chunks = (p.lp.n + nc - 1) / nc;
      return fail(NIBBLE_OK, msg, cap, "cublas (dequantize%s + cublasGemmEx; %lld chunk%s%s)",
                  p.dense8 ? " of both 8-bit planes in one pass" : "", (long long)chunks, chunks > 1 ? "s" : "",
                  o.dense_overlap && chunks > 1 ? ", each dequantized on a second stream during the previous GEMM"
                                                : "");
    }
    const KernelInfo& ki = kernel_info(kd, facts, shape);
    if (kd.family == Family::gemv) {
      const std::string prefetch =
          plan.prefetch > 0 ? ", L2 prefetch " + std::to_string(plan.prefetch) + " batches ahead" : "";
      // x's columns as apply sees them for a 16-byte aligned x (gathered: K_pad; else K rounded to 8)
      const int64_t kx = p.x_map.p ? p.lp.k_pad : (p.lp.k + 7) / 8 * 8;
      const bool whole = !planes8_pass(p, plan) && whole_pass(plan, ki, p.lp.ku, kx);
      return fail(NIBBLE_OK, msg, cap, "%s (GEMV, BN %d x BM %d, %d x %d tiles, %d K splits%s%s%s)", kd.name, ki.bn,
                  ki.bm, plan.n_tiles, plan.m_tiles, plan.grid, planes8_pass(p, plan) ? ", 8-bit planes in one pass" : "",
                  whole ? ", whole batches" : "", prefetch.c_str());
    }
    // The split fix-up's launches fall back to the last-arrival fix-up where the runtime refuses
    // them as cooperative launches: say so rather than name a path that did not run.
    std::string fixup = plan.split_fixup ? ", split fix-up" : "";
#if defined(NIBBLE_CUDA_WGMMA)
    if (plan.split_fixup && wgmma_cooperative_refusals() > 0)
      fixup += " (" + std::to_string(wgmma_cooperative_refusals()) +
               " cooperative launches refused in this process: those ran with the last-arrival fix-up)";
#endif
    return fail(NIBBLE_OK, msg, cap, "%s (%s, BN %d x BM %d, %s grid %d%s%s%s%s%s)", kd.name,
                kd.family == Family::wgmma ? "sm_90a wgmma" : "mma.sync", ki.bn, ki.bm,
                plan.waves ? "whole waves in raster order, then stream-K," : "stream-K", plan.grid,
                plan.tiled_planes8 ? ", 8-bit planes in one pass" : "", plan.x_image ? ", x image" : "",
                plan.cluster ? " multicast to clusters of 2" : "", plan.w_lsu ? ", weights by cp.async" : "",
                fixup.c_str());
  });
}

int32_t set_option(const char* key, const char* value, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!key || !value) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null option");
    const bool cublas =
        std::strcmp(key, "kernel") == 0 && std::strcmp(value, "cublas") == 0 && cublas_available(nullptr);
    Options& o = options();
    std::lock_guard<std::mutex> lock(o.mu);
    std::string why;
    if (int32_t st = set_plan_option(o.plan, key, value, cublas, &why))
      return fail(st, msg, cap, "%s", why.c_str());
    return NIBBLE_OK;
  });
}

// ---- dense baseline (cuBLAS) ----------------------------------------------------------------------

struct Dense {
  int64_t k = 0, n = 0;
  int32_t dtype = 0;
  DeviceBuffer w;  // [K][N] act dtype
};

int32_t dense_prepare(const nibble_linear_spec* s, const void* weight_kn, void* stream, nibble_dense** out,
                      char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!s || !weight_kn || !out) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
    *out = nullptr;
    if (s->act_dtype != NIBBLE_DTYPE_F16 && s->act_dtype != NIBBLE_DTYPE_BF16)
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "dense baseline: f16 or bf16 only, not %s",
                  plugin::dtype_str(s->act_dtype));
    std::string why;
    if (!cublas_available(&why))
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "dense baseline: %s", why.c_str());
    auto d = std::make_unique<Dense>();
    d->k = s->k;
    d->n = s->n;
    d->dtype = s->act_dtype;
    const size_t bytes = size_t(s->k) * size_t(s->n) * 2;
    NIBBLE_CUDA_TRY(d->w.alloc(bytes));
    NIBBLE_CUDA_TRY(
        cudaMemcpyAsync(d->w.p, weight_kn, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
    NIBBLE_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    *out = reinterpret_cast<nibble_dense*>(d.release());
    return NIBBLE_OK;
  });
}

int32_t dense_apply(const nibble_dense* h, const nibble_tensor* x, nibble_tensor* y, void* stream, char* msg,
                    size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null dense handle");
    const auto& d = *reinterpret_cast<const Dense*>(h);
    if (int32_t st = plugin::check_io(x, "x", d.dtype, d.k, -1, msg, cap)) return st;
    if (int32_t st = plugin::check_io(y, "y", d.dtype, d.n, x->shape[0], msg, cap)) return st;
    std::string why;
    if (cublas_gemm_rowmajor(d.dtype, x->shape[0], d.n, d.k, x->data, d.w.p, d.n, y->data, d.n, GemmOut::act,
                             static_cast<cudaStream_t>(stream), &why))
      return fail(NIBBLE_ERR_DEVICE, msg, cap, "dense baseline: %s", why.c_str());
    return NIBBLE_OK;
  });
}

void dense_release(nibble_dense* h) { delete reinterpret_cast<Dense*>(h); }

const nibble_plugin_api kApi = plugin::gpu_plugin_api<CudaRuntime>({
    /* .name = */ "cuda_w4a16",
    /* .version = */ NIBBLE_VERSION_STRING,
    /* .platform = */ "cuda",
    /* .description = */
    "W4A16 on NVIDIA GPUs (sm_80+, tuned for sm_90): streaming GEMV, stream-K mma.sync, sm_90a wgmma",
    /* .priority = */ 20,
    /* .caps = */ kCaps,
    /* .probe = */ probe,
    /* .can_implement = */ can_implement,
    /* .process_weights = */ process_weights,
    /* .apply = */ apply,
    /* .release = */ release,
    /* .set_option = */ set_option,
    /* .dense_prepare = */ dense_prepare,
    /* .dense_apply = */ dense_apply,
    /* .dense_release = */ dense_release,
    /* .describe_kernel = */ describe_kernel,
});

}  // namespace

// Also called directly by bench_kernels.cu (linked with the same objects).
const nibble_plugin_api* entry(uint32_t host_abi) { return host_abi == NIBBLE_ABI_VERSION ? &kApi : nullptr; }

}  // namespace nibble::cuda

BOOST_DLL_ALIAS(nibble::cuda::entry, nibble_plugin_entry)
