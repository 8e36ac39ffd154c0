// rocm_w4a16: the ROCm backend plugin (HIP). This file is the ABI glue: capabilities, probe,
// can_implement, process_weights (host layout from rocm_layout.cpp, then one upload), apply (the
// kernels of kernels.hip). Device memory, event timing, the bandwidth probe and the ABI table come
// from the shared GPU skeleton (plugins/common/gpu_plugin.h).
//
// The same file builds the test-only rocm_w4a16_on_cuda plugin: with NIBBLE_HIP_ON_CUDA,
// gpu_vendor.h maps every hip* name used here onto CUDA's, and only the identity strings differ.
#include <algorithm>
#include <boost/dll/alias.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_plugin.h"
#include "gpu_vendor.h"
#include "kernels.h"
#include "nibble/plugin_abi.h"
#include "nibble_planes.h"
#include "plugin_support.h"
#include "rocm_layout.h"

#if defined(NIBBLE_HIP_ON_CUDA)
#define NIBBLE_ROCM_PLUGIN_NAME "rocm_w4a16_on_cuda"
#define NIBBLE_ROCM_PLATFORM "cuda"
#define NIBBLE_ROCM_DESCRIPTION \
  "rocm_w4a16's HIP kernel source compiled by nvcc (test-only: checks the ROCm kernels on NVIDIA)"
#define NIBBLE_ROCM_PRIORITY 0
#else
#define NIBBLE_ROCM_PLUGIN_NAME "rocm_w4a16"
#define NIBBLE_ROCM_PLATFORM "rocm"
#define NIBBLE_ROCM_DESCRIPTION                                                                              \
  "W4A16 on AMD GPUs (HIP; CDNA wave64 and RDNA wave32): streaming GEMV for M <= 16, tiled fp32 for larger " \
  "M"
#define NIBBLE_ROCM_PRIORITY 20
#endif

#ifndef NIBBLE_HIP_TARGETS
#define NIBBLE_HIP_TARGETS "?"
#endif

namespace nibble::rocm {
namespace {

using plugin::fail;
using plugin::guarded;

// The HIP runtime, for the shared GPU skeleton (gpu_plugin.h). With NIBBLE_HIP_ON_CUDA every hip*
// name below is CUDA's (gpu_vendor.h).
struct HipRuntime {
  using Error = hipError_t;
  using Stream = hipStream_t;
  using Event = hipEvent_t;
  static constexpr Error kSuccess = hipSuccess;
  static Error malloc(void** p, size_t n) { return hipMalloc(p, n); }
  static Error free(void* p) { return hipFree(p); }
  static Error memset_async(void* p, int v, size_t n, Stream s) { return hipMemsetAsync(p, v, n, s); }
  static Error memcpy_async(void* d, const void* s, size_t n, int32_t kind, Stream st) {
    const hipMemcpyKind k = kind == NIBBLE_COPY_HOST_TO_DEVICE   ? hipMemcpyHostToDevice
                            : kind == NIBBLE_COPY_DEVICE_TO_HOST ? hipMemcpyDeviceToHost
                                                                 : hipMemcpyDeviceToDevice;
    return hipMemcpyAsync(d, s, n, k, st);
  }
  static Error stream_sync(Stream s) { return hipStreamSynchronize(s); }
  static Error event_create(Event* e) { return hipEventCreate(e); }
  static Error event_destroy(Event e) { return hipEventDestroy(e); }
  static Error event_record(Event e, Stream s) { return hipEventRecord(e, s); }
  static Error event_sync(Event e) { return hipEventSynchronize(e); }
  static Error event_elapsed_ms(float* ms, Event a, Event b) { return hipEventElapsedTime(ms, a, b); }
  static Error last_error() { return hipGetLastError(); }
  static const char* error_string(Error e) { return hipGetErrorString(e); }
  static int32_t status(Error e) {
    if (e == hipErrorMemoryAllocation) return NIBBLE_ERR_OUT_OF_MEMORY;
    if (e == hipErrorNoDevice) return NIBBLE_ERR_NO_DEVICE;
    return NIBBLE_ERR_DEVICE;
  }
};
#define ROCM_TRY(call) NIBBLE_GPU_TRY(HipRuntime, call)

#if defined(NIBBLE_HIP_ON_CUDA)
constexpr uint32_t kMinDeviceLevel = 80;  // built for sm_80 and sm_90
#else
constexpr uint32_t kMinDeviceLevel = 0;  // whatever hip_targets names; probe() checks the code object
#endif
// 8 bits run on the 4-bit kernels as two nibble planes (plugins/common/nibble_planes.h).
constexpr uint32_t kBits = (1u << 4) | (1u << 8);
const nibble_capabilities kCaps =
    plugin::gpu_capabilities(plugin::weight_types_of_bits(kBits), kBits, kMinDeviceLevel);

int32_t probe(char* msg, size_t cap) {
  int count = 0;
  const hipError_t e = hipGetDeviceCount(&count);
#if defined(NIBBLE_HIP_ON_CUDA)
  if (e == hipErrorNoDevice || (e == hipSuccess && count == 0))
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no CUDA device");
  if (e != hipSuccess)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no CUDA driver (cudaGetDeviceCount: %s)",
                hipGetErrorString(e));
#else
  if (e != hipSuccess)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no AMD GPU (hipGetDeviceCount: %s)", hipGetErrorString(e));
  if (count == 0) return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no AMD GPU");
#endif
  int dev = 0;
  hipDeviceProp_t prop{};
  if (hipGetDevice(&dev) != hipSuccess || hipGetDeviceProperties(&prop, dev) != hipSuccess)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "%s found but its properties cannot be read",
                NIBBLE_GPU_KIND);
#if defined(NIBBLE_HIP_ON_CUDA)
  if (prop.major < 8)
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "%s is sm_%d%d; this build needs sm_80 or newer", prop.name,
                prop.major, prop.minor);
  char arch[32];
  std::snprintf(arch, sizeof arch, "sm_%d%d", prop.major, prop.minor);
  const char* built_for = "sm_80,sm_90";
#else
  const char* arch = prop.gcnArchName;
  const char* built_for = NIBBLE_HIP_TARGETS;
#endif
  if (kernels_available(msg, cap) != NIBBLE_OK) {
    // Keep the runtime's words and say what to do about it.
    std::string why = msg;
    return fail(NIBBLE_ERR_NO_DEVICE, msg, cap,
                "%s (%s): %s; built for %s, rebuild with the device's target%s", prop.name, arch, why.c_str(),
                built_for,
#if defined(NIBBLE_HIP_ON_CUDA)
                ""
#else
                " (meson -Dhip_targets=...)"
#endif
    );
  }
  return fail(NIBBLE_OK, msg, cap, "%s (%s), %d compute units, %.0f GiB, warp %d", prop.name, arch,
              prop.multiProcessorCount, double(prop.totalGlobalMem) / double(1ull << 30), prop.warpSize);
}

int32_t can_implement(const nibble_linear_spec* s, char* msg, size_t cap) {
  if (int32_t st = plugin::check_caps(kCaps, s, msg, cap)) return st;
  // Lines and byte offsets are 32-bit inside the kernels.
  if (s->k > (int64_t(1) << 28) || s->n > (int64_t(1) << 30))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "K above 2^28 or N above 2^30 (K=%lld N=%lld)",
                (long long)s->k, (long long)s->n);
  if (s->act_order && s->parallel == NIBBLE_PARALLEL_ROW && s->full_k > (int64_t(1) << 28))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "full K above 2^28 (%lld)", (long long)s->full_k);
  return NIBBLE_OK;
}

/// A prepared layer: one device allocation holding every array of the layout.
struct Prepared {
  nibble_linear_spec spec{};
  DeviceWeights w;
  void* block = nullptr;
  ~Prepared() {
    if (block) (void)hipFree(block);
  }
};

int32_t process_weights(const nibble_linear_spec* s, const nibble_canonical_weights* cw, void* stream,
                        nibble_prepared** out, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!out || !cw) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
    *out = nullptr;
    if (int32_t st = can_implement(s, msg, cap)) return st;
    HostLayout h;
    try {
      h = make_layout(*s, *cw);  // 8 bits: as nibble planes (rocm_layout.cpp)
    } catch (const std::invalid_argument& e) {
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "%s", e.what());
    }
    // One allocation, each array at a 256-byte boundary (the kernels read records with 16-byte loads).
    struct Part {
      const void* src;
      size_t bytes;
      size_t offset;
    };
    auto bytes_of = [](const auto& v) { return v.size() * sizeof(v[0]); };
    Part parts[] = {{h.codes.data(), bytes_of(h.codes), 0},
                    {h.scales.data(), bytes_of(h.scales), 0},
                    {h.zeros.data(), bytes_of(h.zeros), 0},
                    {h.row_src.data(), bytes_of(h.row_src), 0},
                    {h.bias.data(), bytes_of(h.bias), 0}};
    size_t total = 0;
    for (Part& p : parts) {
      p.offset = total;
      total += (p.bytes + 255) / 256 * 256;
    }
    auto p = std::make_unique<Prepared>();
    p->spec = *s;
    p->spec.layer_name = nullptr;  // borrowed from the host; not kept
    ROCM_TRY(hipMalloc(&p->block, total));
    auto* base = static_cast<char*>(p->block);
    hipStream_t st = static_cast<hipStream_t>(stream);
    for (const Part& part : parts)
      if (part.bytes)
        ROCM_TRY(hipMemcpyAsync(base + part.offset, part.src, part.bytes, hipMemcpyHostToDevice, st));
    // The host arrays die with this call: wait for the copies.
    ROCM_TRY(hipStreamSynchronize(st));
    p->w.d = h.d;
    p->w.codes = reinterpret_cast<const uint32_t*>(base + parts[0].offset);
    p->w.scales = reinterpret_cast<const float*>(base + parts[1].offset);
    p->w.zeros = reinterpret_cast<const uint16_t*>(base + parts[2].offset);
    p->w.row_src = h.row_src.empty() ? nullptr : reinterpret_cast<const int32_t*>(base + parts[3].offset);
    p->w.bias = h.bias.empty() ? nullptr : reinterpret_cast<const float*>(base + parts[4].offset);
    *out = reinterpret_cast<nibble_prepared*>(p.release());
    return NIBBLE_OK;
  });
}

int32_t apply(const nibble_prepared* handle, const nibble_tensor* x, nibble_tensor* y, void* stream,
              char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!handle) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
    const auto& p = *reinterpret_cast<const Prepared*>(handle);
    if (int32_t st = plugin::check_io(x, "x", p.spec.act_dtype, p.w.d.k, -1, msg, cap)) return st;
    const int64_t m = x->shape[0];
    if (int32_t st = plugin::check_io(y, "y", p.spec.act_dtype, p.w.d.n, m, msg, cap)) return st;
    MatmulArgs a;
    a.w = &p.w;
    a.x = x->data;
    a.y = y->data;
    a.m = m;
    a.act_dtype = p.spec.act_dtype;
    return run_matmul(a, stream, msg, cap);
  });
}

void release(nibble_prepared* h) { delete reinterpret_cast<Prepared*>(h); }

int32_t describe_kernel(const nibble_prepared* h, int64_t m, char* msg, size_t cap) {
  if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
  const int rows = gemv_rows_for(m);
  if (rows) return fail(NIBBLE_OK, msg, cap, "gemv-m%d", rows);
  return fail(NIBBLE_OK, msg, cap, "tiled-64x64x32");
}

const nibble_plugin_api kApi = plugin::gpu_plugin_api<HipRuntime>({
    /* .name = */ NIBBLE_ROCM_PLUGIN_NAME,
    /* .version = */ NIBBLE_VERSION_STRING,
    /* .platform = */ NIBBLE_ROCM_PLATFORM,
    /* .description = */ NIBBLE_ROCM_DESCRIPTION,
    /* .priority = */ NIBBLE_ROCM_PRIORITY,
    /* .caps = */ kCaps,
    /* .probe = */ probe,
    /* .can_implement = */ can_implement,
    /* .process_weights = */ process_weights,
    /* .apply = */ apply,
    /* .release = */ release,
    /* .set_option = */ nullptr,
    /* .dense_prepare = */ nullptr,  // no hipBLAS in Debian 12: no dense baseline yet
    /* .dense_apply = */ nullptr,
    /* .dense_release = */ nullptr,
    /* .describe_kernel = */ describe_kernel,
});

}  // namespace

const nibble_plugin_api* entry(uint32_t host_abi) { return host_abi == NIBBLE_ABI_VERSION ? &kApi : nullptr; }

}  // namespace nibble::rocm

BOOST_DLL_ALIAS(nibble::rocm::entry, nibble_plugin_entry)
