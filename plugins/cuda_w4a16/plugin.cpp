// cuda_w4a16: the CUDA backend plugin. This file is the ABI glue: capabilities, probe,
// can_implement, process_weights (upload + repack on the device), apply (kernel choice, workspace,
// launch), device memory, the cuBLAS dense baseline, device timing. Kernels: kernels.cu; packed
// layout: layout.h; design and measurements: README.md.
//
// The CUDA runtime is linked statically (nvcc's default), so this module loads on machines without
// a GPU or driver; probe() then reports why. Every CUDA call is checked and a failure becomes a
// status plus a message naming the call and cudaGetErrorString.
#include <boost/dll/alias.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "cublas_loader.h"
#include "kernels.h"
#include "layout.h"
#include "nibble/plugin_abi.h"
#include "plugin_support.h"

#ifndef NIBBLE_VERSION_STRING
#define NIBBLE_VERSION_STRING "0.0.0"
#endif

namespace nibble::cuda {

using plugin::fail;
using plugin::guarded;

namespace {

// ---- errors ------------------------------------------------------------------------------------

int32_t cuda_status(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation: return NIBBLE_ERR_OUT_OF_MEMORY;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return NIBBLE_ERR_NO_DEVICE;
    default: return NIBBLE_ERR_DEVICE;
  }
}

// Evaluates a CUDA call; on failure returns from the enclosing function with a status and a message
// naming the call.
#define NIBBLE_CUDA_TRY(call)                                                                        \
  do {                                                                                               \
    const cudaError_t nibble_e_ = (call);                                                            \
    if (nibble_e_ != cudaSuccess)                                                                    \
      return fail(cuda_status(nibble_e_), msg, cap, "%s failed: %s", #call, cudaGetErrorString(nibble_e_)); \
  } while (0)

// ---- capabilities --------------------------------------------------------------------------------

nibble_capabilities make_caps() {
  nibble_capabilities c{};
  c.formats = NIBBLE_FORMATS_ALL;
  c.weight_types = NIBBLE_WT_BIT(NIBBLE_WT_UINT4) | NIBBLE_WT_BIT(NIBBLE_WT_UINT4B8);
  c.bits = 1u << 4;
  c.act_dtypes = NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F16) | NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_BF16);
  const int32_t gs[] = {32, 64, 128, -1};
  for (int32_t g : gs) c.group_sizes[c.num_group_sizes++] = g;
  c.act_order = 1;
  c.bias = 1;
  c.k_multiple = 1;
  c.n_multiple = 1;
  c.min_device_level = 80;
  return c;
}
const nibble_capabilities kCaps = make_caps();

// Same rule as nibble_spec_num_groups() in plugin_abi.h (kept here so this plugin builds against
// the first release of the header too).
int64_t spec_groups(const nibble_linear_spec& s) {
  if (s.group_size <= 0) return 1;
  const int64_t k = (s.act_order && s.parallel == NIBBLE_PARALLEL_ROW && s.full_k > 0) ? s.full_k : s.k;
  return (k + s.group_size - 1) / s.group_size;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// ---- device memory -------------------------------------------------------------------------------

struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  void reset() {
    if (p) cudaFree(p);
    p = nullptr;
    bytes = 0;
  }
  cudaError_t alloc(size_t n) {
    reset();
    const cudaError_t e = cudaMalloc(&p, n ? n : 1);
    if (e != cudaSuccess) {
      p = nullptr;
      return e;
    }
    bytes = n;
    return cudaSuccess;
  }
};

// Per-device state: kernel tiles and occupancy, filled once.
struct DeviceState {
  bool ready = false;
  cudaError_t error = cudaSuccess;
  KernelInfo info[2][kNumKernels]{};
  int sms = 0;
  int cc_major = 0;  // compute capability: programmatic dependent launch needs 9.0
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
    d.error = kernel_setup(d.info);
    if (d.error == cudaSuccess) d.error = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev);
    if (d.error == cudaSuccess) d.error = cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    d.ready = true;
  }
  if (d.error != cudaSuccess)
    return fail(cuda_status(d.error), msg, cap, "kernel setup (cudaFuncSetAttribute / occupancy) failed: %s",
                cudaGetErrorString(d.error));
  *out = &d;
  return NIBBLE_OK;
}

// ---- options ----------------------------------------------------------------------------------

// "kernel": auto, or a variant name (s1 s2 s4 s8 l v1 v2 v4 v2u2) or "cublas" to force one for every M.
// "cublas_min_m": smallest M for which apply() may dequantize to a dense temporary and call cuBLAS
// when cuBLAS loads (0 = never; see make_plan for where it is chosen). Both can also be set with
// NIBBLE_CUDA_KERNEL / NIBBLE_CUDA_CUBLAS_MIN_M.
// "overlap": 1 (default) launches the GEMV kernels as programmatic dependents of the previous
// kernel in the stream on sm_90+, 0 launches them plainly (NIBBLE_CUDA_OVERLAP).
struct Options {
  std::mutex mu;
  int forced = -1;          // KernelId, kNumKernels for cublas, -1 for auto
  bool overlap = true;
  int64_t cublas_min_m = 65;
  int min_stages = 0;       // override of min_stages() (0 = the built-in table); GEMV: units per warp
};
Options& options() {
  static auto* o = [] {
    auto* o = new Options;
    if (const char* k = std::getenv("NIBBLE_CUDA_KERNEL")) {
      const std::string v = k;
      for (int i = 0; i < kNumKernels; ++i)
        if (v == kKernelNames[i]) o->forced = i;
      if (v == "cublas") o->forced = kNumKernels;
    }
    if (const char* m = std::getenv("NIBBLE_CUDA_CUBLAS_MIN_M")) o->cublas_min_m = std::atoll(m);
    if (const char* v = std::getenv("NIBBLE_CUDA_OVERLAP")) o->overlap = std::strcmp(v, "0") != 0;
    return o;
  }();
  return *o;
}

// ---- prepared weights ----------------------------------------------------------------------------

struct Prepared {
  nibble_linear_spec spec{};
  Act act = Act::f16;
  int device = 0;
  int64_t k = 0, n = 0;        // logical
  int64_t k_pad = 0, n_pad = 0;
  int32_t strips = 0, ku = 0, kt = 0, g_eff = 0, groups_pad = 0;
  uint32_t g_magic = 0;        // GemmParams::g_magic for g_eff
  bool act_order = false;
  DeviceBuffer w, scale_rec, zero_rec, perm, bias;
};

int32_t process_weights(const nibble_linear_spec* s, const nibble_canonical_weights* cw, void* stream_v,
                        nibble_prepared** out, char* msg, size_t cap);

// ---- per-stream workspace --------------------------------------------------------------------------

// Scratch that apply() needs on a stream: gathered x, stream-K partial tiles and arrival counters,
// and the dense temporary of the cuBLAS path. One per (device, stream): launches on one stream run
// in order, so they may share it; different streams get different ones, so concurrent apply() on
// one prepared weight is safe. Grows (after synchronizing its stream) and never shrinks.
struct Workspace {
  std::mutex mu;  // held from buffer lookup to launch
  DeviceBuffer xbuf, partials, counters, dense;
};
std::mutex g_ws_mu;
Workspace& workspace(int dev, void* stream) {
  static auto* m = new std::map<std::pair<int, void*>, std::unique_ptr<Workspace>>;  // leaked, see devices()
  std::lock_guard<std::mutex> lock(g_ws_mu);
  auto& w = (*m)[{dev, stream}];
  if (!w) w = std::make_unique<Workspace>();
  return *w;
}

int32_t ensure(DeviceBuffer& b, size_t bytes, bool zero, cudaStream_t stream, char* msg, size_t cap) {
  if (b.p && b.bytes >= bytes) return NIBBLE_OK;
  NIBBLE_CUDA_TRY(cudaStreamSynchronize(stream));  // earlier launches may still use the old buffer
  const size_t grow = std::max(bytes, b.bytes + b.bytes / 2);
  NIBBLE_CUDA_TRY(b.alloc(grow));
  if (zero) NIBBLE_CUDA_TRY(cudaMemsetAsync(b.p, 0, grow, stream));
  return NIBBLE_OK;
}

// ---- kernel choice ------------------------------------------------------------------------------

struct Plan {
  int kernel = kS1;  // KernelId, or kNumKernels for dequantize + cuBLAS
  int grid = 0;
  int32_t m_tiles = 0, n_tiles = 0;
  bool overlap = true;  // Options::overlap at the time of the plan
};

// Fewest k stages a block should get: below this the fixed costs (pipeline fill, partial tile
// write and fix-up) outweigh the gain from more blocks.
int min_stages(int kernel) {
  switch (kernel) {
    case kS1: return 4;
    case kS2: return 4;
    case kS4: return 6;
    case kS8: return 8;
    default: return 8;
  }
}

Plan make_plan(const Prepared& p, const DeviceState& d, int64_t m) {
  Plan plan;
  Options& o = options();
  int forced, stages_override;
  int64_t cublas_min_m;
  {
    std::lock_guard<std::mutex> lock(o.mu);
    forced = o.forced;
    cublas_min_m = o.cublas_min_m;
    stages_override = o.min_stages;
    plan.overlap = o.overlap;
  }
  // The default choice, from the H200 sweeps of every variant on PERF.md's shapes (README.md,
  // "Results"): the GEMV variants up to M = 32 (v1 reads the weights once per 8 rows, v2 and v4
  // hold 16 and 32 rows and fewer warps per SM, v2u2 16 rows with half the weights in flight
  // and as many warps as v1: which wins depends on the shape), the tiled
  // s4 / s8 up to 64; above, dequantize + cuBLAS, except the 64x64-warp-tile kernel l for
  // M <= 128 on layers of 96 M weights or more, where it was faster. Without cuBLAS: l above 64.
  const int64_t weights = p.k * p.n;
  const bool cublas_ok = cublas_min_m > 0 && m >= cublas_min_m && !(m <= 128 && weights >= (int64_t(96) << 20));
  if (forced >= 0) {
    plan.kernel = forced;
  } else if (m <= 8) {
    plan.kernel = kV1;
  } else if (m <= 16) {
    // Run 8's sweep (M = 12, 16): v2u2 beat v1 and v2 on every layer of 32 M weights or more.
    plan.kernel = weights >= (int64_t(32) << 20) ? kV2u2 : kV1;
  } else if (m <= 32) {
    if (p.k >= 8192 && p.n >= 8192)
      plan.kernel = p.n >= 10240 && p.k < 16384 ? kV2 : kV4;
    else
      plan.kernel = weights >= (int64_t(48) << 20) ? kV4 : kV1;
  } else if (m <= 64) {
    plan.kernel = weights < (int64_t(64) << 20) ? kS4 : kS8;
  } else if (cublas_ok && cublas_available(nullptr)) {
    plan.kernel = kNumKernels;
  } else {
    plan.kernel = kL;
  }
  if (plan.kernel == kNumKernels) return plan;
  const KernelInfo& ki = d.info[p.act == Act::f16 ? 0 : 1][plan.kernel];
  plan.m_tiles = int32_t((m + ki.bm - 1) / ki.bm);
  plan.n_tiles = int32_t(p.n_pad / ki.bn);
  if (is_gemv(plan.kernel)) {
    // K splits. Blocks run in waves of ki.slots, so the time is about
    //   waves(s) * (batches per warp + fixed cost),  waves(s) = ceil(tiles * s / slots),
    // the fixed cost (launch, block sum, split fix-up) taken as 4 batches. The split with the
    // least is used, with at least one batch per warp (or `min_stages` batches if set).
    const int64_t tiles = int64_t(plan.m_tiles) * plan.n_tiles, slots = std::max(1, ki.slots);
    const int64_t batches = (p.ku + ki.step_units - 1) / ki.step_units;
    const int64_t warps = ki.threads / 32;
    if (stages_override > 0) {
      plan.grid = int(std::clamp<int64_t>(batches / (warps * stages_override), 1, 65535));
      return plan;
    }
    const int64_t most = std::clamp<int64_t>(batches / warps, 1, 1024);
    double best = 0;
    for (int64_t sp = 1; sp <= most; ++sp) {
      const double t = double((tiles * sp + slots - 1) / slots) * (double(batches) / double(warps * sp) + 4.0);
      if (sp == 1 || t < best) best = t, plan.grid = int(sp);
    }
    return plan;
  }
  const int64_t work = int64_t(plan.m_tiles) * plan.n_tiles * p.kt;  // < 2^31: checked in apply()
  int64_t grid = std::max<int64_t>(1, work / (stages_override > 0 ? stages_override : min_stages(plan.kernel)));
  grid = std::min<int64_t>(grid, std::max(1, ki.slots));
  plan.grid = int(std::min<int64_t>(grid, work));
  return plan;
}

// ---- ABI functions ------------------------------------------------------------------------------

int32_t probe(char* msg, size_t cap) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no CUDA driver (or one older than the runtime): cudaGetDeviceCount: %s",
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
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "device %d (%s) is sm_%d%d; cuda_w4a16 needs sm_80 or newer", dev,
                prop.name, prop.major, prop.minor);
  return fail(NIBBLE_OK, msg, cap, "%s, sm_%d%d, %d SMs, %.0f GiB (device %d of %d)", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, double(prop.totalGlobalMem) / (1u << 30), dev, count);
}

int32_t can_implement(const nibble_linear_spec* s, char* msg, size_t cap) {
  if (int32_t st = plugin::check_caps(kCaps, s, msg, cap)) return st;
  if (s->k > (int64_t(1) << 20) || s->n > (int64_t(1) << 30))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "K above 2^20 or N above 2^30 (K=%lld N=%lld)", (long long)s->k,
                (long long)s->n);
  return NIBBLE_OK;
}

size_t dtype_size(int32_t d) { return d == NIBBLE_DTYPE_F32 ? 4 : 2; }

int32_t process_weights(const nibble_linear_spec* s, const nibble_canonical_weights* cw, void* stream_v,
                        nibble_prepared** out, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!out || !cw) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
    *out = nullptr;
    if (int32_t st = can_implement(s, msg, cap)) return st;
    const bool zp = s->weight_type == NIBBLE_WT_UINT4;
    if (!cw->qweight || !cw->scales)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': qweight or scales missing", s->layer_name);
    if (zp != (cw->zeros != nullptr))
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': zeros %s for weight type %s", s->layer_name,
                  zp ? "missing" : "present", zp ? "uint4" : "uint4b8");
    if (bool(s->act_order) != (cw->g_idx != nullptr))
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': g_idx %s but act_order=%d", s->layer_name,
                  cw->g_idx ? "present" : "missing", s->act_order);
    if (bool(s->has_bias) != (cw->bias != nullptr))
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': bias %s but has_bias=%d", s->layer_name,
                  cw->bias ? "present" : "missing", s->has_bias);
    const cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    auto p = std::make_unique<Prepared>();
    p->spec = *s;
    p->spec.layer_name = nullptr;  // borrowed from the host; not kept
    p->act = s->act_dtype == NIBBLE_DTYPE_BF16 ? Act::bf16 : Act::f16;
    p->k = s->k;
    p->n = s->n;
    p->act_order = s->act_order != 0;
    NIBBLE_CUDA_TRY(cudaGetDevice(&p->device));
    const DeviceState* dev = nullptr;
    if (int32_t st = device_state(p->device, &dev, msg, cap)) return st;

    // Scales must be finite in the activation dtype (fp16 tops out at 65504).
    const int64_t groups = spec_groups(*s);
    const float limit = p->act == Act::f16 ? 65504.f : 3.0e38f;
    for (int64_t i = 0; i < groups * s->n; ++i) {
      float v;
      if (s->scale_dtype == NIBBLE_DTYPE_F32) {
        v = static_cast<const float*>(cw->scales)[i];
      } else {
        const uint16_t b = static_cast<const uint16_t*>(cw->scales)[i];
        if (s->scale_dtype == NIBBLE_DTYPE_BF16) {
          const uint32_t u = uint32_t(b) << 16;
          std::memcpy(&v, &u, 4);
        } else {
          v = (b & 0x7c00) == 0x7c00 ? INFINITY : 0.f;  // only range matters here: fp16 is in range
        }
      }
      if (!(std::fabs(v) <= limit))
        return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap,
                    "layer '%s': scale %g at group %lld, column %lld does not fit %s activations", s->layer_name,
                    double(v), (long long)(i / s->n), (long long)(i % s->n), plugin::dtype_str(s->act_dtype));
    }

    // Packed row order, group length and the canonical group of each packed group (layout.h).
    std::vector<int32_t> perm, gmap;
    if (p->act_order) {
      std::vector<std::vector<int32_t>> rows(static_cast<size_t>(groups));
      for (int64_t r = 0; r < s->k; ++r) {
        const int32_t g = cw->g_idx[r];
        if (g < 0 || g >= groups)
          return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "layer '%s': g_idx[%lld] = %d, expected 0..%lld",
                      s->layer_name, (long long)r, g, (long long)groups - 1);
        rows[size_t(g)].push_back(int32_t(r));
      }
      size_t longest = 1;
      for (const auto& v : rows) longest = std::max(longest, v.size());
      p->g_eff = int32_t(round_up(int64_t(longest), kGroupAlign));
      std::vector<int32_t> kept;  // non-empty groups only (row-parallel shards may have empty ones)
      for (int64_t g = 0; g < groups; ++g)
        if (!rows[size_t(g)].empty()) kept.push_back(int32_t(g));
      p->k_pad = round_up(int64_t(kept.size()) * p->g_eff, kTileK);
      perm.assign(size_t(p->k_pad), -1);
      for (size_t gi = 0; gi < kept.size(); ++gi) {
        const auto& v = rows[size_t(kept[gi])];
        for (size_t j = 0; j < v.size(); ++j) perm[gi * size_t(p->g_eff) + j] = v[j];
      }
      p->groups_pad = int32_t((p->k_pad + p->g_eff - 1) / p->g_eff);
      gmap.assign(size_t(p->groups_pad), -1);
      for (size_t gi = 0; gi < kept.size(); ++gi) gmap[gi] = kept[gi];
    } else {
      p->k_pad = round_up(s->k, kTileK);
      p->g_eff = s->group_size > 0 ? s->group_size : int32_t(p->k_pad);
      p->groups_pad = int32_t((p->k_pad + p->g_eff - 1) / p->g_eff);
      gmap.resize(size_t(p->groups_pad));
      for (int32_t g = 0; g < p->groups_pad; ++g) gmap[size_t(g)] = g < groups ? g : -1;
    }
    p->n_pad = round_up(s->n, kNPad);
    p->strips = int32_t(p->n_pad / kStripN);
    p->ku = int32_t(p->k_pad / kUnitK);
    p->kt = int32_t(p->k_pad / kTileK);
    // Group of a k-unit by multiply-high (kernels.h, GemmParams::g_magic): exact while
    // ku * units_per_group < 2^32, which K <= 2^20 guarantees.
    const uint64_t upg = uint64_t(p->g_eff / kUnitK);
    if (uint64_t(p->ku) * upg >= (uint64_t(1) << 32))
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "layer '%s': K_pad %lld with groups of %d rows is too large",
                  s->layer_name, (long long)p->k_pad, p->g_eff);
    p->g_magic = upg == 1 ? 0u : uint32_t((uint64_t(1) << 32) / upg + 1);

    // Upload the canonical tensors, repack on the device, free the uploads.
    const size_t qw_bytes = size_t((s->k + 7) / 8) * size_t(s->n) * 4;
    const size_t sc_bytes = size_t(groups) * size_t(s->n) * dtype_size(s->scale_dtype);
    DeviceBuffer d_qw, d_sc, d_z, d_gmap;
    NIBBLE_CUDA_TRY(d_qw.alloc(qw_bytes));
    NIBBLE_CUDA_TRY(d_sc.alloc(sc_bytes));
    NIBBLE_CUDA_TRY(d_gmap.alloc(gmap.size() * 4));
    NIBBLE_CUDA_TRY(cudaMemcpyAsync(d_qw.p, cw->qweight, qw_bytes, cudaMemcpyHostToDevice, stream));
    NIBBLE_CUDA_TRY(cudaMemcpyAsync(d_sc.p, cw->scales, sc_bytes, cudaMemcpyHostToDevice, stream));
    NIBBLE_CUDA_TRY(cudaMemcpyAsync(d_gmap.p, gmap.data(), gmap.size() * 4, cudaMemcpyHostToDevice, stream));
    if (zp) {
      NIBBLE_CUDA_TRY(d_z.alloc(size_t(groups) * size_t(s->n)));
      NIBBLE_CUDA_TRY(cudaMemcpyAsync(d_z.p, cw->zeros, size_t(groups) * size_t(s->n), cudaMemcpyHostToDevice, stream));
    }
    if (p->act_order) {
      NIBBLE_CUDA_TRY(p->perm.alloc(perm.size() * 4));
      NIBBLE_CUDA_TRY(cudaMemcpyAsync(p->perm.p, perm.data(), perm.size() * 4, cudaMemcpyHostToDevice, stream));
    }
    if (s->has_bias) {
      NIBBLE_CUDA_TRY(p->bias.alloc(size_t(s->n) * 2));
      NIBBLE_CUDA_TRY(cudaMemcpyAsync(p->bias.p, cw->bias, size_t(s->n) * 2, cudaMemcpyHostToDevice, stream));
    }
    NIBBLE_CUDA_TRY(p->w.alloc(size_t(p->strips) * size_t(p->ku) * 512));
    NIBBLE_CUDA_TRY(p->scale_rec.alloc(size_t(p->groups_pad) * size_t(p->strips) * 64));
    if (zp) NIBBLE_CUDA_TRY(p->zero_rec.alloc(size_t(p->groups_pad) * size_t(p->strips) * 32));
    NIBBLE_CUDA_TRY(launch_repack_weights(static_cast<const uint32_t*>(d_qw.p), s->k, s->n,
                                          static_cast<const int32_t*>(p->perm.p), p->strips, p->ku, p->w.p, stream));
    NIBBLE_CUDA_TRY(launch_repack_records(d_sc.p, s->scale_dtype, static_cast<const uint8_t*>(d_z.p), s->n,
                                          static_cast<const int32_t*>(d_gmap.p), p->groups_pad, p->strips, p->act,
                                          p->scale_rec.p, static_cast<uint8_t*>(p->zero_rec.p), stream));
    NIBBLE_CUDA_TRY(cudaStreamSynchronize(stream));  // the host tensors and the uploads are released next
    *out = reinterpret_cast<nibble_prepared*>(p.release());
    return NIBBLE_OK;
  });
}

int32_t apply_cublas(const Prepared& p, const void* xk, int64_t kx, int64_t m, void* y, Workspace& ws,
                     cudaStream_t stream, char* msg, size_t cap) {
  // Dequantize column chunks of at most ~128 MiB into a dense temporary and multiply each with
  // cuBLAS (exllama's large-batch path): at large M the GEMM dominates and the dequantization adds
  // 2.5 bytes per weight of traffic.
  int64_t nc = std::max<int64_t>(kNPad, (int64_t(128) << 20) / (p.k_pad * 2) / kNPad * kNPad);
  nc = std::min(nc, p.n_pad);
  if (int32_t st = ensure(ws.dense, size_t(p.k_pad) * size_t(nc) * 2, false, stream, msg, cap)) return st;
  for (int64_t n0 = 0; n0 < p.n; n0 += nc) {
    const int64_t cols = std::min(nc, p.n_pad - n0);
    NIBBLE_CUDA_TRY(launch_dequant_dense(p.w.p, p.scale_rec.p, static_cast<const uint8_t*>(p.zero_rec.p), p.strips,
                                         p.ku, p.g_magic, int32_t(n0), int32_t(cols), p.act, ws.dense.p, stream));
    std::string why;
    const int64_t ncols = std::min(cols, p.n - n0);
    if (cublas_gemm_rowmajor(int32_t(p.act), m, ncols, kx, xk, ws.dense.p, cols,
                             static_cast<char*>(y) + n0 * 2, p.n, stream, &why))
      return fail(NIBBLE_ERR_DEVICE, msg, cap, "%s", why.c_str());
  }
  if (p.bias.p) NIBBLE_CUDA_TRY(launch_add_bias(y, p.bias.p, m, p.n, p.act, stream));
  return NIBBLE_OK;
}

int32_t apply(const nibble_prepared* h, const nibble_tensor* x, nibble_tensor* y, void* stream_v, char* msg,
              size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
    const Prepared& p = *reinterpret_cast<const Prepared*>(h);
    if (int32_t st = plugin::check_io(x, "x", p.spec.act_dtype, p.k, -1, msg, cap)) return st;
    const int64_t m = x->shape[0];
    if (int32_t st = plugin::check_io(y, "y", p.spec.act_dtype, p.n, m, msg, cap)) return st;
    if (m > INT32_MAX) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "M=%lld above 2^31", (long long)m);
    const cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
    int dev = 0;
    NIBBLE_CUDA_TRY(cudaGetDevice(&dev));
    if (dev != p.device)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "weights live on device %d, current device is %d", p.device,
                  dev);
    const DeviceState* d = nullptr;
    if (int32_t st = device_state(dev, &d, msg, cap)) return st;
    const Plan plan = make_plan(p, *d, m);

    Workspace& ws = workspace(dev, stream_v);
    std::lock_guard<std::mutex> lock(ws.mu);
    // x as the kernels read it: rows 16-byte aligned, in packed row order. Act order gathers
    // (permuted columns, zeros for padding rows); an odd K or pointer only pads.
    const void* xk = x->data;
    int64_t ldx = p.k, kx = p.k;
    const bool need_prep = p.act_order || (p.k % 8) != 0 || (reinterpret_cast<uintptr_t>(x->data) % 16) != 0;
    if (need_prep) {
      const int64_t kp = p.act_order ? p.k_pad : round_up(p.k, 8);
      if (int32_t st = ensure(ws.xbuf, size_t(m) * size_t(kp) * 2, false, stream, msg, cap)) return st;
      NIBBLE_CUDA_TRY(launch_prep_x(x->data, m, p.k, static_cast<const int32_t*>(p.perm.p), kp, ws.xbuf.p, stream));
      xk = ws.xbuf.p;
      ldx = kx = kp;
    }
    if (plan.kernel == kNumKernels) return apply_cublas(p, xk, kx, m, y->data, ws, stream, msg, cap);

    const KernelInfo& ki = d->info[p.act == Act::f16 ? 0 : 1][plan.kernel];
    const bool gemv = is_gemv(plan.kernel);
    if (int64_t(plan.m_tiles) * plan.n_tiles * p.kt >= (int64_t(1) << 31) || (gemv && plan.m_tiles > 65535))
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "M=%lld x N=%lld x K=%lld is too large for one launch of %s",
                  (long long)m, (long long)p.n, (long long)p.k, ki.name);
    const size_t part_bytes = gemv ? (plan.grid > 1 ? size_t(plan.grid) * size_t(m) * size_t(p.n_pad) * 4 : 4)
                                   : size_t(2) * size_t(plan.grid) * size_t(ki.bm) * size_t(ki.bn) * 4;
    const size_t cnt_bytes = size_t(plan.m_tiles) * size_t(plan.n_tiles) * 4;
    if (int32_t st = ensure(ws.partials, part_bytes, false, stream, msg, cap)) return st;
    if (int32_t st = ensure(ws.counters, cnt_bytes, true, stream, msg, cap)) return st;

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
    gp.n = int32_t(p.n);
    gp.strips = p.strips;
    gp.ku = p.ku;
    gp.kt = p.kt;
    gp.g_magic = p.g_magic;
    gp.m_tiles = plan.m_tiles;
    gp.n_tiles = plan.n_tiles;
    gp.evict_first = plan.m_tiles == 1;  // weights read once per call
    gp.overlap = gemv && d->cc_major >= 9 && plan.overlap;
    const cudaError_t e = launch_gemm(KernelId(plan.kernel), p.act, gp, plan.grid, stream);
    if (e != cudaSuccess) {
      // A failed launch may leave arrival counters non-zero: clear them for the next call.
      cudaMemsetAsync(ws.counters.p, 0, ws.counters.bytes, stream);
      return fail(cuda_status(e), msg, cap, "w4a16 kernel %s launch (grid %d, M=%lld) failed: %s", ki.name,
                  plan.grid, (long long)m, cudaGetErrorString(e));
    }
    return NIBBLE_OK;
  });
}

void release(nibble_prepared* h) { delete reinterpret_cast<Prepared*>(h); }

int32_t describe_kernel(const nibble_prepared* h, int64_t m, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h || m < 1) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null handle or M < 1");
    const Prepared& p = *reinterpret_cast<const Prepared*>(h);
    const DeviceState* d = nullptr;
    if (int32_t st = device_state(p.device, &d, msg, cap)) return st;
    const Plan plan = make_plan(p, *d, m);
    if (plan.kernel == kNumKernels) return fail(NIBBLE_OK, msg, cap, "dequant+cublas");
    const KernelInfo& ki = d->info[p.act == Act::f16 ? 0 : 1][plan.kernel];
    if (is_gemv(plan.kernel))
      return fail(NIBBLE_OK, msg, cap, "%s (GEMV, BN %d x BM %d, %d x %d tiles, %d K splits)", ki.name, ki.bn, ki.bm,
                  plan.n_tiles, plan.m_tiles, plan.grid);
    return fail(NIBBLE_OK, msg, cap, "%s (BN %d x BM %d, stream-K grid %d)", ki.name, ki.bn, ki.bm, plan.grid);
  });
}

int32_t device_alloc(size_t bytes, void** ptr, char* msg, size_t cap) {
  if (!ptr) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null output pointer");
  *ptr = nullptr;
  NIBBLE_CUDA_TRY(cudaMalloc(ptr, bytes ? bytes : 1));
  return NIBBLE_OK;
}
void device_free(void* p) {
  if (p) cudaFree(p);
}
int32_t device_copy(void* dst, const void* src, size_t bytes, int32_t kind, void* stream, char* msg, size_t cap) {
  if ((!dst || !src) && bytes) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null pointer in copy");
  cudaMemcpyKind k;
  switch (kind) {
    case NIBBLE_COPY_HOST_TO_DEVICE: k = cudaMemcpyHostToDevice; break;
    case NIBBLE_COPY_DEVICE_TO_HOST: k = cudaMemcpyDeviceToHost; break;
    case NIBBLE_COPY_DEVICE_TO_DEVICE: k = cudaMemcpyDeviceToDevice; break;
    default: return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "unknown copy kind %d", kind);
  }
  if (bytes) NIBBLE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream)));
  return NIBBLE_OK;
}
int32_t device_sync(void* stream, char* msg, size_t cap) {
  NIBBLE_CUDA_TRY(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return NIBBLE_OK;
}

int32_t set_option(const char* key, const char* value, char* msg, size_t cap) {
  if (!key || !value) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null option");
  Options& o = options();
  std::lock_guard<std::mutex> lock(o.mu);
  const std::string k = key, v = value;
  if (k == "kernel") {
    if (v == "auto") {
      o.forced = -1;
      return NIBBLE_OK;
    }
    if (v == "cublas") {
      std::string why;
      if (!cublas_available(&why)) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "kernel=cublas: %s", why.c_str());
      o.forced = kNumKernels;
      return NIBBLE_OK;
    }
    for (int i = 0; i < kNumKernels; ++i)
      if (v == kKernelNames[i]) {
        o.forced = i;
        return NIBBLE_OK;
      }
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "kernel: expected auto, s1, s2, s4, s8, l, v1, v2, v4, v2u2 or cublas, found '%s'",
                value);
  }
  if (k == "cublas_min_m") {
    char* end = nullptr;
    const long long n = std::strtoll(value, &end, 10);
    if (!end || *end || n < 0)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "cublas_min_m: expected an integer >= 0, found '%s'", value);
    o.cublas_min_m = n;
    return NIBBLE_OK;
  }
  if (k == "overlap") {
    if (v != "0" && v != "1") return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "overlap: expected 0 or 1, found '%s'", value);
    o.overlap = v == "1";
    return NIBBLE_OK;
  }
  if (k == "min_stages") {
    char* end = nullptr;
    const long n = std::strtol(value, &end, 10);
    if (!end || *end || n < 0 || n > 1 << 20)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "min_stages: expected 0 (default) or a count of k stages, found '%s'",
                  value);
    o.min_stages = int(n);
    return NIBBLE_OK;
  }
  return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "unknown option '%s' (known: kernel, cublas_min_m, overlap, min_stages)", key);
}

// ---- dense baseline (cuBLAS) ----------------------------------------------------------------------

struct Dense {
  int64_t k = 0, n = 0;
  int32_t dtype = 0;
  DeviceBuffer w;  // [K][N] act dtype
};

int32_t dense_prepare(const nibble_linear_spec* s, const void* weight_kn, void* stream, nibble_dense** out, char* msg,
                      size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!s || !weight_kn || !out) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
    *out = nullptr;
    if (s->act_dtype != NIBBLE_DTYPE_F16 && s->act_dtype != NIBBLE_DTYPE_BF16)
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "dense baseline: f16 or bf16 only, not %s",
                  plugin::dtype_str(s->act_dtype));
    std::string why;
    if (!cublas_available(&why)) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "dense baseline: %s", why.c_str());
    auto d = std::make_unique<Dense>();
    d->k = s->k;
    d->n = s->n;
    d->dtype = s->act_dtype;
    const size_t bytes = size_t(s->k) * size_t(s->n) * 2;
    NIBBLE_CUDA_TRY(d->w.alloc(bytes));
    NIBBLE_CUDA_TRY(cudaMemcpyAsync(d->w.p, weight_kn, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
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
    if (cublas_gemm_rowmajor(d.dtype, x->shape[0], d.n, d.k, x->data, d.w.p, d.n, y->data, d.n,
                             static_cast<cudaStream_t>(stream), &why))
      return fail(NIBBLE_ERR_DEVICE, msg, cap, "dense baseline: %s", why.c_str());
    return NIBBLE_OK;
  });
}

void dense_release(nibble_dense* h) { delete reinterpret_cast<Dense*>(h); }

// ---- timing ---------------------------------------------------------------------------------------

int32_t time_device(void (*fn)(void*, int32_t), void* ctx, int32_t iters, void* stream_v, double* ms, char* msg,
                    size_t cap) {
  if (!fn || !ms || iters < 1) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null callback/output or iters < 1");
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
  cudaEvent_t a = nullptr, b = nullptr;
  NIBBLE_CUDA_TRY(cudaEventCreate(&a));
  if (cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    cudaEventDestroy(a);
    return fail(cuda_status(e), msg, cap, "cudaEventCreate failed: %s", cudaGetErrorString(e));
  }
  struct Events {  // destroyed on every path
    cudaEvent_t a, b;
    ~Events() {
      cudaEventDestroy(a);
      cudaEventDestroy(b);
    }
  } guard{a, b};
  NIBBLE_CUDA_TRY(cudaEventRecord(a, stream));
  for (int32_t i = 0; i < iters; ++i) fn(ctx, i);
  NIBBLE_CUDA_TRY(cudaEventRecord(b, stream));
  NIBBLE_CUDA_TRY(cudaEventSynchronize(b));
  float f = 0;
  NIBBLE_CUDA_TRY(cudaEventElapsedTime(&f, a, b));
  *ms = f;
  return NIBBLE_OK;
}

// Device-to-device copy of `bytes`, counting bytes read plus bytes written (PERF.md's "BW"): the
// median of 5 timed copies after a warm-up.
int32_t measure_bandwidth(size_t bytes, void* stream_v, double* bps, char* msg, size_t cap) {
  if (!bps || bytes < 1024) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null output or buffer under 1 KiB");
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_v);
  DeviceBuffer a, b;
  NIBBLE_CUDA_TRY(a.alloc(bytes));
  NIBBLE_CUDA_TRY(b.alloc(bytes));
  NIBBLE_CUDA_TRY(cudaMemsetAsync(a.p, 1, bytes, stream));
  struct Ctx {
    void *dst, *src;
    size_t n;
    cudaStream_t s;
  } ctx{b.p, a.p, bytes, stream};
  auto copy = [](void* c, int32_t) {
    auto* x = static_cast<Ctx*>(c);
    cudaMemcpyAsync(x->dst, x->src, x->n, cudaMemcpyDeviceToDevice, x->s);
  };
  double ms = 0;
  std::vector<double> t;
  for (int i = 0; i < 6; ++i) {
    if (int32_t st = time_device(copy, &ctx, 1, stream_v, &ms, msg, cap)) return st;
    NIBBLE_CUDA_TRY(cudaGetLastError());
    if (i) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  *bps = 2.0 * double(bytes) / (t[t.size() / 2] * 1e-3);
  return NIBBLE_OK;
}

const nibble_plugin_api kApi = {
    /* .abi_version = */ NIBBLE_ABI_VERSION,
    /* .struct_size = */ sizeof(nibble_plugin_api),
    /* .name = */ "cuda_w4a16",
    /* .version = */ NIBBLE_VERSION_STRING,
    /* .platform = */ "cuda",
    /* .description = */ "W4A16 on NVIDIA GPUs (sm_80+, tuned for sm_90): stream-K mma.sync kernels",
    /* .priority = */ 20,
    /* .caps = */ kCaps,
    /* .probe = */ probe,
    /* .can_implement = */ can_implement,
    /* .process_weights = */ process_weights,
    /* .apply = */ apply,
    /* .release = */ release,
    /* .device_alloc = */ device_alloc,
    /* .device_free = */ device_free,
    /* .device_copy = */ device_copy,
    /* .device_sync = */ device_sync,
    /* .set_option = */ set_option,
    /* .dense_prepare = */ dense_prepare,
    /* .dense_apply = */ dense_apply,
    /* .dense_release = */ dense_release,
    /* .time_device = */ time_device,
    /* .describe_kernel = */ describe_kernel,
    /* .measure_bandwidth = */ measure_bandwidth,
};

}  // namespace

// Also called directly by bench_kernels.cu (linked with the same objects).
const nibble_plugin_api* entry(uint32_t host_abi) { return host_abi == NIBBLE_ABI_VERSION ? &kApi : nullptr; }

}  // namespace nibble::cuda

BOOST_DLL_ALIAS(nibble::cuda::entry, nibble_plugin_entry)
