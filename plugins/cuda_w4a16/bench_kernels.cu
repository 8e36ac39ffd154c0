// bench_kernels: standalone timing driver of the cuda_w4a16 kernels against cuBLAS fp16, through
// the plugin's own ABI table (linked in, so the same code as the shipped module runs).
//
//   bench_kernels [--quick] [--out FILE] [--shapes K1xN1,...] [--m M1,M2,...] [--sweep] [--check] [--read]
//
// For PERF.md's shapes and M values (G = 128, uint4b8, fp16 unless said): median of per-call
// CUDA-event timings, the weights rotated over enough copies to exceed the 60 MB L2 (the GPU is
// first kept busy by a spin kernel so that the host has queued every timed call: the events then
// time the device, not the launch path). Prints the roofline (bytes = K*N/2 + (K/G)*N*2 + 2*M*K +
// 2*M*N at the measured copy bandwidth, flops = 2*M*N*K at the measured cuBLAS rate, and at the
// nominal 4.24 TB/s and 691 TFLOP/s of PERF.md), % of roofline and the ratio to cuBLAS fp16.
// Every timed configuration is first checked against cuBLAS on the host-dequantized weights
// (relative error norm), and --check runs every kernel variant on odd M against it too.
//
// --wgmma-diag (sm_90 only): the wgmma kernel launched directly on weights packed here by the
// plugin's own repack kernels, once per variant named in NIBBLE_CUDA_WGMMA_ABLATE (a comma list of
// '+'-joined tokens, default kDiagVariants below): parts left out (nodeq, nomma, onewg, nox, now,
// noepi, nowait, noy, nofix; ring = only the weight stream through the mbarrier ring, xring = only the x
// stream), the first version's protocols (oldx, oldfix, pfence; before = both), candidates (deep: two
// wgmma groups in flight; ximg: the x image), one tile per block (nosk), fewer stages (st<N>), or a
// raw GemmParams::ablate mask (a number). Variants that leave work out are timings
// only, never checked; the others are checked against cuBLAS like every timed point. Beside them
// the plugin's own path for v1, v2u2 (M <= 64), s8, l, cublas and the same wg kernel (with
// wgmma_x=copy and =image), then one table of every variant at every point.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels.h"
#include "layout_plan.h"
#include "nibble/plugin_abi.h"
#include "plan.h"

namespace nibble::cuda {
const nibble_plugin_api* entry(uint32_t host_abi);
}

namespace {

const nibble_plugin_api* api = nullptr;
FILE* out_file = nullptr;

#define CHECK_CUDA(call)                                                                         \
  do {                                                                                           \
    cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

#define CHECK_API(call)                                                                           \
  do {                                                                                            \
    char msg_[512] = {0};                                                                         \
    char* msg = msg_;                                                                             \
    const size_t cap = sizeof msg_;                                                               \
    (void)cap;                                                                                    \
    int32_t st_ = (call);                                                                         \
    if (st_ != NIBBLE_OK) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s failed (%d): %s\n", __FILE__, __LINE__, #call, st_, msg_); \
      std::exit(3);                                                                               \
    }                                                                                             \
  } while (0)

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char buf[4096];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fputs(buf, stdout);
  std::fflush(stdout);
  if (out_file) {
    std::fputs(buf, out_file);
    std::fflush(out_file);
  }
}

// Keeps the GPU busy for about `us` microseconds so that the host can queue the timed calls.
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// sum (a - b)^2 and sum b^2 over n fp16 values, in double.
__global__ void err_kernel(const __half* a, const __half* b, size_t n, double* acc) {
  double d2 = 0, b2 = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const double x = __half2float(a[i]), y = __half2float(b[i]);
    d2 += (x - y) * (x - y);
    b2 += y * y;
    if (!isfinite(x)) d2 += 1e30;
  }
  for (int o = 16; o; o >>= 1) {
    d2 += __shfl_down_sync(0xffffffffu, d2, o);
    b2 += __shfl_down_sync(0xffffffffu, b2, o);
  }
  if ((threadIdx.x & 31) == 0) {
    atomicAdd(acc, d2);
    atomicAdd(acc + 1, b2);
  }
}

// --read: a plain read of `bytes` (16-byte loads that leave L1 alone, `kU` in flight per lane), the
// grid split into contiguous block ranges and each block's range into contiguous warp ranges, as
// the GEMV splits a layer. The xor of everything read goes to *sink only if it is 0x5eed, which
// keeps the loads without writing anything.
template <int kU>
__global__ void read_kernel(const uint4* src, size_t n16, uint32_t* sink) {
  const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const size_t per_block = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t b0 = blockIdx.x * per_block, b1 = min(n16, b0 + per_block);
  const size_t per_warp = (b1 > b0 ? b1 - b0 + warps - 1 : 0) / warps;
  const size_t w0 = b0 + warp * per_warp, w1 = min(b1, w0 + per_warp);
  uint32_t acc = 0;
  for (size_t i = w0 + lane; i < w1; i += 32 * kU) {
    uint4 v[kU];
#pragma unroll
    for (int j = 0; j < kU; ++j) {
      const size_t e = i + size_t(j) * 32;
      if (e < w1)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                     : "l"(src + e));
      else
        v[j] = make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < kU; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (acc == 0x5eedu) *sink = acc;
}

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  float uni(float a, float b) { return a + (b - a) * float(next() >> 40) * (1.0f / 16777216.0f); }
};

template <class F>
void parallel_for(int64_t n, F&& f) {
  const int nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (int t = 0; t < nt; ++t)
    th.emplace_back([&, t] {
      for (int64_t i = n * t / nt; i < n * (t + 1) / nt; ++i) f(i);
    });
  for (auto& x : th) x.join();
}

// A random layer in canonical form plus its dequantized fp16 weight [K][N].
struct Layer {
  int64_t k, n;
  int g;
  bool zp;
  std::vector<uint32_t> qweight;
  std::vector<uint8_t> zeros;
  std::vector<__half> scales, dense;
  nibble_linear_spec spec{};
};

Layer make_layer(int64_t k, int64_t n, int g, bool zp, uint64_t seed) {
  Layer l;
  l.k = k;
  l.n = n;
  l.g = g;
  l.zp = zp;
  const int64_t groups = g > 0 ? (k + g - 1) / g : 1;
  l.qweight.resize(size_t((k + 7) / 8 * n));
  l.scales.resize(size_t(groups * n));
  if (zp) l.zeros.resize(size_t(groups * n));
  parallel_for((k + 7) / 8, [&](int64_t r) {
    Rng rng(seed * 1000003 + uint64_t(r));
    for (int64_t c = 0; c < n; ++c) l.qweight[size_t(r * n + c)] = uint32_t(rng.next() >> 16);
  });
  Rng rng(seed ^ 0xabcdef);
  for (auto& s : l.scales) s = __float2half(rng.uni(0.001f, 0.006f));
  for (auto& z : l.zeros) z = uint8_t(rng.next() >> 60);
  l.dense.resize(size_t(k * n));
  parallel_for(k, [&](int64_t r) {
    const int64_t gi = g > 0 ? r / g : 0;
    for (int64_t c = 0; c < n; ++c) {
      const int q = int((l.qweight[size_t((r / 8) * n + c)] >> (4 * (r % 8))) & 15);
      const int z = zp ? l.zeros[size_t(gi * n + c)] : 8;
      l.dense[size_t(r * n + c)] = __float2half(float(q - z) * __half2float(l.scales[size_t(gi * n + c)]));
    }
  });
  l.spec.struct_size = sizeof(nibble_linear_spec);
  l.spec.layer_name = "bench";
  l.spec.k = l.spec.full_k = k;
  l.spec.n = l.spec.full_n = n;
  l.spec.bits = 4;
  l.spec.group_size = g;
  l.spec.weight_type = zp ? NIBBLE_WT_UINT4 : NIBBLE_WT_UINT4B8;
  l.spec.act_dtype = NIBBLE_DTYPE_F16;
  l.spec.scale_dtype = NIBBLE_DTYPE_F16;
  return l;
}

nibble_prepared* prepare(const Layer& l) {
  nibble_canonical_weights w{};
  w.qweight = l.qweight.data();
  w.zeros = l.zp ? l.zeros.data() : nullptr;
  w.scales = l.scales.data();
  nibble_prepared* h = nullptr;
  CHECK_API(api->process_weights(&l.spec, &w, nullptr, &h, msg, cap));
  return h;
}

void apply(nibble_prepared* h, const void* x, void* y, int64_t m, const Layer& l) {
  nibble_tensor tx{const_cast<void*>(x), NIBBLE_DTYPE_F16, 2, {m, l.k, 0, 0}};
  nibble_tensor ty{y, NIBBLE_DTYPE_F16, 2, {m, l.n, 0, 0}};
  CHECK_API(api->apply(h, &tx, &ty, nullptr, msg, cap));
}
void dense_apply(nibble_dense* h, const void* x, void* y, int64_t m, const Layer& l) {
  nibble_tensor tx{const_cast<void*>(x), NIBBLE_DTYPE_F16, 2, {m, l.k, 0, 0}};
  nibble_tensor ty{y, NIBBLE_DTYPE_F16, 2, {m, l.n, 0, 0}};
  CHECK_API(api->dense_apply(h, &tx, &ty, nullptr, msg, cap));
}

long long g_spin_cycles = 0;
bool have_cublas = false;
int device_cc = 0;  // compute capability, major * 10 + minor

// Median microseconds of one call of fn(i), i rotating over the weight copies.
template <class F>
double time_calls(F&& fn, int reps) {
  fn(0);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(size_t(2 * reps));
  for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
  spin_kernel<<<1, 1>>>(g_spin_cycles);
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(ev[size_t(2 * r)], nullptr));
    fn(r + 1);
    CHECK_CUDA(cudaEventRecord(ev[size_t(2 * r + 1)], nullptr));
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, ev[size_t(2 * r)], ev[size_t(2 * r + 1)]));
    us.push_back(ms * 1e3);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

double rel_err(const void* a, const void* b, size_t n) {
  double* acc = nullptr;
  CHECK_CUDA(cudaMalloc(&acc, 16));
  CHECK_CUDA(cudaMemset(acc, 0, 16));
  err_kernel<<<264, 256>>>(static_cast<const __half*>(a), static_cast<const __half*>(b), n, acc);
  CHECK_CUDA(cudaGetLastError());
  double h[2];
  CHECK_CUDA(cudaMemcpy(h, acc, 16, cudaMemcpyDeviceToHost));
  cudaFree(acc);
  return std::sqrt(h[0] / std::max(h[1], 1e-300));
}

void set_kernel(const char* v) { CHECK_API(api->set_option("kernel", v, msg, cap)); }

std::string kernel_name(nibble_prepared* h, int64_t m) {
  char buf[256] = {0};
  api->describe_kernel(h, m, buf, sizeof buf);
  return buf;
}

struct Dev {
  double bw = 4.24e12, flops = 691e12;
};

std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoll(p));
    while (*p && *p != ',') ++p;
    if (*p) ++p;
  }
  return v;
}

// ---- --wgmma-diag -----------------------------------------------------------------------------

const char* const kDiagVariants =
    "full,before,oldx,oldfix,nodeq,nomma,nodeq+nomma,onewg,nox,now,noepi,nowait,nowait+nodeq,nowait+nomma,"
    "nosk,st4,st8,ring,xring,ximg,ximg+ring,ximg+xring,ximg+nodeq+nomma,deep,deep+ximg,ximg+noepi,ximg+lsu,"
    "ximg+lsu+ring,ximg+lsu+noepi,lsu";

#if defined(NIBBLE_CUDA_WGMMA)

struct DiagVariant {
  std::string name;
  int32_t ablate = 0;
  int32_t stages = 0;  // 0: all that fit
  bool nosk = false;   // one tile per block: grid = tiles
  bool ximg = false;   // x laid out by launch_wgmma_x_image first (timed with the kernel), one bulk
                       // copy per stage instead of the x warps' cp.async
  bool lsu = false;    // weights and records by producer warps 1-3 (16-byte cp.async), not bulk copies
  bool split = false;  // the split fix-up (a cooperative launch)
  bool waves = false;  // whole waves in raster order before a stream-K tail (kWgSchedWaves)
  bool cluster = false;  // clusters of 2 blocks, x multicast (kWgSchedCluster; the x image, BM >= 128)
  int grid = 0;          // blocks of the launch (0: the plan's)
};

// Work-removing bits: a result computed with any of these is not the layer's and is never checked.
constexpr int32_t kWgLeavesWorkOut = nibble::cuda::kWgNoDequant | nibble::cuda::kWgNoMma |
                                     nibble::cuda::kWgOneWg | nibble::cuda::kWgNoX | nibble::cuda::kWgNoW |
                                     nibble::cuda::kWgNoEpilogue | nibble::cuda::kWgNoWait | nibble::cuda::kWgNoY |
                                     nibble::cuda::kWgNoFixup | nibble::cuda::kWgHalfX;

// The tokens that set GemmParams::ablate bits.
const std::pair<const char*, int32_t> kDiagTokens[] = {
    {"nodeq", nibble::cuda::kWgNoDequant},
    {"nomma", nibble::cuda::kWgNoMma},
    {"onewg", nibble::cuda::kWgOneWg},
    {"nox", nibble::cuda::kWgNoX},
    {"now", nibble::cuda::kWgNoW},
    {"noepi", nibble::cuda::kWgNoEpilogue},
    {"nowait", nibble::cuda::kWgNoWait},
    {"oldx", nibble::cuda::kWgOldX},
    {"oldfix", nibble::cuda::kWgOldFixup},
    {"before", nibble::cuda::kWgOldX | nibble::cuda::kWgOldFixup},
    {"deep", nibble::cuda::kWgDeep},
    {"noy", nibble::cuda::kWgNoY},
    {"nofix", nibble::cuda::kWgNoFixup},
    {"pfence", nibble::cuda::kWgProxyFence},
    {"xhalf", nibble::cuda::kWgHalfX},
    {"nomc", nibble::cuda::kWgNoMulticast},
    {"lrel", nibble::cuda::kWgNoMulticast | nibble::cuda::kWgLocalRelease},
    {"ring", nibble::cuda::kWgNoDequant | nibble::cuda::kWgNoMma | nibble::cuda::kWgNoX |
                 nibble::cuda::kWgNoEpilogue},
    {"xring", nibble::cuda::kWgNoDequant | nibble::cuda::kWgNoMma | nibble::cuda::kWgNoW |
                  nibble::cuda::kWgNoEpilogue},
};

bool parse_variant(const std::string& spec, DiagVariant* v, std::string* why) {
  v->name = spec;
  size_t pos = 0;
  while (pos <= spec.size()) {
    const size_t end = std::min(spec.find('+', pos), spec.size());
    const std::string t = spec.substr(pos, end - pos);
    pos = end + 1;
    if (t == "full") continue;
    bool named = false;
    for (const auto& [name, bits] : kDiagTokens)
      if (t == name) v->ablate |= bits, named = true;
    if (named) continue;
    if (t == "nosk")
      v->nosk = true;
    else if (t == "ximg")
      v->ximg = true;
    else if (t == "lsu")
      v->lsu = true;
    else if (t == "split")
      v->split = true;
    else if (t == "waves")
      v->waves = true;
    else if (t == "cluster")
      v->cluster = true;
    else if (t.size() > 4 && t.compare(0, 4, "grid") == 0 && std::atoi(t.c_str() + 4) >= 1)
      v->grid = std::atoi(t.c_str() + 4);
    else if (t.size() > 2 && t.compare(0, 2, "st") == 0 && std::atoi(t.c_str() + 2) >= 3 && std::atoi(t.c_str() + 2) <= 255)
      v->stages = std::atoi(t.c_str() + 2);
    else if (!t.empty() && std::isdigit(static_cast<unsigned char>(t[0])) && std::strtol(t.c_str(), nullptr, 0) < (1 << 16))
      v->ablate |= int32_t(std::strtol(t.c_str(), nullptr, 0));
    else {
      *why = "NIBBLE_CUDA_WGMMA_ABLATE: unknown token '" + t + "' in '" + spec + "' (known: full";
      for (const auto& tok : kDiagTokens) *why += std::string(" ") + tok.first;
      *why += " nosk ximg lsu split waves cluster grid<N> st<N> <mask>)";
      return false;
    }
  }
  return true;
}

std::vector<DiagVariant> diag_variants() {
  const char* env = std::getenv("NIBBLE_CUDA_WGMMA_ABLATE");
  const std::string list = env && *env ? env : kDiagVariants;
  std::vector<DiagVariant> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t end = std::min(list.find(',', pos), list.size());
    const std::string spec = list.substr(pos, end - pos);
    pos = end + 1;
    if (spec.empty()) continue;
    DiagVariant v;
    std::string why;
    if (!parse_variant(spec, &v, &why)) {
      std::fprintf(stderr, "%s\n", why.c_str());
      std::exit(1);
    }
    out.push_back(v);
  }
  if (out.empty()) {
    std::fprintf(stderr, "NIBBLE_CUDA_WGMMA_ABLATE: no variant in '%s'\n", list.c_str());
    std::exit(1);
  }
  return out;
}

// Parses NIBBLE_CUDA_WGMMA_ABLATE (exits on a bad token) and lists what each variant sets.
void list_diag_variants() {
  say("wgmma variants (NIBBLE_CUDA_WGMMA_ABLATE):");
  for (const auto& v : diag_variants())
    say(" %s(ablate=0x%x%s%s%s)", v.name.c_str(), unsigned(v.ablate), v.nosk ? ",nosk" : "",
        v.ximg ? ",ximg" : "", v.stages ? (",st" + std::to_string(v.stages)).c_str() : "");
  say("\n");
}

// The packed weights of one layer as process_weights makes them (same plan, same repack kernels),
// with their device pointers at hand for direct launches.
struct PackedCopy {
  void *w = nullptr, *srec = nullptr;
};

struct DiagCell {
  std::string row, col;
  double us;
};

int run_wgmma_diag(const std::vector<std::pair<int64_t, int64_t>>& shapes, const std::vector<int64_t>& ms) {
  using namespace nibble::cuda;
  if (device_cc != 90) {
    say("--wgmma-diag: the wgmma kernel runs on sm_90 only; this device is sm_%d\n", device_cc);
    return 77;
  }
  if (!have_cublas) {
    say("--wgmma-diag: no cuBLAS, so no reference to check against\n");
    return 1;
  }
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  KernelInfo info[2][kNumKernels]{}, info8[2][kNumKernels]{};
  CHECK_CUDA(setup_gemv_kernels(info, sms));
  CHECK_CUDA(setup_mma_kernels(info, info8, sms));
  CHECK_CUDA(setup_wgmma_kernels(info, info8, sms));
  CHECK_CUDA(setup_wgmma_diag());
  const std::vector<DiagVariant> variants = diag_variants();  // parsed (and listed) in main already
  std::vector<DiagCell> cells;
  std::vector<std::string> cols, rows;
  auto add_cell = [&](const std::string& row, const std::string& col, double us) {
    cells.push_back({row, col, us});
    if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows.push_back(row);
    if (std::find(cols.begin(), cols.end(), col) == cols.end()) cols.push_back(col);
  };
  say("\n== wgmma diagnostics: uint4b8, G=128, fp16; median us of per-call CUDA events; weights rotated past "
      "L2 ==\n");

  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  int64_t max_k = 0, max_n = 0;
  for (auto& s : shapes) max_k = std::max(max_k, s.first), max_n = std::max(max_n, s.second);
  void *x = nullptr, *y = nullptr, *yref = nullptr;
  CHECK_CUDA(cudaMalloc(&x, size_t(max_m) * max_k * 2));
  CHECK_CUDA(cudaMalloc(&y, size_t(max_m) * max_n * 2));
  CHECK_CUDA(cudaMalloc(&yref, size_t(max_m) * max_n * 2));
  {
    std::vector<__half> hx(size_t(max_m) * max_k);
    Rng rng(4242);
    for (auto& v : hx) v = __float2half(rng.uni(-1.f, 1.f));
    CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  }

  for (const auto& shape : shapes) {
    const int64_t k = shape.first, n = shape.second;
    Layer l = make_layer(k, n, 128, false, uint64_t(k * 977 + n));
    LayoutPlan lp;
    std::string why;
    if (plan_layout(l.spec, nullptr, &lp, &why) != NIBBLE_OK) {
      say("%lldx%lld: layout plan refused: %s\n", (long long)k, (long long)n, why.c_str());
      return 1;
    }
    const double wbytes = double(k) * n / 2 + double(k / 128) * n * 2;
    const int copies = int(std::clamp(std::ceil(200e6 / wbytes), 2.0, 32.0));
    // Canonical tensors on the device, repacked into `copies` packed copies.
    void *d_qw = nullptr, *d_sc = nullptr, *d_gmap = nullptr;
    CHECK_CUDA(cudaMalloc(&d_qw, l.qweight.size() * 4));
    CHECK_CUDA(cudaMalloc(&d_sc, l.scales.size() * 2));
    CHECK_CUDA(cudaMalloc(&d_gmap, lp.gmap.size() * 4));
    CHECK_CUDA(cudaMemcpy(d_qw, l.qweight.data(), l.qweight.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_sc, l.scales.data(), l.scales.size() * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_gmap, lp.gmap.data(), lp.gmap.size() * 4, cudaMemcpyHostToDevice));
    std::vector<PackedCopy> pk(static_cast<size_t>(copies));
    for (auto& c : pk) {
      CHECK_CUDA(cudaMalloc(&c.w, size_t(lp.strips) * size_t(lp.ku) * 512));
      CHECK_CUDA(cudaMalloc(&c.srec, size_t(lp.groups_pad) * size_t(lp.strips) * 64));
      CHECK_CUDA(launch_repack_weights(static_cast<const uint32_t*>(d_qw), k, n, nullptr, lp.strips, lp.ku,
                                       c.w, nullptr));
      CHECK_CUDA(launch_repack_records(d_sc, NIBBLE_DTYPE_F16, nullptr, n,
                                       static_cast<const int32_t*>(d_gmap), lp.groups_pad, lp.strips,
                                       Act::f16, c.srec, nullptr, nullptr));
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    cudaFree(d_qw);
    cudaFree(d_sc);
    cudaFree(d_gmap);
    // The plugin's own path for the baselines, and cuBLAS for the reference.
    std::vector<nibble_prepared*> hs;
    for (int c = 0; c < copies; ++c) hs.push_back(prepare(l));
    const int dcopies = int(std::clamp(std::ceil(200e6 / (double(k) * n * 2)), 1.0, 8.0));
    std::vector<nibble_dense*> ds;
    for (int c = 0; c < dcopies; ++c) {
      nibble_dense* d = nullptr;
      CHECK_API(api->dense_prepare(&l.spec, l.dense.data(), nullptr, &d, msg, cap));
      ds.push_back(d);
    }

    ShapeFacts sf;
    sf.k = lp.k;
    sf.n = lp.n;
    sf.n_pad = lp.n_pad;
    sf.ku = lp.ku;
    sf.kt = lp.kt;
    DeviceFacts facts;
    facts.cc = device_cc;
    facts.info = info[0];
    facts.cublas = true;
    facts.sm90a_built = true;

    for (int64_t m : ms) {
      const KernelId id = m <= 16 ? kWg16 : m <= 64 ? kWg64 : kWg128;
      const char* wg = kKernelNames[id];
      PlanOptions po;
      po.forced = id;
      const Plan plan = make_plan(sf, facts, po, m);
      if (!plan.declined.empty()) {
        say("%lldx%lld M=%lld: %s declined: %s\n", (long long)k, (long long)n, (long long)m, wg,
            plan.declined.c_str());
        continue;
      }
      const KernelInfo& ki = info[0][id];
      const int tiles = plan.m_tiles * plan.n_tiles;
      void *partials = nullptr, *counters = nullptr, *ximage = nullptr;
      CHECK_CUDA(cudaMalloc(&ximage, size_t(plan.m_tiles) * size_t(ki.bm) * size_t(lp.kt) * 128));
      CHECK_CUDA(cudaMalloc(&partials, size_t(2) * size_t(plan.grid) * size_t(ki.bm) * size_t(ki.bn) * 4));
      CHECK_CUDA(cudaMalloc(&counters, size_t(tiles) * 4));
      CHECK_CUDA(cudaMemset(counters, 0, size_t(tiles) * 4));
      GemmParams gp{};
      gp.zero_rec = nullptr;
      gp.x = x;
      gp.bias = nullptr;
      gp.y = y;
      gp.partials = static_cast<float*>(partials);
      gp.counters = static_cast<int32_t*>(counters);
      gp.ldx = k;
      gp.kx = k;
      gp.m = int32_t(m);
      gp.n = int32_t(lp.n);
      gp.strips = lp.strips;
      gp.ku = lp.ku;
      gp.kt = lp.kt;
      gp.g_magic = lp.g_magic;
      gp.m_tiles = plan.m_tiles;
      gp.n_tiles = plan.n_tiles;
      gp.evict_first = plan.m_tiles == 1;
      gp.overlap = plan.overlap;

      dense_apply(ds[0], x, yref, m, l);
      CHECK_CUDA(cudaDeviceSynchronize());
      const double bytes = wbytes + 2.0 * m * k + 2.0 * m * n, flops = 2.0 * m * n * k;
      const double roof_us = std::max(bytes / 4.24e12, flops / 691e12) * 1e6;
      const int reps = int(std::clamp(150000.0 / std::max(1.0, roof_us) / 4, 5.0, 60.0));
      char colbuf[64];
      std::snprintf(colbuf, sizeof colbuf, "%lldx%lld/%lld", (long long)k, (long long)n, (long long)m);
      const std::string col = colbuf;
      say("-- %s: %s, plan grid %d (%d tiles x %d k stages; %d blocks resident as clusters of 2), roofline %.1f us, "
          "%d reps\n",
          col.c_str(), wg, plan.grid, tiles, lp.kt, ki.cluster_slots, roof_us, reps);
      double full_us = 0;
      for (const DiagVariant& v : variants) {
        gp.ablate = int16_t(v.ablate);   // the WgAblate bits (below 1 << 10)
        gp.stages = uint8_t(v.stages);  // checked when parsed
        // Clusters of 2: a whole number of clusters the device holds at once, tiles of 2 n tiles.
        int grid = v.nosk ? tiles : v.cluster ? std::min(plan.grid, ki.cluster_slots) / 2 * 2 : plan.grid;
        if (v.grid > 0) grid = std::min(v.grid, grid);
        if (v.cluster && (!v.ximg || ki.bm < 128 || plan.n_tiles % 2 != 0 || grid < 2)) {
          say("   %-14s not run: clusters need the x image, BM >= 128, an even number of n tiles and a device that "
              "holds a cluster\n", v.name.c_str());
          continue;
        }
        auto launch = [&](int i) {
          gp.w = pk[size_t(i) % pk.size()].w;
          gp.scale_rec = pk[size_t(i) % pk.size()].srec;
          gp.x_image = v.ximg ? ximage : nullptr;
          gp.w_lsu = v.lsu ? 1 : 0;
          gp.wg_sched = uint8_t((v.split ? kWgSchedSplitFixup : 0) | (v.waves ? kWgSchedWaves : 0) |
                                (v.cluster ? kWgSchedCluster : 0));
          if (v.ximg) {
            const cudaError_t e =
                launch_wgmma_x_image(x, k, k, int32_t(m), ki.bm, plan.m_tiles, lp.kt, ximage, nullptr);
            if (e != cudaSuccess) return e;
          }
          return launch_wgmma_diag(id, Act::f16, gp, grid, nullptr);
        };
        CHECK_CUDA(cudaMemset(y, 0xff, size_t(m * n * 2)));  // NaN poison
        const cudaError_t le = launch(0);
        if (le != cudaSuccess) {
          say("   %-14s not run: %s\n", v.name.c_str(), cudaGetErrorString(le));
          continue;
        }
        CHECK_CUDA(cudaDeviceSynchronize());
        std::string verdict = "timing only (leaves work out)";
        if (!(v.ablate & kWgLeavesWorkOut)) {
          const double e = rel_err(y, yref, size_t(m * n));
          char b[64];
          std::snprintf(b, sizeof b, "relerr %.1e %s", e, e < 3e-3 ? "check ok" : "<-- WRONG");
          verdict = b;
        }
        const double us = time_calls([&](int i) { CHECK_CUDA(launch(i)); }, reps);
        if (&v == &variants.front()) full_us = us;  // the reference of the ratios: full by default
        // Rates of the streams a variant keeps: weights and records (each read once), x (read once
        // per n tile, M rounded up to the tile), the tensor-core work (M rounded up too).
        const double xbytes = double(plan.n_tiles) * plan.m_tiles * ki.bm * double(lp.k_pad) * 2;
        const double mma = 2.0 * plan.m_tiles * ki.bm * double(lp.n_pad) * double(lp.k_pad);
        const int32_t out = v.ablate & kWgLeavesWorkOut;
        char extra[96] = "";
        if (out == (kWgNoDequant | kWgNoMma | kWgNoX | kWgNoEpilogue))
          std::snprintf(extra, sizeof extra, "  weights through the ring: %.0f GB/s",
                        wbytes / (us * 1e-6) / 1e9);
        else if (out == (kWgNoDequant | kWgNoMma | kWgNoW | kWgNoEpilogue))
          std::snprintf(extra, sizeof extra, "  x through the ring: %.0f GB/s", xbytes / (us * 1e-6) / 1e9);
        else if (out == kWgNoWait)
          std::snprintf(extra, sizeof extra, "  consumers alone: %.0f TFLOP/s", mma / (us * 1e-6) / 1e12);
        say("   %-14s %9.1f us  %5.2fx ref   grid %5d  %s%s\n", v.name.c_str(), us,
            full_us > 0 ? us / full_us : 0.0, grid, verdict.c_str(), extra);
        add_cell(v.name, col, us);
      }
      CHECK_CUDA(cudaMemset(counters, 0, size_t(tiles) * 4));
      cudaFree(partials);
      cudaFree(counters);
      cudaFree(ximage);

      // The plugin's own path (its plan, its workspace) for the old best kernels and this wg kernel,
      // the latter with either x path, with the x image and the weights by cp.async, and with
      // those and the split fix-up.
      for (const char* name : {"v1", "v2u2", "s8", "l", "cublas", wg, "ximg", "ximg+lsu", "ximg+lsu+split"}) {
        const bool split = std::strcmp(name, "ximg+lsu+split") == 0;
        const bool lsu = split || std::strcmp(name, "ximg+lsu") == 0, ximg = lsu || std::strcmp(name, "ximg") == 0;
        const KernelDesc* kd = find_kernel(ximg ? wg : name);
        if (!kd || (kd->family == Family::gemv && m > 64)) continue;
        set_kernel(kd->name);
        CHECK_API(api->set_option("wgmma_x", ximg ? "image" : "copy", msg, cap));
        CHECK_API(api->set_option("wgmma_w", lsu ? "lsu" : "bulk", msg, cap));
        CHECK_API(api->set_option("wgmma_fixup", split ? "split" : "last", msg, cap));
        CHECK_CUDA(cudaMemset(y, 0xff, size_t(m * n * 2)));
        apply(hs[0], x, y, m, l);
        CHECK_CUDA(cudaDeviceSynchronize());
        const double e = rel_err(y, yref, size_t(m * n));
        const double us = time_calls([&](int i) { apply(hs[size_t(i) % hs.size()], x, y, m, l); }, reps);
        const std::string row =
            std::string("plugin:") + (ximg ? std::string(wg) + "/" + name : std::string(name));
        say("   %-14s %9.1f us  %5.2fx ref   relerr %.1e %s  %s\n", row.c_str(), us,
            full_us > 0 ? us / full_us : 0.0, e, e < 3e-3 ? "check ok" : "<-- WRONG",
            kernel_name(hs[0], m).c_str());
        add_cell(row, col, us);
      }
      set_kernel("auto");  // and the defaults of the other options
      CHECK_API(api->set_option("wgmma_x", "image", msg, cap));
      CHECK_API(api->set_option("wgmma_w", "lsu", msg, cap));
      CHECK_API(api->set_option("wgmma_fixup", "auto", msg, cap));
    }
    for (auto h : hs) api->release(h);
    for (auto d : ds) api->dense_release(d);
    for (auto& c : pk) {
      cudaFree(c.w);
      cudaFree(c.srec);
    }
  }
  cudaFree(x);
  cudaFree(y);
  cudaFree(yref);
  say("-- cooperative launches of the split fix-up refused (run with the last-arrival fix-up): %d\n",
      wgmma_cooperative_refusals());

  // One table: every variant and baseline (rows) at every point (columns), us.
  say("\n== wgmma diagnostics, us (columns: K x N / M) ==\n%-16s", "variant");
  for (const auto& c : cols) say(" %16s", c.c_str());
  say("\n");
  for (const auto& r : rows) {
    say("%-16s", r.c_str());
    for (const auto& c : cols) {
      double us = -1;
      for (const auto& e : cells)
        if (e.row == r && e.col == c) us = e.us;
      if (us < 0)
        say(" %16s", "-");
      else
        say(" %16.1f", us);
    }
    say("\n");
  }
  // The same as time over the first variant's (full by default) at the point (above 1: slower).
  say("\n== wgmma diagnostics, time / %s's time ==\n%-16s", variants.front().name.c_str(), "variant");
  for (const auto& c : cols) say(" %16s", c.c_str());
  say("\n");
  auto cell = [&](const std::string& r, const std::string& c) {
    for (const auto& e : cells)
      if (e.row == r && e.col == c) return e.us;
    return -1.0;
  };
  for (const auto& r : rows) {
    say("%-16s", r.c_str());
    for (const auto& c : cols) {
      const double us = cell(r, c), full = cell(variants.front().name, c);
      if (us < 0 || full <= 0)
        say(" %16s", "-");
      else
        say(" %16.2f", us / full);
    }
    say("\n");
  }
  say("done\n");
  return 0;
}
#else
void list_diag_variants() {}
int run_wgmma_diag(const std::vector<std::pair<int64_t, int64_t>>&, const std::vector<int64_t>&) {
  say("--wgmma-diag: this build has no wgmma kernel (meson option nvcc_archs has no 90)\n");
  return 77;
}
#endif

}  // namespace

// --read: what a plain read of each layer's weight bytes (4- and 8-bit, G = 128 scales) takes, over
// grids of 1-8 blocks per SM of 128-512 threads and 4 or 8 loads in flight per lane, the copies
// rotated past L2. The ceiling of any kernel that streams those bytes once in one launch: the
// GEMV's M = 1 time against it separates the read itself (launch, ramp, tail) from the kernel's own
// work.
int run_read(const std::vector<std::pair<int64_t, int64_t>>& shapes, double copy_bw) {
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  uint32_t* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&sink, 4));
  say("\n== plain read of the weight bytes (--read): us per launch, median of CUDA events; copies rotated "
      "past L2; %% of the copy reading %.0f GB/s ==\n", copy_bw * 1e-9);
  say("%-12s %4s %10s %9s %7s  %-24s %9s %7s  %s\n", "shape", "bits", "MB", "best us", "%", "best grid",
      "gemv-like", "%", "(gemv-like: 4 blocks/SM x 128 threads x 8 in flight)");
  for (const auto& [k, n] : shapes) {
    for (int bits : {4, 8}) {
      const size_t bytes = size_t(k) * size_t(n) * size_t(bits) / 8 + size_t(k / 128) * size_t(n) * 2;
      const size_t n16 = (bytes + 15) / 16;
      const int copies = int(std::max<size_t>(2, (size_t(512) << 20) / bytes + 1));
      uint4* buf = nullptr;
      CHECK_CUDA(cudaMalloc(&buf, n16 * 16 * size_t(copies)));
      CHECK_CUDA(cudaMemset(buf, 1, n16 * 16 * size_t(copies)));
      double best = 1e30, like = 0;
      char best_cfg[64] = "";
      for (int per_sm : {1, 2, 4, 8})
        for (int threads : {128, 256, 512})
          for (int u : {4, 8}) {
            if (per_sm * threads > 2048) continue;
            const int blocks = per_sm * sms;
            const double us = time_calls(
                [&](int i) {
                  const uint4* src = buf + n16 * size_t(i % copies);
                  if (u == 4)
                    read_kernel<4><<<blocks, threads>>>(src, n16, sink);
                  else
                    read_kernel<8><<<blocks, threads>>>(src, n16, sink);
                },
                20);
            CHECK_CUDA(cudaGetLastError());
            if (us < best) best = us, std::snprintf(best_cfg, sizeof best_cfg, "%d/SM x %d x %d", per_sm, threads, u);
            if (per_sm == 4 && threads == 128 && u == 8) like = us;
          }
      const double t_min = double(bytes) / copy_bw * 1e6;
      say("%5lldx%-6lld %4d %10.1f %9.1f %6.1f%%  %-24s %9.1f %6.1f%%\n", (long long)k, (long long)n, bits,
          bytes / 1e6, best, 100.0 * t_min / best, best_cfg, like, 100.0 * t_min / like);
      CHECK_CUDA(cudaFree(buf));
    }
  }
  CHECK_CUDA(cudaFree(sink));
  return 0;
}

int main(int argc, char** argv) {
  bool quick = false, sweep = false, check = false, timings = true, wgmma_diag = false, wgmma_list = false,
       read_only = false;
  std::vector<std::pair<int64_t, int64_t>> shapes = {{4096, 6144}, {4096, 4096}, {4096, 28672}, {14336, 4096},
                                                     {8192, 10240}, {8192, 8192}, {8192, 57344}, {28672, 8192}};
  std::vector<int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--sweep") sweep = true;
    else if (a == "--check") check = true;
    else if (a == "--no-time") timings = false;
    else if (a == "--read") read_only = true;
    else if (a == "--wgmma-diag")
      wgmma_diag = true;
    else if (a == "--wgmma-variants")
      wgmma_list = true;
    else if (a == "--out" && i + 1 < argc) out_file = std::fopen(argv[++i], "w");
    else if (a == "--m" && i + 1 < argc) ms = parse_list(argv[++i]);
    else if (a == "--shapes" && i + 1 < argc) {
      shapes.clear();
      for (const char* p = argv[++i]; *p;) {
        const int64_t k = std::atoll(p);
        while (*p && *p != 'x') ++p;
        const int64_t n = std::atoll(++p);
        shapes.push_back({k, n});
        while (*p && *p != ',') ++p;
        if (*p) ++p;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--sweep] [--check] [--no-time] [--wgmma-diag] [--wgmma-variants] [--read] "
                   "[--out FILE] [--shapes KxN,...] [--m M,...]\n",
                   argv[0]);
      return 1;
    }
  }
  if (wgmma_list) {  // the default variants, for scripts that derive other lists from them
    std::printf("variants: %s\n", kDiagVariants);
    return 0;
  }
  if (wgmma_diag) list_diag_variants();
  api = nibble::cuda::entry(NIBBLE_ABI_VERSION);
  {
    char msg[512] = {0};
    if (api->probe(msg, sizeof msg) != NIBBLE_OK) {
      std::printf("no device: %s\n", msg);
      return 77;
    }
    say("device: %s\n", msg);
  }
  int clock_khz = 0, cc_major = 0, cc_minor = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, 0));
  device_cc = cc_major * 10 + cc_minor;
  g_spin_cycles = (long long)clock_khz * 3;  // ~3 ms

  // Ceilings measured here: a 2 GiB device copy, and cuBLAS fp16 at 8192^3.
  Dev dev;
  {
    double bps = 0;
    CHECK_API(api->measure_bandwidth(size_t(1) << 31, nullptr, &bps, msg, cap));
    dev.bw = bps;
    say("measured: copy %.2f TB/s (read + write)\n", dev.bw / 1e12);
  }
  {
    char why[512] = {0};
    nibble_linear_spec s{};
    s.struct_size = sizeof s;
    s.k = s.n = 64;
    s.act_dtype = NIBBLE_DTYPE_F16;
    std::vector<__half> w(64 * 64);
    nibble_dense* d = nullptr;
    have_cublas = api->dense_prepare(&s, w.data(), nullptr, &d, why, sizeof why) == NIBBLE_OK;
    if (d) api->dense_release(d);
    if (!have_cublas) say("no cuBLAS: %s (no baseline, no error check)\n", why);
  }
  if (have_cublas) {
    Layer sq = make_layer(8192, 8192, 128, false, 7);
    nibble_dense* d = nullptr;
    CHECK_API(api->dense_prepare(&sq.spec, sq.dense.data(), nullptr, &d, msg, cap));
    void *x = nullptr, *y = nullptr;
    CHECK_CUDA(cudaMalloc(&x, size_t(8192) * 8192 * 2));
    CHECK_CUDA(cudaMalloc(&y, size_t(8192) * 8192 * 2));
    CHECK_CUDA(cudaMemcpy(x, sq.dense.data(), size_t(8192) * 8192 * 2, cudaMemcpyHostToDevice));
    const double us = time_calls([&](int) { dense_apply(d, x, y, 8192, sq); }, 10);
    dev.flops = 2.0 * 8192.0 * 8192.0 * 8192.0 / (us * 1e-6);
    api->dense_release(d);
    cudaFree(x);
    cudaFree(y);
    say("measured: cuBLAS fp16 8192^3 %.0f TFLOP/s; PERF.md: 4.24 TB/s, 691 TFLOP/s\n", dev.flops / 1e12);
  }
  const double kBW = 4.24e12, kF = 691e12;  // PERF.md's ceilings (the roofline of the targets)
  if (read_only) {
    const int rc = run_read(shapes, dev.bw);
    if (out_file) std::fclose(out_file);
    return rc;
  }
  if (wgmma_diag) {
    const int rc = run_wgmma_diag(shapes, ms);
    if (out_file) std::fclose(out_file);
    return rc;
  }

  void *x = nullptr, *y = nullptr, *yref = nullptr;
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  int64_t max_k = 0, max_n = 0;
  for (auto& s : shapes) max_k = std::max(max_k, s.first), max_n = std::max(max_n, s.second);
  CHECK_CUDA(cudaMalloc(&x, size_t(std::max<int64_t>(max_m, 4096)) * max_k * 2));
  CHECK_CUDA(cudaMalloc(&y, size_t(std::max<int64_t>(max_m, 4096)) * max_n * 2));
  CHECK_CUDA(cudaMalloc(&yref, size_t(std::max<int64_t>(max_m, 4096)) * max_n * 2));
  {
    std::vector<__half> hx(size_t(std::max<int64_t>(max_m, 4096)) * max_k);
    Rng rng(42);
    for (auto& v : hx) v = __float2half(rng.uni(-1.f, 1.f));
    CHECK_CUDA(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  }

  // --check: every variant (and the dequantize + cuBLAS path) on odd M, fp16 and zero points.
  if (check && have_cublas) {
    say("\n== variant check against cuBLAS on dequantized weights (relative error norm) ==\n");
    for (bool zp : {false, true}) {
      Layer l = make_layer(4096, 6144, zp ? 64 : 128, zp, 11 + zp);
      nibble_prepared* h = prepare(l);
      nibble_dense* d = nullptr;
      CHECK_API(api->dense_prepare(&l.spec, l.dense.data(), nullptr, &d, msg, cap));
      for (int ki = 0; ki < nibble::cuda::kKernelTableSize; ++ki) {
        const nibble::cuda::KernelDesc& kd = nibble::cuda::kKernelTable[ki];
        if (device_cc < kd.min_cc || device_cc > kd.max_cc) continue;
        const char* v = kd.name;
        set_kernel(v);
        std::string line;
        for (int64_t m : {1, 5, 13, 33, 100, 257, 1000}) {
          dense_apply(d, x, yref, m, l);
          CHECK_CUDA(cudaMemset(y, 0xff, size_t(m * l.n * 2)));  // NaN poison
          apply(h, x, y, m, l);
          CHECK_CUDA(cudaDeviceSynchronize());
          const double e = rel_err(y, yref, size_t(m * l.n));
          char b[64];
          std::snprintf(b, sizeof b, " M=%lld:%.1e%s", (long long)m, e, e < 3e-3 ? "" : "(BAD)");
          line += b;
        }
        say("%s G=%d %-6s%s\n", zp ? "uint4  " : "uint4b8", l.g, v, line.c_str());
      }
      set_kernel("auto");
      api->release(h);
      api->dense_release(d);
    }
  }

  if (!timings) {
    say("done\n");
    return 0;
  }
  say("\n== timings: uint4b8, G=128, fp16; median of per-call CUDA events; weights rotated past L2 ==\n");
  say("%-11s %5s %9s %9s %6s %9s %7s %7s  %s\n", "K x N", "M", "roof_us", "w4_us", "%roof", "cublas_us", "vs_cub",
      "relerr", "kernel");
  for (auto [k, n] : shapes) {
    Layer l = make_layer(k, n, 128, false, uint64_t(k * 131 + n));
    const double wbytes = double(k) * n / 2 + double(k / 128) * n * 2;
    const int copies = int(std::clamp(std::ceil(200e6 / wbytes), 2.0, 32.0));
    std::vector<nibble_prepared*> hs;
    for (int c = 0; c < copies; ++c) hs.push_back(prepare(l));
    const int dcopies = have_cublas ? int(std::clamp(std::ceil(200e6 / (double(k) * n * 2)), 1.0, 8.0)) : 0;
    std::vector<nibble_dense*> ds;
    for (int c = 0; c < dcopies; ++c) {
      nibble_dense* d = nullptr;
      CHECK_API(api->dense_prepare(&l.spec, l.dense.data(), nullptr, &d, msg, cap));
      ds.push_back(d);
    }
    for (int64_t m : ms) {
      if (quick && m > 1024) continue;
      const double bytes = wbytes + 2.0 * m * k + 2.0 * m * n, flops = 2.0 * m * n * k;
      const double roof_us = std::max(bytes / kBW, flops / kF) * 1e6;
      // correctness first
      if (have_cublas) dense_apply(ds[0], x, yref, m, l);
      CHECK_CUDA(cudaMemset(y, 0xff, size_t(m * n * 2)));
      apply(hs[0], x, y, m, l);
      CHECK_CUDA(cudaDeviceSynchronize());
      const double err = have_cublas ? rel_err(y, yref, size_t(m * n)) : 0.0;
      const double est = std::max(1.0, std::min(1e5, roof_us));
      const int reps = int(std::clamp(150000.0 / est / 4, 5.0, 60.0));
      const double w4 = time_calls([&](int i) { apply(hs[size_t(i) % hs.size()], x, y, m, l); }, reps);
      const double cub =
          have_cublas ? time_calls([&](int i) { dense_apply(ds[size_t(i) % ds.size()], x, y, m, l); }, reps) : NAN;
      say("%5lldx%-5lld %5lld %9.1f %9.1f %5.0f%% %9.1f %6.2fx %7.1e  %s%s\n", (long long)k, (long long)n,
          (long long)m, roof_us, w4, 100.0 * roof_us / w4, cub, cub / w4, err, kernel_name(hs[0], m).c_str(),
          err < 3e-3 ? "" : "  <-- WRONG");
      if (sweep) {
        // Every plausible variant at this M (each is conformance-tested forced, so any of them
        // may be what the heuristic picks).
        std::string line;
        for (int ki = 0; ki < nibble::cuda::kKernelTableSize; ++ki) {
          const nibble::cuda::KernelDesc& kd = nibble::cuda::kKernelTable[ki];
          using nibble::cuda::Family;
          if (device_cc < kd.min_cc || device_cc > kd.max_cc) continue;
          if (kd.family == Family::cublas && (!have_cublas || m < 16)) continue;
          if ((kd.family == Family::gemv && m > 32) || (kd.family != Family::gemv && m < 8)) continue;
          const char* v = kd.name;
          set_kernel(v);
          // The wgmma kernels with either weight path: "wgNN" the bulk copies, "wgNN+lsu" cp.async
          // (the default, restored after).
          for (const char* wpath : {"", "lsu"}) {
            if (*wpath && kd.family != Family::wgmma) continue;
            if (kd.family == Family::wgmma) CHECK_API(api->set_option("wgmma_w", *wpath ? wpath : "bulk", msg, cap));
            const double us = time_calls([&](int i) { apply(hs[size_t(i) % hs.size()], x, y, m, l); }, reps);
            char b[48];
            std::snprintf(b, sizeof b, " %s%s%s=%.1f", v, *wpath ? "+" : "", wpath, us);
            line += b;
          }
          if (kd.family == Family::wgmma) CHECK_API(api->set_option("wgmma_w", "lsu", msg, cap));
        }
        set_kernel("auto");
        say("  sweep %5lldx%-5lld M=%-5lld%s\n", (long long)k, (long long)n, (long long)m, line.c_str());
      }
    }
    if (sweep) {
      // The stream-K grid: fewest k stages per block (min_stages), auto variant.
      for (int64_t m : {1, 16}) {
        std::string line;
        for (const char* st : {"2", "4", "8", "16"}) {
          CHECK_API(api->set_option("min_stages", st, msg, cap));
          const double us = time_calls([&](int i) { apply(hs[size_t(i) % hs.size()], x, y, m, l); }, 20);
          char b[48];
          std::snprintf(b, sizeof b, " ms%s=%.1f", st, us);
          line += b;
        }
        CHECK_API(api->set_option("min_stages", "0", msg, cap));
        say("  grid  %5lldx%-5lld M=%-5lld%s\n", (long long)k, (long long)n, (long long)m, line.c_str());
      }
    }
    for (auto h : hs) api->release(h);
    for (auto d : ds) api->dense_release(d);
  }
  say("done\n");
  if (out_file) std::fclose(out_file);
  return 0;
}
