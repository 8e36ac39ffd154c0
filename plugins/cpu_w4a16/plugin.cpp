// cpu_w4a16: the CPU backend plugin. This file is the ABI glue: capabilities, probe,
// can_implement, process_weights, apply, host "device" memory and the oneDNN dense baseline.
#include <cpuid.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <boost/dll/alias.hpp>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "cpu_weights.h"
#include "dense_onednn.h"
#include "kernel_onednn.h"
#include "kernels.h"
#include "nibble/dtype.h"
#include "nibble/plugin_abi.h"
#include "nibble_planes.h"
#include "plugin_support.h"

namespace nibble::cpu {
namespace {

using plugin::fail;
using plugin::guarded;

nibble_capabilities make_caps() {
  nibble_capabilities c{};
  c.formats = NIBBLE_FORMATS_ALL;
  // 2, 3 and 8 bits run on the 4-bit kernels as nibble planes (plugins/common/nibble_planes.h).
  for (int32_t t : {NIBBLE_WT_UINT4, NIBBLE_WT_UINT4B8, NIBBLE_WT_UINT8, NIBBLE_WT_UINT8B128, NIBBLE_WT_UINT2,
                    NIBBLE_WT_UINT2B2, NIBBLE_WT_UINT3, NIBBLE_WT_UINT3B4})
    c.weight_types |= NIBBLE_WT_BIT(t);
  c.bits = (1u << 2) | (1u << 3) | (1u << 4) | (1u << 8);
  c.act_dtypes = NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F16) | NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_BF16) |
                 NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F32);
  const int32_t gs[] = {32, 64, 128, 256, -1};
  for (int32_t g : gs) c.group_sizes[c.num_group_sizes++] = g;
  c.act_order = 1;
  c.bias = 1;
  c.k_multiple = 1;
  c.n_multiple = 1;
  c.min_device_level = 0;
  return c;
}

const nibble_capabilities kCaps = make_caps();

// The crossover between the fused kernel and the oneDNN path, measured (docs/benchmarks.md). With
// the bf16 brgemm on AMX tiles (bf16 activations; a Sapphire Rapids host, 2 threads) oneDNN won
// from M = 256 on the large layers and from 1024 on all. Without AMX (AVX-512 BF16 only: a Zen 5,
// 2 threads) the fused avx512bf16 kernel ran 1.4-1.6x the oneDNN path at M = 256, and the f32
// brgemm lost to the fused kernel at every M measured: there oneDNN is never chosen by default.
constexpr int64_t kBf16OnednnMinM = 256;

// AMX-BF16: CPUID leaf 7, sub-leaf 0, EDX bit 22.
bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u);
}

struct Prepared {
  nibble_linear_spec spec;
  CpuWeights w;
  IsaChoice kernel;
  std::unique_ptr<OnednnPath> onednn;
};

// From this M on, the oneDNN path runs (kBf16OnednnMinM or never); NIBBLE_CPU_PATH=fused or =onednn
// forces one path (for tests), the option "onednn_min_m" moves the crossover.
std::atomic<int64_t> g_onednn_min_m{-1};

int64_t onednn_min_m(const OnednnPath& path) {
  const int64_t v = g_onednn_min_m.load(std::memory_order_relaxed);
  if (v >= 0) return v;
  if (const char* env = std::getenv("NIBBLE_CPU_PATH")) {
    if (std::strcmp(env, "onednn") == 0) return 1;
    if (std::strcmp(env, "fused") == 0) return INT64_MAX;
  }
  static const bool amx = cpu_has_amx_bf16();
  return path.bf16() && amx ? kBf16OnednnMinM : INT64_MAX;
}

// The environment's knobs (kernels.h, onednn_min_m above, num_threads): one that is set but not
// understood (a typo, a word where a number goes) would otherwise run something other than what
// was asked for without a word. Returns why, or an empty string.
std::string env_knob_error() {
  const auto at_least = [](const char* v, long long lo) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    return end != v && !*end && n >= lo;
  };
  const auto one_of = [](const char* v, std::initializer_list<const char*> words) {
    for (const char* w : words)
      if (std::strcmp(v, w) == 0) return true;
    return false;
  };
  std::string why;
  const auto check = [&](const char* name, bool ok, const char* expected) {
    const char* v = std::getenv(name);
    if (why.empty() && v && *v && !ok) why = std::string(name) + "='" + v + "': expected " + expected;
  };
  const auto env = [](const char* name) { const char* v = std::getenv(name); return v ? v : ""; };
  check("NIBBLE_CPU_ISA", one_of(env("NIBBLE_CPU_ISA"), {"avx512bf16", "avx512", "avx2", "portable"}),
        "avx512bf16, avx512, avx2 or portable");
  check("NIBBLE_CPU_PATH", one_of(env("NIBBLE_CPU_PATH"), {"fused", "onednn"}), "fused or onednn");
  check("NIBBLE_CPU_GEMM_MIN_M", at_least(env("NIBBLE_CPU_GEMM_MIN_M"), 1), "an integer >= 1");
  check("NIBBLE_NUM_THREADS", at_least(env("NIBBLE_NUM_THREADS"), 0), "an integer >= 0 (0: the OpenMP default)");
  return why;
}

int32_t probe(char* msg, size_t cap) {
  const std::string why = env_knob_error();
  if (!why.empty()) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "%s", why.c_str());
  return fail(NIBBLE_OK, msg, cap, "%d threads, %s kernels (%s for f32 activations)", num_threads(),
              best_fused_kernel(NIBBLE_DTYPE_BF16).name, best_fused_kernel(NIBBLE_DTYPE_F32).name);
}

int32_t can_implement(const nibble_linear_spec* s, char* msg, size_t cap) {
  if (int32_t st = plugin::check_caps(kCaps, s, msg, cap)) return st;
  if (s->k > (int64_t(1) << 31) || s->n > (int64_t(1) << 31))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "K or N above 2^31 (K=%lld N=%lld)", (long long)s->k,
                (long long)s->n);
  return NIBBLE_OK;
}

int32_t process_weights(const nibble_linear_spec* s, const nibble_canonical_weights* w, void*,
                        nibble_prepared** out, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!out || !w) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
    *out = nullptr;
    if (int32_t st = can_implement(s, msg, cap)) return st;
    auto p = std::make_unique<Prepared>();
    p->spec = *s;
    p->spec.layer_name = nullptr;  // borrowed from the host; not kept
    try {
      p->kernel = best_fused_kernel(s->act_dtype);
      if (plugin::needs_nibble_planes(*s)) {
        const plugin::NibblePlanes planes = plugin::make_nibble_planes(*s, *w);
        p->w = prepare_cpu_weights(planes.spec, planes.weights(), p->kernel.order);
        read_x_through(p->w, planes.x_rows, planes.real_k);
      } else {
        p->w = prepare_cpu_weights(*s, *w, p->kernel.order);
      }
      p->onednn = std::make_unique<OnednnPath>(p->w, s->act_dtype == NIBBLE_DTYPE_BF16);
    } catch (const std::invalid_argument& e) {
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "%s", e.what());
    }
    *out = reinterpret_cast<nibble_prepared*>(p.release());
    return NIBBLE_OK;
  });
}

// Columns [c0, c1) of y [m, N] of `dt` = the kernels' f32 rows (stride ldy) + bias; one loop per
// dtype.
void store_y(const CpuWeights& w, const float* src, int64_t ldy, DType dt, int64_t m, void* y, int64_t c0, int64_t c1) {
  const int64_t n = w.n;
  const float* bias = w.bias.empty() ? nullptr : w.bias.data();
  for (int64_t r = 0; r < m; ++r) {
    const float* in = src + r * ldy;
    const auto value = [&](int64_t c) { return in[c] + (bias ? bias[c] : 0.0f); };
    switch (dt) {
      case DType::bf16: {
        uint16_t* out = static_cast<uint16_t*>(y) + r * n;
        for (int64_t c = c0; c < c1; ++c) out[c] = float_to_bf16(value(c));
        break;
      }
      case DType::f16: {
        uint16_t* out = static_cast<uint16_t*>(y) + r * n;
        for (int64_t c = c0; c < c1; ++c) out[c] = float_to_f16(value(c));
        break;
      }
      case DType::f32: {
        float* out = static_cast<float*>(y) + r * n;
        for (int64_t c = c0; c < c1; ++c) out[c] = value(c);
        break;
      }
      default:
        for (int64_t c = c0; c < c1; ++c) store_float(y, dt, size_t(r * n + c), value(c));
    }
  }
}

// Per-call scratch, reused by the calling thread across calls.
struct Scratch {
  std::vector<float> xp, xs, y;
};
thread_local Scratch t_scratch;

int32_t apply(const nibble_prepared* h, const nibble_tensor* x, nibble_tensor* y, void*, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
    const auto& p = *reinterpret_cast<const Prepared*>(h);
    const CpuWeights& w = p.w;
    if (int32_t st = plugin::check_io(x, "x", p.spec.act_dtype, w.k, -1, msg, cap)) return st;
    const int64_t m = x->shape[0];
    if (int32_t st = plugin::check_io(y, "y", p.spec.act_dtype, w.n, m, msg, cap)) return st;
    Scratch& sc = t_scratch;
    const bool large = m >= onednn_min_m(*p.onednn);
    const bool gemm = !large && p.kernel.gemm && m >= p.kernel.gemm_min_m;
    // Rows per block of x: the kernel's register blocking, or m if smaller (no padded rows in x).
    const int64_t rb = large ? 1 : gemm ? p.kernel.gemm_rows : std::min(p.kernel.rows, m), blocks = (m + rb - 1) / rb;
    const int64_t ldy = large ? p.onednn->y_stride() : fused_y_stride(w);
    sc.xp.resize(size_t(blocks * w.lines * rb * 8));
    sc.xs.resize(size_t(blocks * w.segments() * 2 * rb));
    sc.y.resize(size_t(m * ldy));
    // The oneDNN path reads x as f32 rows.
    const XForm xform = large ? XForm::kF32 : p.kernel.xform;
    const DType dt = DType(p.spec.act_dtype);
    const int threads = int(std::min<int64_t>(num_threads(), w.tiles));
    if (large) {
#pragma omp parallel num_threads(threads)
      gather_x(w, x->data, p.spec.act_dtype, xform, m, rb, sc.xp.data(), sc.xs.data());
      p.onednn->run(sc.xp.data(), m, sc.y.data());  // rb = 1: xp is plain row-major [m][rows]
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t c0 = 0; c0 < w.n; c0 += 1024) store_y(w, sc.y.data(), ldy, dt, m, y->data, c0, std::min(w.n, c0 + 1024));
      return NIBBLE_OK;
    }
    const FusedArgs args{&w, sc.xp.data(), sc.xs.data(), m, rb, sc.y.data(), ldy, p.spec.act_dtype == NIBBLE_DTYPE_F32, xform};
    const FusedKernel kernel = gemm ? p.kernel.gemm : p.kernel.fn;
    // Work in ranges of tiles, each given to the kernel whole: one stream through memory that
    // its prefetch follows from tile to tile. The one-tile form (bandwidth-bound) has each thread
    // first take its fixed share of 15/16 of the tiles, one long range; the rest, and all of the
    // GEMM form's (compute-bound, its weights reused from L2), is handed out as the threads ask,
    // guided (about half of what is left per thread, in whole chunks), so that a thread the OS
    // delays or slows holds up the call by at most that much. Every new range is a new stream that
    // the prefetchers have to pick up, and in the machine's high bandwidth state that costs: M = 1
    // on 4096x4096 read at 79-83% of the bandwidth when all of it was handed out guided (7-8
    // ranges per thread), at 83.6-87.5% (median ~86%) with the fixed shares (docs/benchmarks.md).
    // An OpenMP loop over the chunks, before that, called the kernel once per chunk of 4-8 tiles.
    int64_t chunk = std::max<int64_t>(1, w.tiles / (int64_t(threads) * 32));
    if (gemm) chunk = (chunk + 31) / 32 * 32;  // whole blocks of the GEMM form's weights
    // The fixed shares are claimed in turn, so that a team smaller than asked for (a host's own
    // parallel region around this call, OMP_THREAD_LIMIT) still computes all of them.
    const int64_t share = gemm ? 0 : w.tiles * 15 / 16 / threads / chunk * chunk;
    std::atomic<int64_t> next_share{0}, next{share * threads};
    // The next range [t0, t1) of the rest for the calling thread; false once every tile is taken.
    const auto take = [&](int64_t& t0, int64_t& t1) {
      t0 = next.load(std::memory_order_relaxed);
      do {
        const int64_t chunks_left = (w.tiles - t0 + chunk - 1) / chunk;
        if (chunks_left <= 0) return false;
        t1 = std::min(w.tiles, t0 + std::max<int64_t>(1, chunks_left / (2 * threads)) * chunk);
      } while (!next.compare_exchange_weak(t0, t1, std::memory_order_relaxed));
      return true;
    };
    // One parallel region per call: the team gathers x, then each thread computes its ranges of
    // tiles and stores their columns of y.
#pragma omp parallel num_threads(threads)
    {
      gather_x(w, x->data, p.spec.act_dtype, xform, m, rb, sc.xp.data(), sc.xs.data());
      const auto run = [&](int64_t t0, int64_t t1) {
        kernel(args, t0, t1);
        store_y(w, sc.y.data(), ldy, dt, m, y->data, t0 * kTileN, std::min(w.n, t1 * kTileN));
      };
      for (int64_t i; share > 0 && (i = next_share.fetch_add(1, std::memory_order_relaxed)) < threads;) run(i * share, (i + 1) * share);
      for (int64_t t0, t1; take(t0, t1);) run(t0, t1);
    }
    return NIBBLE_OK;
  });
}

void release(nibble_prepared* h) { delete reinterpret_cast<Prepared*>(h); }

// Host memory is the CPU plugin's device memory.
int32_t device_alloc(size_t bytes, void** ptr, char* msg, size_t cap) {
  if (!ptr) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null output pointer");
  *ptr = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  return *ptr ? NIBBLE_OK : fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "cannot allocate %zu bytes", bytes);
}
void device_free(void* p) { std::free(p); }
int32_t device_copy(void* dst, const void* src, size_t bytes, int32_t, void*, char* msg, size_t cap) {
  if ((!dst || !src) && bytes) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null pointer in copy");
  if (bytes) std::memmove(dst, src, bytes);
  return NIBBLE_OK;
}
int32_t device_sync(void*, char*, size_t) { return NIBBLE_OK; }

int32_t set_option(const char* key, const char* value, char* msg, size_t cap) {
  if (!key || !value) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null option");
  if (std::strcmp(key, "num_threads") == 0) {
    char* end = nullptr;
    const long v = std::strtol(value, &end, 10);
    if (!end || *end || v < 0 || v > 4096)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "num_threads: expected 0..4096 (0 = default), found '%s'", value);
    set_num_threads(int(v));
    return NIBBLE_OK;
  }
  if (std::strcmp(key, "onednn_min_m") == 0) {
    char* end = nullptr;
    const long long v = std::strtoll(value, &end, 10);
    if (!end || *end || v < 0)
      return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "onednn_min_m: expected an integer >= 0 (0 = default), found '%s'", value);
    g_onednn_min_m.store(v == 0 ? -1 : v, std::memory_order_relaxed);
    return NIBBLE_OK;
  }
  return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "unknown option '%s' (known: num_threads, onednn_min_m)", key);
}

struct Dense {
  int64_t k, n;
  int32_t dtype;
  std::unique_ptr<DenseMatmul> mm;
};

int32_t dense_prepare(const nibble_linear_spec* s, const void* w, void*, nibble_dense** out, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!s || !w || !out) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
    if (s->act_dtype != NIBBLE_DTYPE_BF16 && s->act_dtype != NIBBLE_DTYPE_F32)
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap,
                  "dense baseline: oneDNN 2.6 runs bf16 and f32 matmul on CPUs, not %s", plugin::dtype_str(s->act_dtype));
    auto d = std::make_unique<Dense>();
    d->k = s->k;
    d->n = s->n;
    d->dtype = s->act_dtype;
    d->mm = std::make_unique<DenseMatmul>(s->k, s->n, s->act_dtype, w);
    *out = reinterpret_cast<nibble_dense*>(d.release());
    return NIBBLE_OK;
  });
}

int32_t dense_apply(const nibble_dense* h, const nibble_tensor* x, nibble_tensor* y, void*, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null dense handle");
    const auto& d = *reinterpret_cast<const Dense*>(h);
    if (int32_t st = plugin::check_io(x, "x", d.dtype, d.k, -1, msg, cap)) return st;
    if (int32_t st = plugin::check_io(y, "y", d.dtype, d.n, x->shape[0], msg, cap)) return st;
    d.mm->run(x->data, y->data, x->shape[0]);
    return NIBBLE_OK;
  });
}

void dense_release(nibble_dense* h) { delete reinterpret_cast<Dense*>(h); }

int32_t describe_kernel(const nibble_prepared* h, int64_t m, char* msg, size_t cap) {
  if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
  const auto& p = *reinterpret_cast<const Prepared*>(h);
  if (m >= onednn_min_m(*p.onednn)) return fail(NIBBLE_OK, msg, cap, "%s", p.onednn->name());
  if (p.kernel.gemm && m >= p.kernel.gemm_min_m) return fail(NIBBLE_OK, msg, cap, "gemm-%s", p.kernel.name);
  return fail(NIBBLE_OK, msg, cap, "fused-%s", p.kernel.name);
}

// Read bandwidth: every thread streams its share of a buffer with 512-bit (or 256-bit) loads.
int32_t measure_bandwidth(size_t bytes, void*, double* bps, char* msg, size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!bps) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null output");
    *bps = read_bandwidth(std::max<size_t>(bytes, size_t(64) << 20), num_threads());
    return NIBBLE_OK;
  });
}

const nibble_plugin_api kApi = {
    /* .abi_version = */ NIBBLE_ABI_VERSION,
    /* .struct_size = */ sizeof(nibble_plugin_api),
    /* .name = */ "cpu_w4a16",
    /* .version = */ NIBBLE_VERSION_STRING,
    /* .platform = */ "cpu",
    /* .description = */ "2/3/4/8-bit weights, 16-bit activations on x86-64 CPUs: fused kernels for small M, oneDNN for large M",
    /* .priority = */ 10,
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
    /* .time_device = */ nullptr,
    /* .describe_kernel = */ describe_kernel,
    /* .measure_bandwidth = */ measure_bandwidth,
};

}  // namespace

const nibble_plugin_api* entry(uint32_t host_abi) { return host_abi == NIBBLE_ABI_VERSION ? &kApi : nullptr; }

}  // namespace nibble::cpu

BOOST_DLL_ALIAS(nibble::cpu::entry, nibble_plugin_entry)
