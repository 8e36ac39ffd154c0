// cpu_w4a16: the CPU backend plugin. This file is the ABI glue: capabilities, probe,
// can_implement, process_weights, apply, host "device" memory and the oneDNN dense baseline.

#include <algorithm>
#include <atomic>
#include <boost/dll/alias.hpp>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu_weights.h"
#include "dense_onednn.h"
#include "kernel_choice.h"
#include "kernel_onednn.h"
#include "openmp_fork.h"
#include "kernels.h"
#include "thread_team.h"
#include "work_split.h"
#include "nibble/dtype.h"
#include "nibble/plugin_abi.h"
#include "nibble_planes.h"
#include "numa_placement.h"
#include "plugin_support.h"

namespace nibble::cpu {
namespace {

using plugin::fail;
using plugin::guarded;

nibble_capabilities make_caps() {
  nibble_capabilities c{};
  c.formats = NIBBLE_FORMATS_ALL;
  // 8 bits run on the 4-bit kernels as nibble rows (prepare_cpu_weights_8bit), which the forms
  // that read bytes (KernelForm::bytes) multiply as whole codes; 2 bits as native
  // 2-bit codes where every form of the plan reads them (cpu_weights.h), else, and 3 bits, as
  // nibble planes (plugins/common/nibble_planes.h).
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

struct Prepared {
  nibble_linear_spec spec;
  CpuWeights w;
  const KernelPlan* plan = nullptr;
  int64_t tile_steps = 0;  // the AMX form's K steps per segment (amx_tile_steps), if the plan has it
  std::vector<int64_t> node_tiles;  // NUMA: each node's tiles (numa_placement.h); empty on one node
  std::unique_ptr<OnednnPath> onednn;
  const char* codes = "";  // how a width other than 4 bits is laid out, for describe_kernel
};

// From this M on, the oneDNN path runs: by default from onednn_from_m (kernel_choice.h, the
// crossovers measured); NIBBLE_CPU_PATH=fused or =onednn forces one path (for tests), the option
// "onednn_min_m" moves the crossover.
std::atomic<int64_t> g_onednn_min_m{-1};

int64_t onednn_min_m(const Prepared& p) {
  const int64_t v = g_onednn_min_m.load(std::memory_order_relaxed);
  if (v >= 0) return v;
  if (const char* env = std::getenv("NIBBLE_CPU_PATH")) {
    if (std::strcmp(env, "onednn") == 0) return 1;
    if (std::strcmp(env, "fused") == 0) return INT64_MAX;
  }
  return onednn_from_m(p.onednn->bf16(), *p.plan, OnednnCpu::this_cpu());
}

// Whether a call of M rows runs the oneDNN path: from onednn_min_m on, except in a process forked
// after the plugin ran OpenMP (openmp_fork.h), which runs the fused kernels on the team instead.
bool runs_onednn(const Prepared& p, int64_t m) { return m >= onednn_min_m(p) && !openmp_lost_to_fork(); }

// NIBBLE_CPU_PATH=onednn in force (the option, where set, takes precedence): a test's demand for
// the oneDNN path, which fails where it cannot run rather than run something else.
bool onednn_forced() {
  if (g_onednn_min_m.load(std::memory_order_relaxed) >= 0) return false;
  const char* env = std::getenv("NIBBLE_CPU_PATH");
  return env && std::strcmp(env, "onednn") == 0;
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
  check("NIBBLE_CPU_ISA",
        one_of(env("NIBBLE_CPU_ISA"), {"amx", "avx512bf16", "avx512-amx", "avx512", "avx512vnni", "avx512vnni-amx",
                                       "avx2", "avx2-dot", "portable"}),
        "amx, avx512bf16, avx512-amx, avx512, avx512vnni, avx512vnni-amx, avx2, avx2-dot or portable");
  check("NIBBLE_CPU_PATH", one_of(env("NIBBLE_CPU_PATH"), {"fused", "onednn"}), "fused or onednn");
  check("NIBBLE_CPU_GEMM_MIN_M", at_least(env("NIBBLE_CPU_GEMM_MIN_M"), 1), "an integer >= 1");
  check("NIBBLE_CPU_PREFETCH", one_of(env("NIBBLE_CPU_PREFETCH"), {"nta", "t0", "none"}), "nta, t0 or none");
  check("NIBBLE_CPU_SPLIT_K", one_of(env("NIBBLE_CPU_SPLIT_K"), {"0", "1"}), "0 (never split K) or 1 (where tiles are few)");
  check("NIBBLE_CPU_GEMM_PIECES", at_least(env("NIBBLE_CPU_GEMM_PIECES"), 1),
        "an integer >= 1 (pieces per member of the GEMM forms' work)");
  check("NIBBLE_CPU_GEMM_DECODED", one_of(env("NIBBLE_CPU_GEMM_DECODED"), {"0", "1"}),
        "0 (gemm-avx2 without decoded operands) or 1 (with them at every M)");
  check("NIBBLE_NUM_THREADS", at_least(env("NIBBLE_NUM_THREADS"), 0), "an integer >= 0 (0: the OpenMP default)");
  return why;
}

// The ISA families of a plan's forms ("avx512bf16+amx"), from their names ("fused-avx512bf16").
std::string families(const KernelPlan& plan) {
  std::string out;
  for (const auto& [from, f] : plan.forms) {
    const char* dash = std::strchr(f->name, '-');
    const std::string isa = dash ? dash + 1 : f->name;
    if (("+" + out + "+").find("+" + isa + "+") == std::string::npos) out += (out.empty() ? "" : "+") + isa;
  }
  return out;
}

// Where the oneDNN path takes over from the plan's kernels by default, for the probe message.
std::string onednn_summary(int32_t act_dtype, const KernelPlan& plan) {
  const bool bf16 = OnednnPath::multiplies_bf16(act_dtype == NIBBLE_DTYPE_BF16);
  const int64_t from = onednn_from_m(bf16, plan, OnednnCpu::this_cpu());
  if (from == INT64_MAX) return "";
  return std::string(bf16 ? ", but onednn-bf16" : ", but onednn-f32") + " from M = " + std::to_string(from);
}

int32_t probe(char* msg, size_t cap) {
  const std::string why = env_knob_error();
  if (!why.empty()) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "%s", why.c_str());
  const KernelPlan& bf16 = kernel_plan(NIBBLE_DTYPE_BF16);
  const KernelPlan& f32 = kernel_plan(NIBBLE_DTYPE_F32);
  const KernelPlan& bf16_8bit = kernel_plan(NIBBLE_DTYPE_BF16, 8);
  const char* amx = amx_unavailable();
  const size_t nodes = process_numa_nodes().size();
  const std::string bf16_plan = bf16.summary + onednn_summary(NIBBLE_DTYPE_BF16, bf16),
                    f32_plan = f32.summary + onednn_summary(NIBBLE_DTYPE_F32, f32);
  return fail(NIBBLE_OK, msg, cap, "%d threads (the plugin's team%s); bf16 activations: %s kernels: %s; 8-bit layers, bf16 activations: %s; f32 activations: %s kernels: %s; AMX: %s; prefetch: %s; calibration: %s",
              num_threads(), nodes > 1 ? (", workers spread over " + std::to_string(nodes) + " NUMA nodes").c_str() : "",
              families(bf16).c_str(), bf16_plan.c_str(), bf16_8bit.summary.c_str(), families(f32).c_str(), f32_plan.c_str(),
              amx ? amx : "available", prefetch_summary().c_str(), calibration_report().empty() ? "none" : calibration_report().c_str());
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
      p->plan = &kernel_plan(s->act_dtype, s->bits);
      if (s->bits == 8) {
        p->w = prepare_cpu_weights_8bit(*s, *w);  // nibble rows: the layer's own bytes
        p->codes = " (8-bit codes as nibble rows)";  // describe_kernel: or as bytes
      } else if (s->bits == 2 && p->plan->two_bit()) {
        p->w = prepare_cpu_weights(*s, *w);  // native 2-bit codes: every form of the plan reads them
        p->codes = " (2-bit codes)";
      } else if (plugin::needs_nibble_planes(*s)) {
        p->codes = s->bits == 2 ? " (2-bit codes as nibble planes)" : " (3-bit codes as nibble planes)";
        const plugin::NibblePlanes planes = plugin::make_nibble_planes(*s, *w);
        p->w = prepare_cpu_weights(planes.spec, planes.weights());
        read_x_through(p->w, planes.x_rows, planes.real_k);
      } else {
        p->w = prepare_cpu_weights(*s, *w);
      }
      if (p->plan->uses_tiles()) p->tile_steps = amx_tile_steps(p->w);
      if (const auto& nodes = process_numa_nodes(); nodes.size() > 1) {
        p->node_tiles = node_tiles(p->w.tiles, members_per_node(num_threads()), 8);
        place_codes(p->w, p->node_tiles, nodes);  // where it fails, only the speed suffers
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

// The first exception a member of a job threw. A member that throws must not leave the others
// waiting: every unit of a dynamic job is counted (TeamCount) whether it was done, failed or
// skipped after a failure, so the phases still end, and apply rethrows once the team is done.
struct JobError {
  std::mutex mu;
  std::exception_ptr first;
  std::atomic<bool> failed{false};
  template <class F>
  void guard(F&& f) {
    if (failed.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!first) first = std::current_exception();
      failed.store(true, std::memory_order_relaxed);
    }
  }
  void rethrow() {
    if (first) std::rethrow_exception(first);
  }
};

// Units [0, n) of a phase of a dynamic job, taken one at a time by whichever members come.
struct alignas(64) UnitCounter {
  std::atomic<int64_t> next{0};
  template <class F>
  void take_all(int64_t n, F&& f) {
    for (int64_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < n;) f(u);
  }
};

// Column ranges of y for the phases that write whole columns (store, the sum of K slices): a few
// per member, whole tiles each.
struct ColumnUnits {
  int64_t n, tiles, cols;
  ColumnUnits(const CpuWeights& w, int members)
      : n(std::min<int64_t>(w.tiles, 4 * int64_t(members))), tiles(w.tiles), cols(w.n) {}
  int64_t c0(int64_t u) const { return std::min(cols, tiles * u / n * kTileN); }
  int64_t c1(int64_t u) const { return std::min(cols, tiles * (u + 1) / n * kTileN); }
};

int64_t gemm_pieces_per_member() {
  const char* env = std::getenv("NIBBLE_CPU_GEMM_PIECES");  // checked by env_knob_error
  return env && *env ? std::max(1LL, std::strtoll(env, nullptr, 10)) : kGemmPiecesPerMember;
}

bool split_k_allowed() {
  const char* env = std::getenv("NIBBLE_CPU_SPLIT_K");
  return !env || std::strcmp(env, "0") != 0;
}

// The oneDNN path: the team gathers x as f32 rows, oneDNN (its own OpenMP threads) multiplies,
// the team stores y; both phases are dynamic jobs (units from a counter).
void apply_onednn(const Prepared& p, const void* x, int64_t m, void* y_out) {
  const CpuWeights& w = p.w;
  Scratch& sc = t_scratch;
  ThreadTeam& team = ThreadTeam::process();
  const XLayout l{XForm::kF32, 1, 0};  // rb = 1: xp is plain row-major [m][rows]
  const int64_t ldy = p.onednn->y_stride();
  sc.xp.resize(size_t(x_buffer_words(w, l, m)));
  sc.xs.resize(size_t(m * w.segments() * 2));
  sc.y.resize(size_t(m * ldy));
  const int members = int(std::min<int64_t>(num_threads(), std::max<int64_t>(m, w.tiles)));
  JobError err;
  const int64_t gather_units = gather_x_units(w, l, m, members);
  UnitCounter gathers;
  auto gather = [&](const TeamMember&) {
    gathers.take_all(gather_units, [&](int64_t u) {
      err.guard([&] { gather_x_unit(w, x, p.spec.act_dtype, l, m, members, u, sc.xp.data(), sc.xs.data()); });
    });
  };
  team.run_dynamic(members, gather);
  err.rethrow();
  p.onednn->run(sc.xp.data(), m, sc.y.data());
  const ColumnUnits cols(w, members);
  UnitCounter stores;
  auto store = [&](const TeamMember&) {
    stores.take_all(cols.n, [&](int64_t u) {
      err.guard(
          [&] { store_y(w, sc.y.data(), ldy, DType(p.spec.act_dtype), m, y_out, cols.c0(u), cols.c1(u)); });
    });
  };
  team.run_dynamic(members, store);
  err.rethrow();
}

int32_t apply(const nibble_prepared* h, const nibble_tensor* x, nibble_tensor* y, void*, char* msg,
              size_t cap) {
  return guarded(msg, cap, [&]() -> int32_t {
    if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
    const auto& p = *reinterpret_cast<const Prepared*>(h);
    const CpuWeights& w = p.w;
    if (int32_t st = plugin::check_io(x, "x", p.spec.act_dtype, w.k, -1, msg, cap)) return st;
    const int64_t m = x->shape[0];
    if (int32_t st = plugin::check_io(y, "y", p.spec.act_dtype, w.n, m, msg, cap)) return st;
    if (runs_onednn(p, m)) {
      apply_onednn(p, x->data, m, y->data);
      return NIBBLE_OK;
    }
    if (m >= onednn_min_m(p) && onednn_forced())
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "the oneDNN path (NIBBLE_CPU_PATH=onednn) cannot run: %s",
                  openmp_fork_reason());
    Scratch& sc = t_scratch;
    ThreadTeam& team = ThreadTeam::process();
    const KernelForm& form = p.plan->at(m);
    if (w.code_bits == 2 && !form.two_bit)
      return fail(NIBBLE_ERR_INTERNAL, msg, cap, "layer prepared with 2-bit codes, which kernel %s does not read",
                  form.name);
    const XLayout l = form.layout(p.spec.act_dtype, m, p.tile_steps, w.byte_rows);
    const int64_t ldy = fused_y_stride(w), blocks = (m + l.rb - 1) / l.rb;
    const int want = num_threads();
    // K slices where the tiles are too few for the team (partial sums, added up in slice order).
    const int64_t slices = split_k_allowed() ? k_slices(w, form.quantum, form.min_quanta, want) : 1;
    const std::vector<int64_t> bounds =
        slices > 1 ? slice_bounds(w, slices) : std::vector<int64_t>{0, w.segments()};
    const int64_t nslices = int64_t(bounds.size()) - 1;
    const int members = int(std::min<int64_t>(want, w.tiles * nslices));
    sc.xp.resize(size_t(x_buffer_words(w, l, m)));
    sc.xs.resize(size_t(blocks * w.segments() * 2 * l.rb));
    sc.y.resize(size_t(nslices * m * ldy));
    const DType dt = DType(p.spec.act_dtype);
    const FusedArgs args{&w,           sc.xp.data(),
                         sc.xs.data(), m,
                         l.rb,         sc.y.data(),
                         ldy,          p.spec.act_dtype == NIBBLE_DTYPE_F32,
                         l.form,       0,
                         w.segments(), l.tile_steps,
                         stream_prefetch()};
    const int64_t chunk =
        piece_tiles(w.tiles, members, form.compute_bound, form.quantum, form.chunk, gemm_pieces_per_member());
    std::vector<int> member_nodes(static_cast<size_t>(members));
    for (int i = 0; i < members; ++i) member_nodes[size_t(i)] = team.node_of(i);
    WorkQueue queue({w.tiles, nslices, chunk, p.node_tiles}, member_nodes);
    const uint32_t pieces = queue.pieces();
    const int64_t gather_units = gather_x_units(w, l, m, members);
    const ColumnUnits cols(w, members);
    UnitCounter gathers, sums;
    TeamCount gathered, computed;
    JobError err;
    // One dynamic job per call: whichever members come gather x unit by unit, wait until all of
    // it is there, then compute their runs of pieces (stealing from the others' once theirs is
    // done) and, in one K slice, store their columns of y. Split in K, the slices are added up
    // and stored by column ranges once every piece is computed; a member that finds every
    // range taken leaves without waiting.
    auto job = [&](const TeamMember& me) {
      gathers.take_all(gather_units, [&](int64_t u) {
        err.guard([&] {
          gather_x_unit(w, x->data, p.spec.act_dtype, l, m, members, u, sc.xp.data(), sc.xs.data());
        });
        gathered.add(1);
      });
      gathered.wait_until(uint32_t(gather_units), me);
      for (WorkRange r; queue.next(me.index(), r);) {
        err.guard([&] {
          FusedArgs a = args;
          a.y = sc.y.data() + r.slice * m * ldy;
          a.seg0 = bounds[size_t(r.slice)];
          a.seg1 = bounds[size_t(r.slice) + 1];
          form.fn(a, r.t0, r.t1);
          if (nslices == 1) store_y(w, a.y, ldy, dt, m, y->data, r.t0 * kTileN, std::min(w.n, r.t1 * kTileN));
        });
        if (nslices > 1) computed.add(1);
      }
      if (nslices == 1) return;
      sums.take_all(cols.n, [&](int64_t u) {
        computed.wait_until(pieces, me);
        err.guard([&] {
          const int64_t c0 = cols.c0(u), c1 = cols.c1(u);
          float* y0 = sc.y.data();
          for (int64_t s = 1; s < nslices; ++s)
            for (int64_t r = 0; r < m; ++r) {
              const float* ys = sc.y.data() + (s * m + r) * ldy;
              for (int64_t c = c0; c < c1; ++c) y0[r * ldy + c] += ys[c];
            }
          store_y(w, y0, ldy, dt, m, y->data, c0, c1);
        });
      });
    };
    team.run_dynamic(members, job);
    err.rethrow();
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
    if (const std::string why = dense_unsupported(s->k, s->n, s->act_dtype); !why.empty())
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "dense baseline: %s", why.c_str());
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
    if (openmp_lost_to_fork())
      return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "the oneDNN dense baseline cannot run: %s", openmp_fork_reason());
    d.mm->run(x->data, y->data, x->shape[0]);
    return NIBBLE_OK;
  });
}

void dense_release(nibble_dense* h) { delete reinterpret_cast<Dense*>(h); }

int32_t describe_kernel(const nibble_prepared* h, int64_t m, char* msg, size_t cap) {
  if (!h) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null prepared handle");
  const auto& p = *reinterpret_cast<const Prepared*>(h);
  if (runs_onednn(p, m)) return fail(NIBBLE_OK, msg, cap, "%s%s", p.onednn->name(), p.codes);
  const KernelForm& form = p.plan->at(m);
  if (const XForm f = form.layout(p.spec.act_dtype, m, p.tile_steps, p.w.byte_rows).form;
      f == XForm::kF32Bytes || f == XForm::kInt8Bytes)
    return fail(NIBBLE_OK, msg, cap, "%s (8-bit codes as bytes)", form.name);
  return fail(NIBBLE_OK, msg, cap, "%s%s", form.name, p.codes);
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
