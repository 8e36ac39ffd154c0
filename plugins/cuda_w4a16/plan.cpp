// The kernel menu and the choice per call (plan.h).
#include "plan.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "nibble/plugin_abi.h"

namespace nibble::cuda {

namespace {
constexpr int32_t kAnyCc = 999;
constexpr int64_t kMi = int64_t(1) << 20;
}  // namespace

// Compute capabilities: SASS is built for the architectures of option nvcc_archs (sm_80 and sm_90
// by default) plus PTX of the newest, so the sm_80+ kernels run on any later GPU.
// clang-format off
const KernelDesc kKernelTable[] = {
    {"s1", kS1, Family::mma, 80, kAnyCc, 4, "tiled stream-K, BN 128 x BM 8, 4 warps, cp.async pipeline, mma.sync"},
    {"s2", kS2, Family::mma, 80, kAnyCc, 4, "tiled stream-K, BN 128 x BM 16, 4 warps"},
    {"s4", kS4, Family::mma, 80, kAnyCc, 6, "tiled stream-K, BN 128 x BM 32, 4 warps"},
    {"s8", kS8, Family::mma, 80, kAnyCc, 8, "tiled stream-K, BN 128 x BM 64, 4 warps"},
    {"l", kL, Family::mma, 80, kAnyCc, 8, "tiled stream-K, BN 256 x BM 128, 8 warps of 64 x 64"},
    {"v1", kV1, Family::gemv, 80, kAnyCc, 0, "streaming GEMV, 64 features x 8 rows per block, K split"},
    {"v2", kV2, Family::gemv, 80, kAnyCc, 0, "streaming GEMV, 64 x 16 rows"},
    {"v4", kV4, Family::gemv, 80, kAnyCc, 0, "streaming GEMV, 64 x 32 rows, half the weights in flight"},
    {"v2u2", kV2u2, Family::gemv, 80, kAnyCc, 0, "streaming GEMV, 64 x 16 rows, half the weights in flight"},
    {"wg16",  kWg16,  Family::wgmma, 90, 90,    4, "sm_90a warp-specialized stream-K, BN 256 x BM 16: bulk-copy/mbarrier pipeline, wgmma (A from registers)"},
    {"wg32",  kWg32,  Family::wgmma, 90, 90,    4, "sm_90a, BN 256 x BM 32"},
    {"wg64",  kWg64,  Family::wgmma, 90, 90,    4, "sm_90a, BN 256 x BM 64"},
    {"wg128", kWg128, Family::wgmma, 90, 90,    4, "sm_90a, BN 256 x BM 128"},
    {"wg256", kWg256, Family::wgmma, 90, 90,    4, "sm_90a, BN 128 x BM 256: each consumer warpgroup m64n256 (half the dequantization per product of BN 256 x BM 128)"},
    {"cublas", kCublas, Family::cublas, 80, kAnyCc, 0, "dequantize to a dense temporary, then cublasGemmEx"},
};
// clang-format on
const int kKernelTableSize = int(sizeof kKernelTable / sizeof kKernelTable[0]);

// The automatic choice, first match wins. Every architecture range ends in rows that match any
// shape, so some row always applies; a row whose kernel declines the call (too many rows for one
// launch, cuBLAS missing or below `cublas_min_m`) is passed over.
// clang-format off
//   cc        M            weights (K*N)     K              N              kernel
const ChoiceRule kChoiceRules[] = {
    // Hopper, M = 17-256 (measured: docs/cuda.md "Round 3"): the wgmma kernels with their default
    // paths (x image, weights by cp.async, the split fix-up where it pays) from M = 33 on every
    // shape and from M = 17 on layers of 32 Mi weights or more, but dequantize + cuBLAS on the
    // smallest layers at M >= 65. Past M = 256 dequantize + cuBLAS, but for the rows below. At
    // M = 17-32 the GEMV v2 on layers of 52-96 Mi (docs/cuda.md "Whole batches and wider GEMV warps").
    {90, 90, 17, 32, 52 * kMi, 96 * kMi, 0, 0, 0, 0, kV2},
    {90, 90, 17, 32, 32 * kMi, 0, 0, 0, 0, 0, kWg32},
    {90, 90, 33, 64, 0, 0, 0, 0, 0, 0, kWg64},
    {90, 90, 65, 128, 0, 20 * kMi - 1, 0, 0, 0, 0, kCublas},
    {90, 90, 65, 128, 0, 24 * kMi, 0, 0, 0, 0, kWg64},
    {90, 90, 65, 128, 0, 0, 0, 0, 0, 0, kWg128},
    {90, 90, 129, 256, 0, 32 * kMi - 1, 0, 0, 0, 0, kCublas},
    // 8-bit layers (K doubled here: two nibble planes) up to 128 Mi at M = 129-256: dequantize +
    // cuBLAS, whose dense copy sums the planes, measured faster than wg128 there (docs/cuda.md
    // "8-bit layers on the dense path").
    {90, 90, 129, 256, 0, 128 * kMi, 0, 0, 0, 0, kCublas, ActRule::any, 8, 0},
    // wg256 (BN 128 x BM 256) where it pads M no further than wg128 and was measured faster: both
    // pad M = 129-256 to 256 rows and 385-512 to 512. At M = 384 and 640 it would pad to 512 and
    // 768 rows against wg128's 384 and 640, and was slower (docs/cuda.md "Whole waves in raster
    // order, and a BN 128 x BM 256 tile").
    {90, 90, 129, 256, 0, 0, 0, 0, 0, 0, kWg256},
    {90, 90, 129, 256, 0, 0, 0, 0, 0, 0, kWg128},  // where wg256 declines
    // Past M = 256 on 4-bit layers (docs/cuda.md "Past M = 256"): the wgmma kernel where it was
    // measured faster than dequantize + cuBLAS, M = 257-384 from 32 Mi weights, to 640 from 80 Mi,
    // and to 1024 on the 70B down projection (28672x8192: K >= 20000, 192-256 Mi weights). 8-bit
    // layers (two nibble planes: twice the products) are not in these rows.
    {90, 90, 257, 384, 32 * kMi, 0, 0, 0, 0, 0, kWg128, ActRule::any, 0, 4},
    {90, 90, 385, 512, 80 * kMi, 0, 0, 0, 0, 0, kWg256, ActRule::any, 0, 4},
    {90, 90, 385, 512, 80 * kMi, 0, 0, 0, 0, 0, kWg128, ActRule::any, 0, 4},  // where wg256 declines
    {90, 90, 513, 640, 80 * kMi, 0, 0, 0, 0, 0, kWg128, ActRule::any, 0, 4},
    {90, 90, 641, 1024, 192 * kMi, 256 * kMi, 20000, 0, 0, 0, kWg128, ActRule::any, 0, 4},
    // Every architecture, Hopper's other shapes and M included:
    {80, kAnyCc, 1, 8, 0, 0, 0, 0, 0, 0, kV1},
    // M = 9-16 (docs/cuda.md "The GEMV's grid"), else v1 over two m tiles. fp16: v2u2 on layers
    // of 64 Mi packed weights or more (8 bits count twice: two nibble planes). bf16: v2u2 from 48 Mi
    // packed weights at any N, from 24 Mi at N >= 6144 (with whole batches; below, v1 was faster).
    {80, kAnyCc, 9, 16, 64 * kMi, 0, 0, 0, 0, 0, kV2u2, ActRule::f16},
    {80, kAnyCc, 9, 16, 48 * kMi, 0, 0, 0, 0, 0, kV2u2, ActRule::bf16},
    {80, kAnyCc, 9, 16, 24 * kMi, 0, 0, 0, 6144, 0, kV2u2, ActRule::bf16},
    {80, kAnyCc, 9, 16, 0, 0, 0, 0, 0, 0, kV1},
    {80, kAnyCc, 17, 32, 0, 0, 8192, 16383, 10240, 0, kV2},
    {80, kAnyCc, 17, 32, 0, 0, 8192, 0, 8192, 0, kV4},
    {80, kAnyCc, 17, 32, 48 * kMi, 0, 0, 0, 0, 0, kV4},
    {80, kAnyCc, 17, 32, 0, 0, 0, 0, 0, 0, kV1},
    {80, kAnyCc, 33, 64, 0, 64 * kMi - 1, 0, 0, 0, 0, kS4},
    {80, kAnyCc, 33, 64, 0, 0, 0, 0, 0, 0, kS8},
    {80, kAnyCc, 65, 128, 96 * kMi, 0, 0, 0, 0, 0, kL},
    {80, kAnyCc, 65, 0, 0, 0, 0, 0, 0, 0, kCublas},
    {80, kAnyCc, 65, 0, 0, 0, 0, 0, 0, 0, kL},
};
// clang-format on
const int kChoiceRulesSize = int(sizeof kChoiceRules / sizeof kChoiceRules[0]);

const KernelDesc* find_kernel(std::string_view name) {
  for (const KernelDesc& d : kKernelTable)
    if (name == d.name) return &d;
  return nullptr;
}

const KernelDesc& kernel_desc(KernelId id) { return kKernelTable[int(id)]; }

bool sm90a_code(const KernelDesc& d) { return d.min_cc == 90 && d.max_cc == 90; }

namespace {

bool in(int64_t v, int64_t lo, int64_t hi) { return v >= lo && (hi == 0 || v <= hi); }

std::string cc_name(int32_t cc) { return "sm_" + std::to_string(cc); }

std::string kernel_names() {
  std::string s = "auto";
  for (const KernelDesc& d : kKernelTable) s += std::string(", ") + d.name;
  return s;
}

bool parse_int(std::string_view v, int64_t lo, int64_t hi, int64_t* out) {
  const std::string s(v);
  char* end = nullptr;
  const long long n = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || !end || *end || n < lo || n > hi) return false;
  *out = n;
  return true;
}

}  // namespace

int32_t set_plan_option(PlanOptions& o, std::string_view key, std::string_view value, bool cublas,
                        std::string* why) {
  if (key == "kernel") {
    if (value == "auto") {
      o.forced = -1;
      return NIBBLE_OK;
    }
    const KernelDesc* d = find_kernel(value);
    if (!d) {
      *why = "kernel: expected one of " + kernel_names() + ", found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    if (d->family == Family::cublas && !cublas) {
      *why = "kernel=cublas: cuBLAS cannot be loaded";
      return NIBBLE_ERR_UNSUPPORTED;
    }
    o.forced = d->id;
    return NIBBLE_OK;
  }
  // The options that are 0 or 1.
  static constexpr std::pair<std::string_view, bool PlanOptions::*> kSwitches[] = {
      {"overlap", &PlanOptions::overlap},
      {"gemv_whole", &PlanOptions::gemv_whole},
      {"gemv_planes8", &PlanOptions::gemv_planes8},
      {"dense_overlap", &PlanOptions::dense_overlap}};
  for (const auto& [name, member] : kSwitches) {
    if (key != name) continue;
    if (value != "0" && value != "1") {
      *why = std::string(name) + ": expected 0 or 1, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.*member = value == "1";
    return NIBBLE_OK;
  }
  int64_t n = 0;
  if (key == "cublas_min_m") {
    if (!parse_int(value, 0, INT64_MAX, &n)) {
      *why = "cublas_min_m: expected an integer >= 0, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.cublas_min_m = n;
    return NIBBLE_OK;
  }
  if (key == "min_stages") {
    if (!parse_int(value, 0, 1 << 20, &n)) {
      *why = "min_stages: expected 0 (default) or a count of k stages, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.min_stages = int32_t(n);
    return NIBBLE_OK;
  }
  if (key == "wgmma_x") {
    if (value != "copy" && value != "image") {
      *why = "wgmma_x: expected copy or image, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.wgmma_x_image = value == "image";
    return NIBBLE_OK;
  }
  if (key == "wgmma_w") {
    if (value != "bulk" && value != "lsu") {
      *why = "wgmma_w: expected bulk or lsu, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.wgmma_w_lsu = value == "lsu";
    return NIBBLE_OK;
  }
  if (key == "wgmma_fixup") {
    if (value != "last" && value != "split" && value != "auto") {
      *why = "wgmma_fixup: expected last, split or auto, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.wgmma_fixup = value == "last"    ? PlanOptions::Fixup::last
                    : value == "split" ? PlanOptions::Fixup::split
                                       : PlanOptions::Fixup::automatic;
    return NIBBLE_OK;
  }
  if (key == "wgmma_sched") {
    if (value != "stream_k" && value != "waves" && value != "auto") {
      *why = "wgmma_sched: expected stream_k, waves or auto, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.wgmma_sched = value == "stream_k" ? PlanOptions::Sched::stream_k
                    : value == "waves"  ? PlanOptions::Sched::waves
                                        : PlanOptions::Sched::automatic;
    return NIBBLE_OK;
  }
  if (key == "wgmma_cluster") {
    if (value != "off" && value != "on") {
      *why = "wgmma_cluster: expected off or on, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.wgmma_cluster = value == "on";
    return NIBBLE_OK;
  }
  if (key == "gemv_prefetch") {
    if (!parse_int(value, 0, PlanOptions::kMaxGemvPrefetch, &n)) {
      *why = "gemv_prefetch: expected a count of batches from 0 (none) to " +
             std::to_string(PlanOptions::kMaxGemvPrefetch) + ", found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.gemv_prefetch = int32_t(n);
    return NIBBLE_OK;
  }
  if (key == "dense_chunk_mib") {
    if (!parse_int(value, 1, 1 << 16, &n)) {
      *why = "dense_chunk_mib: expected MiB from 1 to 65536, found '" + std::string(value) + "'";
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    o.dense_chunk_mib = int32_t(n);
    return NIBBLE_OK;
  }
  *why = "unknown option '" + std::string(key) +
         "' (known: kernel, cublas_min_m, overlap, min_stages, wgmma_x, wgmma_w, wgmma_fixup, wgmma_sched, wgmma_cluster, "
         "gemv_prefetch, "
         "gemv_planes8, gemv_whole, dense_chunk_mib, dense_overlap)";
  return NIBBLE_ERR_UNSUPPORTED;
}

PlanOptions options_from_environment() {
  PlanOptions o;
  std::string ignored;
  // An unknown kernel name in the environment leaves the automatic choice (kernel=... through
  // set_option reports it); cublas is accepted here and declined per call if it does not load.
  if (const char* k = std::getenv("NIBBLE_CUDA_KERNEL")) set_plan_option(o, "kernel", k, true, &ignored);
  if (const char* m = std::getenv("NIBBLE_CUDA_CUBLAS_MIN_M"))
    set_plan_option(o, "cublas_min_m", m, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_OVERLAP")) set_plan_option(o, "overlap", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_MIN_STAGES")) set_plan_option(o, "min_stages", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_WGMMA_X")) set_plan_option(o, "wgmma_x", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_WGMMA_W")) set_plan_option(o, "wgmma_w", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_WGMMA_FIXUP")) set_plan_option(o, "wgmma_fixup", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_WGMMA_SCHED")) set_plan_option(o, "wgmma_sched", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_WGMMA_CLUSTER"))
    set_plan_option(o, "wgmma_cluster", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_GEMV_PREFETCH")) set_plan_option(o, "gemv_prefetch", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_GEMV_PLANES8")) set_plan_option(o, "gemv_planes8", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_GEMV_WHOLE")) set_plan_option(o, "gemv_whole", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_DENSE_CHUNK_MIB"))
    set_plan_option(o, "dense_chunk_mib", v, true, &ignored);
  if (const char* v = std::getenv("NIBBLE_CUDA_DENSE_OVERLAP")) set_plan_option(o, "dense_overlap", v, true, &ignored);
  return o;
}

bool one_pass8(const KernelDesc& d, const ShapeFacts& s) {
  return s.planes8 && (d.family == Family::mma || d.family == Family::wgmma);
}

const KernelInfo& kernel_info(const KernelDesc& d, const DeviceFacts& dev, const ShapeFacts& s) {
  return one_pass8(d, s) && dev.info8 ? dev.info8[d.id] : dev.info[d.id];
}

int32_t kernel_stages(const KernelDesc& d, const ShapeFacts& s) { return one_pass8(d, s) ? s.kt8 : s.kt; }

std::string decline_reason(const KernelDesc& d, const DeviceFacts& dev, const ShapeFacts& s, int64_t m) {
  if (dev.cc < d.min_cc || dev.cc > d.max_cc)
    return std::string("kernel ") + d.name + " runs on " + cc_name(d.min_cc) +
           (d.max_cc == kAnyCc     ? " and newer"
            : d.max_cc == d.min_cc ? " only"
                                   : " to " + cc_name(d.max_cc)) +
           "; the device is " + cc_name(dev.cc);
  if (d.family == Family::cublas) return dev.cublas ? "" : "cuBLAS cannot be loaded";
  if (sm90a_code(d) && !dev.sm90a_built)
    return std::string("kernel ") + d.name + " is sm_90a code, not in this build (meson option nvcc_archs has no 90)";
  if (d.family == Family::wgmma && s.bits == 8 && !one_pass8(d, s))
    return std::string("kernel ") + d.name +
           " runs 8-bit layers only with both nibble planes in one pass, which needs the planes paired and zero "
           "points (two planes apart would round each weight twice)";
  const KernelInfo& ki = kernel_info(d, dev, s);
  if (ki.slots <= 0)
    return std::string("kernel ") + d.name + " cannot be resident on this device (" +
           std::to_string(ki.threads) + " threads, " + std::to_string(ki.smem_bytes) +
           " bytes of shared memory per block)";
  const int64_t m_tiles = (m + ki.bm - 1) / ki.bm, n_tiles = s.n_pad / ki.bn;
  if (d.family == Family::gemv && m_tiles > 65535)
    return std::string("kernel ") + d.name + " takes at most " + std::to_string(65535 * int64_t(ki.bm)) +
           " rows per call, found M=" + std::to_string(m);
  if (m_tiles * n_tiles * s.kt >= (int64_t(1) << 31))
    return std::string("M=") + std::to_string(m) + " x N=" + std::to_string(s.n) +
           " x K=" + std::to_string(s.k) + " is too large for one launch of " + d.name;
  return "";
}

namespace {

// The split fix-up pays where a block has few k stages, so that summing a shared tile is a large
// share of its time (the measurements behind the bound: docs/cuda.md, Round 3).
constexpr int64_t kSplitFixupMaxStages = 48;

// Launch geometry of a kernel that can take the call.
void geometry(const KernelDesc& d, const DeviceFacts& dev, const ShapeFacts& s, const PlanOptions& o,
              int64_t m, Plan& plan) {
  if (d.family == Family::cublas) return;
  const KernelInfo& ki = kernel_info(d, dev, s);
  plan.tiled_planes8 = one_pass8(d, s);
  plan.m_tiles = int32_t((m + ki.bm - 1) / ki.bm);
  plan.n_tiles = int32_t(s.n_pad / ki.bn);
  const int64_t slots = std::max(1, ki.slots);
  plan.overlap = o.overlap && dev.cc >= 90 && d.family != Family::mma;  // PDL: the GEMV and wgmma kernels
  plan.x_image = o.wgmma_x_image && d.family == Family::wgmma;
  plan.w_lsu = o.wgmma_w_lsu && d.family == Family::wgmma;
  plan.waves = d.family == Family::wgmma &&
               (o.wgmma_sched == PlanOptions::Sched::waves ||
                (o.wgmma_sched == PlanOptions::Sched::automatic && ki.bm >= 128));
  if (d.family == Family::gemv) {
    plan.prefetch = o.gemv_prefetch;
    plan.planes8 = o.gemv_planes8;
    plan.whole = o.gemv_whole;
    // K splits. Blocks run in waves of `slots`, so the time is about
    //   waves(s) * (batches per warp + fixed cost),  waves(s) = ceil(tiles * s / slots),
    // the fixed cost (launch, block sum, split fix-up) taken as 4 batches. The split with the
    // least is used, with at least one batch per warp (or `min_stages` batches if set).
    const int64_t tiles = int64_t(plan.m_tiles) * plan.n_tiles;
    const int64_t batches = (s.ku + ki.step_units - 1) / ki.step_units;
    const int64_t warps = kGemvWarps;
    if (o.min_stages > 0) {
      plan.grid = int32_t(std::clamp<int64_t>(batches / (warps * o.min_stages), 1, 65535));
      return;
    }
    const int64_t most = std::clamp<int64_t>(batches / warps, 1, 1024);
    double best = 0;
    for (int64_t sp = 1; sp <= most; ++sp) {
      const double t =
          double((tiles * sp + slots - 1) / slots) * (double(batches) / double(warps * sp) + 4.0);
      if (sp == 1 || t < best) best = t, plan.grid = int32_t(sp);
    }
    return;
  }
  // Stream-K: at most one wave of resident blocks, each with at least `min_stages` k stages.
  // With clusters of 2 (wgmma, x image, 4-bit, BM >= 128, an even number of n tiles) the same over
  // clusters: tiles of 2 n tiles, clusters that the device holds at once.
  const int64_t stages = o.min_stages > 0 ? o.min_stages : d.min_stages;
  plan.cluster = d.family == Family::wgmma && o.wgmma_cluster && plan.x_image && !plan.tiled_planes8 &&
                 ki.bm >= 128 && plan.n_tiles % 2 == 0 && ki.cluster_slots >= 2;
  const int64_t cs = plan.cluster ? 2 : 1;
  const int64_t work = int64_t(plan.m_tiles) * (plan.n_tiles / cs) * kernel_stages(d, s);
  const int64_t units = std::min(std::max<int64_t>(1, work / stages), (plan.cluster ? ki.cluster_slots : slots) / cs);
  plan.grid = int32_t(std::min(units, work) * cs);
  if (d.family == Family::wgmma && !plan.cluster)  // a cluster launch is not cooperative
    plan.split_fixup = o.wgmma_fixup == PlanOptions::Fixup::split ||
                       (o.wgmma_fixup == PlanOptions::Fixup::automatic && ki.bm >= 64 &&
                        work <= kSplitFixupMaxStages * plan.grid);
}

}  // namespace

Plan make_plan(const ShapeFacts& s, const DeviceFacts& dev, const PlanOptions& o, int64_t m) {
  Plan plan;
  if (o.forced >= 0) {
    const KernelDesc& d = kernel_desc(KernelId(o.forced));
    plan.kernel = d.id;
    if (std::string why = decline_reason(d, dev, s, m); !why.empty()) {
      plan.declined = why;
      return plan;
    }
    geometry(d, dev, s, o, m, plan);
    return plan;
  }
  const int64_t weights = s.k * s.n;
  for (const ChoiceRule& r : kChoiceRules) {
    if (!in(dev.cc, r.min_cc, r.max_cc) || !in(m, r.min_m, r.max_m) ||
        !in(weights, r.min_weights, r.max_weights) || !in(s.k, r.min_k, r.max_k) ||
        !in(s.n, r.min_n, r.max_n) || (r.act == ActRule::f16 && dev.bf16) ||
        (r.act == ActRule::bf16 && !dev.bf16) || (r.min_bits != 0 && s.bits < r.min_bits) ||
        (r.max_bits != 0 && s.bits > r.max_bits))
      continue;
    const KernelDesc& d = kernel_desc(r.kernel);
    if (d.family == Family::cublas && (o.cublas_min_m <= 0 || m < o.cublas_min_m)) continue;
    if (!decline_reason(d, dev, s, m).empty()) continue;
    plan.kernel = d.id;
    geometry(d, dev, s, o, m, plan);
    return plan;
  }
  plan.declined = "no kernel of cuda_w4a16 takes M=" + std::to_string(m) + " on " + cc_name(dev.cc);
  return plan;
}

}  // namespace nibble::cuda
