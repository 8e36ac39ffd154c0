// The skeleton every in-tree GPU plugin shares, written once for CUDA and HIP alike: device memory,
// device timing, the bandwidth probe, the capability builder, failures of runtime calls as
// statuses, and the ABI table. A plugin supplies its runtime as a traits struct R (the names of
// its malloc, memcpy, events, ...; see cuda_w4a16/plugin.cpp and rocm_w4a16/plugin.cpp) and its
// own decision and matmul functions; everything else comes from here. Host code only: it is
// compiled by the host compiler, against the runtime's C API headers.
//
// The traits R provide:
//   using Error, Stream, Event;  static constexpr Error kSuccess, kOutOfMemory;
//   static Error malloc(void**, size_t); static Error free(void*);
//   static Error memset_async(void*, int, size_t, Stream);
//   static Error memcpy_async(void* dst, const void* src, size_t, int32_t nibble_copy_kind, Stream);
//   static Error stream_sync(Stream);
//   static Error event_create(Event*); static Error event_destroy(Event);
//   static Error event_record(Event, Stream); static Error event_sync(Event);
//   static Error event_elapsed_ms(float*, Event, Event);
//   static Error last_error();  static const char* error_string(Error);
//   static int32_t status(Error);  // the nibble_status of a failed call
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nibble/plugin_abi.h"
#include "plugin_support.h"

namespace nibble::plugin {

/// `what` failed with `e`: the status R maps it to and a message naming the call and the
/// runtime's words.
template <class R>
int32_t runtime_fail(typename R::Error e, const char* what, char* msg, size_t cap) {
  return fail(R::status(e), msg, cap, "%s failed: %s", what, R::error_string(e));
}

/// Evaluates a runtime call of traits R; on failure returns from the enclosing function (which has
/// `msg` and `cap` in scope) with the status and a message naming the call.
#define NIBBLE_GPU_TRY(R, call)                                                                         \
  do {                                                                                                  \
    const auto nibble_e_ = (call);                                                                      \
    if (nibble_e_ != R::kSuccess) return ::nibble::plugin::runtime_fail<R>(nibble_e_, #call, msg, cap); \
  } while (0)

/// Device memory owned by one object (freed on destruction; grows only through alloc()).
template <class R>
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  void reset() {
    if (p) (void)R::free(p);
    p = nullptr;
    bytes = 0;
  }
  /// Gives up the memory without freeing it (the caller now owns `p`).
  void* release() {
    void* q = p;
    p = nullptr;
    bytes = 0;
    return q;
  }
  typename R::Error alloc(size_t n) {
    reset();
    const typename R::Error e = R::malloc(&p, n ? n : 1);
    if (e != R::kSuccess) {
      p = nullptr;
      return e;
    }
    bytes = n;
    return e;
  }
};

/// The capabilities every in-tree GPU plugin declares (all formats; f16 and bf16 activations;
/// G = 32, 64, 128 and per channel; act order; bias; any K and N), with its own weight types,
/// bit widths and lowest device level.
inline nibble_capabilities gpu_capabilities(uint32_t weight_types, uint32_t bits, uint32_t min_device_level) {
  nibble_capabilities c{};
  c.formats = NIBBLE_FORMATS_ALL;
  c.weight_types = weight_types;
  c.bits = bits;
  c.act_dtypes = NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F16) | NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_BF16);
  for (int32_t g : {32, 64, 128, -1}) c.group_sizes[c.num_group_sizes++] = g;
  c.act_order = 1;
  c.bias = 1;
  c.k_multiple = 1;
  c.n_multiple = 1;
  c.min_device_level = min_device_level;
  return c;
}

/// All weight types a GPU plugin running every width through nibble planes declares, for `bits`
/// (a mask of 1 << b).
inline uint32_t weight_types_of_bits(uint32_t bits) {
  uint32_t t = 0;
  if (bits & (1u << 2)) t |= NIBBLE_WT_BIT(NIBBLE_WT_UINT2) | NIBBLE_WT_BIT(NIBBLE_WT_UINT2B2);
  if (bits & (1u << 3)) t |= NIBBLE_WT_BIT(NIBBLE_WT_UINT3) | NIBBLE_WT_BIT(NIBBLE_WT_UINT3B4);
  if (bits & (1u << 4)) t |= NIBBLE_WT_BIT(NIBBLE_WT_UINT4) | NIBBLE_WT_BIT(NIBBLE_WT_UINT4B8);
  if (bits & (1u << 8)) t |= NIBBLE_WT_BIT(NIBBLE_WT_UINT8) | NIBBLE_WT_BIT(NIBBLE_WT_UINT8B128);
  return t;
}

/// The x columns a plugin's packed rows read when a layer runs as nibble planes: `rows` maps each
/// packed row to a row of the virtual 4-bit layer (-1: a zero row; empty: packed row r is virtual
/// row r for r < virtual_k, zero after), `x_rows` each virtual row to a column of the real x (-1:
/// zero; empty: the same column). Returns the composed map over `packed_rows` rows, or an empty
/// one when it is the identity.
inline std::vector<int32_t> compose_row_map(const std::vector<int32_t>& rows, int64_t packed_rows,
                                            int64_t virtual_k, const std::vector<int32_t>& x_rows) {
  if (x_rows.empty()) return rows;
  std::vector<int32_t> out(static_cast<size_t>(packed_rows), -1);
  for (int64_t r = 0; r < packed_rows; ++r) {
    const int64_t v = rows.empty() ? (r < virtual_k ? r : -1) : rows[size_t(r)];
    out[size_t(r)] = v < 0 ? -1 : x_rows[size_t(v)];
  }
  return out;
}

/// The device-memory, timing and bandwidth entry points of the ABI, for runtime R.
template <class R>
struct GpuRuntimeEntries {
  static int32_t device_alloc(size_t bytes, void** ptr, char* msg, size_t cap) {
    if (!ptr) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null output pointer");
    *ptr = nullptr;
    NIBBLE_GPU_TRY(R, R::malloc(ptr, bytes ? bytes : 1));
    return NIBBLE_OK;
  }

  static void device_free(void* p) {
    if (p) (void)R::free(p);
  }

  static int32_t device_copy(void* dst, const void* src, size_t bytes, int32_t kind, void* stream, char* msg,
                             size_t cap) {
    if (!bytes) return NIBBLE_OK;
    if (!dst || !src) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null pointer in copy");
    if (kind != NIBBLE_COPY_HOST_TO_DEVICE && kind != NIBBLE_COPY_DEVICE_TO_HOST &&
        kind != NIBBLE_COPY_DEVICE_TO_DEVICE)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "unknown copy kind %d", kind);
    NIBBLE_GPU_TRY(R, R::memcpy_async(dst, src, bytes, kind, static_cast<typename R::Stream>(stream)));
    return NIBBLE_OK;
  }

  static int32_t device_sync(void* stream, char* msg, size_t cap) {
    NIBBLE_GPU_TRY(R, R::stream_sync(static_cast<typename R::Stream>(stream)));
    return NIBBLE_OK;
  }

  /// Elapsed milliseconds of `iters` calls of fn(ctx, i) on `stream`, between two device events.
  static int32_t time_device(void (*fn)(void*, int32_t), void* ctx, int32_t iters, void* stream, double* ms,
                             char* msg, size_t cap) {
    if (!fn || !ms || iters < 1)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null callback/output or iters < 1");
    const auto st = static_cast<typename R::Stream>(stream);
    struct Events {  // destroyed on every path
      typename R::Event a{}, b{};
      bool ha = false, hb = false;
      ~Events() {
        if (ha) (void)R::event_destroy(a);
        if (hb) (void)R::event_destroy(b);
      }
    } ev;
    NIBBLE_GPU_TRY(R, R::event_create(&ev.a));
    ev.ha = true;
    NIBBLE_GPU_TRY(R, R::event_create(&ev.b));
    ev.hb = true;
    NIBBLE_GPU_TRY(R, R::event_record(ev.a, st));
    for (int32_t i = 0; i < iters; ++i) fn(ctx, i);
    NIBBLE_GPU_TRY(R, R::event_record(ev.b, st));
    NIBBLE_GPU_TRY(R, R::event_sync(ev.b));
    float f = 0;
    NIBBLE_GPU_TRY(R, R::event_elapsed_ms(&f, ev.a, ev.b));
    *ms = double(f);
    return NIBBLE_OK;
  }

  /// The bandwidth probe of the ABI: a device-to-device copy of `bytes` (a source and a destination
  /// of `bytes` each), counting bytes read plus bytes written, so 2 * bytes per copy: the median of
  /// 5 timed copies after a warm-up.
  static int32_t measure_bandwidth(size_t bytes, void* stream, double* bps, char* msg, size_t cap) {
    return guarded(msg, cap, [&]() -> int32_t {
      if (!bps || bytes < 1024)
        return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null output or buffer under 1 KiB");
      const auto st = static_cast<typename R::Stream>(stream);
      DeviceBuffer<R> a, b;
      NIBBLE_GPU_TRY(R, a.alloc(bytes));
      NIBBLE_GPU_TRY(R, b.alloc(bytes));
      NIBBLE_GPU_TRY(R, R::memset_async(a.p, 1, bytes, st));
      struct Ctx {
        void* dst;
        const void* src;
        size_t n;
        typename R::Stream s;
        typename R::Error err;
      } c{b.p, a.p, bytes, st, R::kSuccess};
      auto copy = [](void* v, int32_t) {
        auto* x = static_cast<Ctx*>(v);
        const auto e = R::memcpy_async(x->dst, x->src, x->n, NIBBLE_COPY_DEVICE_TO_DEVICE, x->s);
        if (e != R::kSuccess) x->err = e;
      };
      std::vector<double> t;
      for (int i = 0; i < 6; ++i) {  // the first copy warms up
        double ms = 0;
        if (int32_t r = time_device(copy, &c, 1, stream, &ms, msg, cap)) return r;
        if (c.err != R::kSuccess) return runtime_fail<R>(c.err, "device-to-device copy", msg, cap);
        if (i) t.push_back(ms);
      }
      std::sort(t.begin(), t.end());
      *bps = 2.0 * double(bytes) / (t[t.size() / 2] * 1e-3);
      return NIBBLE_OK;
    });
  }
};

/// What a GPU plugin supplies for its ABI table; the skeleton fills in the rest.
struct GpuPluginParts {
  const char* name;
  const char* version;
  const char* platform;
  const char* description;
  int32_t priority;
  nibble_capabilities caps;
  decltype(nibble_plugin_api::probe) probe;
  decltype(nibble_plugin_api::can_implement) can_implement;
  decltype(nibble_plugin_api::process_weights) process_weights;
  decltype(nibble_plugin_api::apply) apply;
  decltype(nibble_plugin_api::release) release;
  decltype(nibble_plugin_api::set_option) set_option;        // may be null
  decltype(nibble_plugin_api::dense_prepare) dense_prepare;  // may be null (no dense baseline)
  decltype(nibble_plugin_api::dense_apply) dense_apply;
  decltype(nibble_plugin_api::dense_release) dense_release;
  decltype(nibble_plugin_api::describe_kernel) describe_kernel;
};

/// The ABI table of a GPU plugin on runtime R.
template <class R>
constexpr nibble_plugin_api gpu_plugin_api(const GpuPluginParts& p) {
  using E = GpuRuntimeEntries<R>;
  return nibble_plugin_api{
      /* .abi_version = */ NIBBLE_ABI_VERSION,
      /* .struct_size = */ sizeof(nibble_plugin_api),
      /* .name = */ p.name,
      /* .version = */ p.version,
      /* .platform = */ p.platform,
      /* .description = */ p.description,
      /* .priority = */ p.priority,
      /* .caps = */ p.caps,
      /* .probe = */ p.probe,
      /* .can_implement = */ p.can_implement,
      /* .process_weights = */ p.process_weights,
      /* .apply = */ p.apply,
      /* .release = */ p.release,
      /* .device_alloc = */ E::device_alloc,
      /* .device_free = */ E::device_free,
      /* .device_copy = */ E::device_copy,
      /* .device_sync = */ E::device_sync,
      /* .set_option = */ p.set_option,
      /* .dense_prepare = */ p.dense_prepare,
      /* .dense_apply = */ p.dense_apply,
      /* .dense_release = */ p.dense_release,
      /* .time_device = */ E::time_device,
      /* .describe_kernel = */ p.describe_kernel,
      /* .measure_bandwidth = */ E::measure_bandwidth,
  };
}

}  // namespace nibble::plugin
