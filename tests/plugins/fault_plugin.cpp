// One source, many test plugins: each build defines FAULT_<MODE> and PLUGIN_NAME, and the plugin
// then behaves well or misbehaves in exactly one way. The well-behaved modes compute the right
// answer with a naive kernel, so the registry and policy tests can run real layers through them.
// WITH_TIMER and WITH_DENSE add the optional entry points (time_device, the dense baseline), with
// exported counters the host tests read back.
#include <boost/dll/alias.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "nibble/dtype.h"
#include "nibble/plugin_abi.h"
#include "plugin_support.h"

#ifndef PLUGIN_NAME
#error "define PLUGIN_NAME"
#endif
#ifndef PLUGIN_PRIORITY
#define PLUGIN_PRIORITY 50
#endif

#ifdef FAULT_MISSING_DEP
extern "C" int nibble_test_ghost_function(void);  // defined in a library that will be missing
static int ghost_value = nibble_test_ghost_function();
#endif

namespace {

using nibble::plugin::fail;

nibble_capabilities make_caps() {
  nibble_capabilities c{};
  c.formats = NIBBLE_FORMATS_ALL;
  c.weight_types = NIBBLE_WT_BIT(NIBBLE_WT_UINT4) | NIBBLE_WT_BIT(NIBBLE_WT_UINT4B8);
  c.bits = 1u << 4;
  c.act_dtypes = NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F16) | NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_BF16) |
                 NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F32);
#ifdef ONLY_G128
  c.group_sizes[c.num_group_sizes++] = 128;
#else
  for (int32_t g : {32, 64, 128, 256, -1}) c.group_sizes[c.num_group_sizes++] = g;
#endif
  c.act_order = 1;
  c.bias = 1;
  c.k_multiple = 1;
  c.n_multiple = 1;
  return c;
}
const nibble_capabilities kCaps = make_caps();

struct Prepared {
  nibble_linear_spec spec;
  std::vector<double> w;  // dequantized [K, N]
  std::vector<double> bias;
};

int32_t probe(char* msg, size_t cap) {
#ifdef FAULT_NO_DEVICE
  return fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no test device present");
#else
  return fail(NIBBLE_OK, msg, cap, "test device ready");
#endif
}

int32_t can_implement(const nibble_linear_spec* s, char* msg, size_t cap) {
#ifdef FAULT_LYING_CAPS
  (void)s;
  return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "declared everything, but implements nothing");
#else
  if (int32_t st = nibble::plugin::check_caps(kCaps, s, msg, cap)) return st;
#ifdef MAX_K
  if (s->k > MAX_K) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "K_part %lld above %d", (long long)s->k, MAX_K);
#endif
  return NIBBLE_OK;
#endif
}

int32_t process_weights(const nibble_linear_spec* s, const nibble_canonical_weights* w, void*,
                        nibble_prepared** out, char* msg, size_t cap) {
#ifdef FAULT_PROCESS_FAILS
  (void)s; (void)w; (void)out;
  // NIBBLE_TEST_FAULT_STATUS picks the status, so one plugin tests every status's error code.
  const char* forced = std::getenv("NIBBLE_TEST_FAULT_STATUS");
  return fail(forced ? std::atoi(forced) : NIBBLE_ERR_DEVICE, msg, cap,
              "simulated device failure while uploading weights");
#elif defined(FAULT_NULL_HANDLE)
  (void)s; (void)w; (void)msg; (void)cap;
  *out = nullptr;
  return NIBBLE_OK;
#else
  if (int32_t st = can_implement(s, msg, cap)) return st;
  auto* p = new (std::nothrow) Prepared;
  if (!p) return fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "out of memory");
  p->spec = *s;
  p->spec.layer_name = nullptr;
  const int64_t K = s->k, N = s->n, G = s->group_size <= 0 ? K : s->group_size;
  p->w.resize(size_t(K * N));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t g = w->g_idx ? w->g_idx[k] : k / G;
      const double q = double((w->qweight[(k / 8) * N + n] >> (4 * (k % 8))) & 0xf);
      const double z = w->zeros ? double(w->zeros[g * N + n]) : 8.0;
      p->w[size_t(k * N + n)] = nibble::load_float(w->scales, nibble::DType(s->scale_dtype), size_t(g * N + n)) * (q - z);
    }
  if (w->bias)
    for (int64_t n = 0; n < N; ++n) p->bias.push_back(nibble::load_float(w->bias, nibble::DType(s->act_dtype), size_t(n)));
  *out = reinterpret_cast<nibble_prepared*>(p);
  return NIBBLE_OK;
#endif
}

// y = x * w (+ bias) in double, after the checks every apply makes.
int32_t naive_apply(const nibble_linear_spec& spec, const std::vector<double>& w, const std::vector<double>& bias,
                    const nibble_tensor* x, nibble_tensor* y, char* msg, size_t cap) {
  const int64_t K = spec.k, N = spec.n;
  if (int32_t st = nibble::plugin::check_io(x, "x", spec.act_dtype, K, -1, msg, cap)) return st;
  const int64_t M = x->shape[0];
  if (int32_t st = nibble::plugin::check_io(y, "y", spec.act_dtype, N, M, msg, cap)) return st;
  const auto dt = nibble::DType(spec.act_dtype);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bias.empty() ? 0.0 : bias[size_t(n)];
      for (int64_t k = 0; k < K; ++k) acc += nibble::load_float(x->data, dt, size_t(m * K + k)) * w[size_t(k * N + n)];
      nibble::store_float(y->data, dt, size_t(m * N + n), acc);
    }
  return NIBBLE_OK;
}

int32_t apply(const nibble_prepared* h, const nibble_tensor* x, nibble_tensor* y, void*, char* msg, size_t cap) {
  const auto* p = reinterpret_cast<const Prepared*>(h);
  if (!p) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null handle");
  return naive_apply(p->spec, p->w, p->bias, x, y, msg, cap);
}

void release(nibble_prepared* h) { delete reinterpret_cast<Prepared*>(h); }

int32_t device_alloc(size_t bytes, void** ptr, char* msg, size_t cap) {
  *ptr = std::malloc(bytes ? bytes : 1);
  return *ptr ? NIBBLE_OK : fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "out of memory");
}
void device_free(void* p) { std::free(p); }
int32_t device_copy(void* dst, const void* src, size_t bytes, int32_t, void*, char*, size_t) {
  std::memmove(dst, src, bytes);
  return NIBBLE_OK;
}
int32_t device_sync(void*, char*, size_t) { return NIBBLE_OK; }

#ifdef WITH_TIMER
std::atomic<int> timer_returns{0};

// Host-clock timing of fn(ctx, 0..iters-1). noexcept, as a plugin built without unwind tables (or
// in C) is: an exception reaching these frames ends the process.
int32_t time_device(void (*fn)(void*, int32_t), void* ctx, int32_t iters, void*, double* ms, char* msg,
                    size_t cap) noexcept {
  if (!fn || !ms || iters < 1) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null callback/output or iters < 1");
  const auto t0 = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < iters; ++i) fn(ctx, i);
  *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++timer_returns;
  return NIBBLE_OK;
}
#endif

#ifdef WITH_DENSE
std::atomic<int> live_dense{0};

struct Dense {
  nibble_linear_spec spec;
  std::vector<double> w;  // [K, N]
};

int32_t dense_prepare(const nibble_linear_spec* s, const void* weight_kn, void*, nibble_dense** out, char* msg,
                      size_t cap) {
  if (!s || !weight_kn || !out) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
  auto* d = new (std::nothrow) Dense;
  if (!d) return fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "out of memory");
  d->spec = *s;
  d->spec.layer_name = nullptr;
  d->w.resize(size_t(s->k * s->n));
  for (size_t i = 0; i < d->w.size(); ++i) d->w[i] = nibble::load_float(weight_kn, nibble::DType(s->act_dtype), i);
  ++live_dense;
  *out = reinterpret_cast<nibble_dense*>(d);
  return NIBBLE_OK;
}

int32_t dense_apply(const nibble_dense* h, const nibble_tensor* x, nibble_tensor* y, void*, char* msg, size_t cap) {
  const auto* d = reinterpret_cast<const Dense*>(h);
  if (!d) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null handle");
  return naive_apply(d->spec, d->w, {}, x, y, msg, cap);
}

void dense_release(nibble_dense* h) {
  if (!h) return;
  delete reinterpret_cast<Dense*>(h);
  --live_dense;
}
#endif

#ifdef FAULT_WRONG_ABI
constexpr uint32_t kAbi = NIBBLE_ABI_VERSION + 98;
#else
constexpr uint32_t kAbi = NIBBLE_ABI_VERSION;
#endif

#ifdef FAULT_SMALL_STRUCT
constexpr uint32_t kSize = uint32_t(offsetof(nibble_plugin_api, device_sync));
#elif defined(FAULT_LARGER_STRUCT)
constexpr uint32_t kSize = sizeof(nibble_plugin_api) + 64;  // a newer minor revision with appended fields
#else
constexpr uint32_t kSize = sizeof(nibble_plugin_api);
#endif

#ifdef FAULT_LARGER_STRUCT
// Appended fields of a hypothetical newer minor revision live right after the known struct.
struct Extended {
  nibble_plugin_api base;
  void* future[8];
};
#endif

nibble_plugin_api make_api() {
  nibble_plugin_api a{};
  a.abi_version = kAbi;
  a.struct_size = kSize;
  a.name = PLUGIN_NAME;
  a.version = "0.0.1";
  a.platform = "cpu";  // host memory: what hosts hand a CPU backend
  a.description = "test plugin (" PLUGIN_NAME ")";
  a.priority = PLUGIN_PRIORITY;
  a.caps = kCaps;
#ifdef FAULT_LYING_CAPS
  a.caps.num_group_sizes = 0;
  for (int32_t g : {32, 64, 128, 256, -1}) a.caps.group_sizes[a.caps.num_group_sizes++] = g;
#endif
  a.probe = probe;
  a.can_implement = can_implement;
  a.process_weights = process_weights;
  a.apply = apply;
  a.release = release;
  a.device_alloc = device_alloc;
  a.device_free = device_free;
  a.device_copy = device_copy;
  a.device_sync = device_sync;
#ifdef WITH_TIMER
  a.time_device = time_device;
#endif
#ifdef WITH_DENSE
  a.dense_prepare = dense_prepare;
  a.dense_apply = dense_apply;
  a.dense_release = dense_release;
#endif
  return a;
}

#ifdef FAULT_LARGER_STRUCT
const Extended kExt = {make_api(), {nullptr}};
const nibble_plugin_api& kApi = kExt.base;
#else
const nibble_plugin_api kApi = make_api();
#endif

}  // namespace

extern "C" const nibble_plugin_api* test_entry(uint32_t) {
#ifdef FAULT_NULL_ENTRY
  return nullptr;
#else
  return &kApi;
#endif
}

BOOST_DLL_ALIAS(test_entry, nibble_plugin_entry)

// What the host tests read back through dlsym: how often time_device returned normally, and how
// many dense baselines are alive.
#ifdef WITH_TIMER
extern "C" NIBBLE_EXPORT int nibble_test_timer_returns(void) { return timer_returns.load(); }
#endif
#ifdef WITH_DENSE
extern "C" NIBBLE_EXPORT int nibble_test_live_dense(void) { return live_dense.load(); }
#endif
