// GPU-free tests of cuda_w4a16's kernel menu and choice (plan.h): the tables are consistent, the
// automatic choice always finds a kernel that can take the call on every supported architecture,
// a forced kernel that cannot take a call declines it with a reason (never a silent substitute),
// launch geometries stay in their kernels' bounds, and options parse or say why not.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string>

#include "layout.h"
#include "plan.h"
#include "wgmma_layout.h"
#include "test_util.h"

using namespace nibble;
using namespace nibble::cuda;

std::string nibble::test::skip_reason() { return {}; }

namespace {

// Tiles as kernel setup reports them (kernels.h; gemv.cu and mma_sync.cu), occupancy of an H200-like
// device with 132 SMs.
struct FakeDevice {
  KernelInfo info[kNumKernels]{};
  FakeDevice() {
    auto set = [&](KernelId id, int bn, int bm, int threads, int per_sm, int step) {
      info[id] = KernelInfo{kernel_desc(id).name, bn, bm, threads, 0, per_sm * 132, step};
    };
    set(kS1, 128, 8, 128, 4, 2);
    set(kS2, 128, 16, 128, 4, 2);
    set(kS4, 128, 32, 128, 3, 2);
    set(kS8, 128, 64, 128, 2, 2);
    set(kL, 256, 128, 256, 1, 2);
    set(kV1, 64, 8, 128, 4, 4);
    set(kV2, 64, 16, 128, 3, 4);
    set(kV4, 64, 32, 128, 2, 2);
    set(kV2u2, 64, 16, 128, 4, 2);
    set(kWg16, 256, 16, 384, 1, 2);
    set(kWg32, 256, 32, 384, 1, 2);
    set(kWg64, 256, 64, 384, 1, 2);
    set(kWg128, 256, 128, 384, 1, 2);
    set(kWg256, 128, 256, 384, 1, 2);
    // Clusters of 2 of the tiles that have the instance (wgmma.cu); fewer than the SMs, as where a
    // GPC has an odd number of SMs.
    info[kWg128].cluster_slots = info[kWg256].cluster_slots = 130;
  }
  DeviceFacts facts(int cc, bool cublas, bool wgmma = true) const {
    DeviceFacts f;
    f.cc = cc;
    f.info = info;
    f.cublas = cublas;
    f.sm90a_built = wgmma;
    return f;
  }
};

ShapeFacts shape(int64_t k, int64_t n) {
  ShapeFacts s;
  s.k = k;
  s.n = n;
  s.n_pad = (n + kNPad - 1) / kNPad * kNPad;
  const int64_t k_pad = (k + kTileK - 1) / kTileK * kTileK;
  s.ku = int32_t(k_pad / kUnitK);
  s.kt = int32_t(k_pad / kTileK);
  return s;
}

const std::pair<int64_t, int64_t> kShapes[] = {{4096, 6144},  {4096, 4096}, {4096, 28672}, {14336, 4096},
                                               {8192, 10240}, {8192, 8192}, {8192, 57344}, {28672, 8192},
                                               {64, 16},      {130, 40},    {4100, 24}};
const int64_t kMs[] = {1,  2,  3,   4,   7,   8,   9,   15,  16,   17,   31,   32,   33,     63,
                       64, 65, 127, 128, 129, 255, 256, 257, 1000, 1024, 4096, 8191, 100000, 1000000};

// The geometry of a plan is within its kernel's launch bounds.
void check_geometry(const Plan& p, const ShapeFacts& s, const FakeDevice& d, int64_t m) {
  const KernelDesc& kd = kernel_desc(p.kernel);
  if (kd.family == Family::cublas) return;
  const KernelInfo& ki = d.info[p.kernel];
  CHECK(p.m_tiles == (m + ki.bm - 1) / ki.bm);
  CHECK(p.n_tiles == s.n_pad / ki.bn);
  CHECK(p.grid >= 1);
  if (kd.family == Family::gemv) {
    CHECK(p.grid <= 65535);
    CHECK(p.grid <= s.ku);
    CHECK(p.m_tiles <= 65535);
  } else {
    CHECK(int64_t(p.grid) <= int64_t(p.m_tiles) * p.n_tiles * s.kt);
    CHECK(p.grid <= ki.slots);
  }
}

}  // namespace

TEST_CASE("the kernel table has one row per kernel id, in id order, with unique names") {
  REQUIRE(kKernelTableSize == int(kNumKernels) + 1);
  std::set<std::string> names;
  for (int i = 0; i < kKernelTableSize; ++i) {
    const KernelDesc& d = kKernelTable[i];
    CHECK(int(d.id) == i);
    CHECK(names.insert(d.name).second);
    CHECK(find_kernel(d.name) == &d);
    CHECK(d.min_cc >= 80);
    CHECK(d.max_cc >= d.min_cc);
    CHECK((d.family == Family::mma || d.family == Family::wgmma) == (d.min_stages > 0));
  }
  CHECK(find_kernel("nonesuch") == nullptr);
  CHECK(kernel_desc(kCublas).family == Family::cublas);
}

TEST_CASE("every choice rule names a kernel that runs on the rule's architectures") {
  for (int i = 0; i < kChoiceRulesSize; ++i) {
    const ChoiceRule& r = kChoiceRules[i];
    const KernelDesc& d = kernel_desc(r.kernel);
    INFO("rule " << i << " -> " << d.name);
    CHECK(r.min_cc >= d.min_cc);
    CHECK(r.max_cc <= d.max_cc);
    CHECK(r.min_m >= 1);
    CHECK((r.max_m == 0 || r.max_m >= r.min_m));
  }
}

TEST_CASE("M = 9-16: v2u2 or v1 by layer size, N and activation dtype") {
  const FakeDevice dev;
  const PlanOptions o;
  auto kernel_for = [&](int64_t k, int64_t n, int bits, int64_t m, bool bf16) {
    const ShapeFacts s = shape(bits == 8 ? 2 * k : k, n);  // 8 bits: two nibble planes, K doubled
    DeviceFacts f = dev.facts(90, true, true);
    f.bf16 = bf16;
    return make_plan(s, f, o, m).kernel;
  };
  for (int64_t m : {9, 16}) {
    INFO("M = " << m);
    // fp16: v2u2 from 64 Mi packed weights at any N.
    CHECK(kernel_for(8192, 8192, 4, m, false) == kV2u2);
    CHECK(kernel_for(8192, 57344, 4, m, false) == kV2u2);
    CHECK(kernel_for(4096, 28672, 4, m, false) == kV2u2);
    CHECK(kernel_for(14336, 4096, 4, m, false) == kV1);  // 56 Mi
    CHECK(kernel_for(8192, 8192, 8, m, false) == kV2u2);
    CHECK(kernel_for(4096, 4096, 8, m, false) == kV1);  // 32 Mi packed weights
    CHECK(kernel_for(4096, 6144, 8, m, false) == kV1);  // 48 Mi
    // bf16: v2u2 from 48 Mi packed weights at any N, from 24 Mi at N >= 6144.
    CHECK(kernel_for(4096, 6144, 4, m, true) == kV2u2);  // 24 Mi
    CHECK(kernel_for(4096, 6144, 8, m, true) == kV2u2);
    CHECK(kernel_for(8192, 10240, 4, m, true) == kV2u2);
    CHECK(kernel_for(28672, 8192, 8, m, true) == kV2u2);
    CHECK(kernel_for(4096, 28672, 4, m, true) == kV2u2);
    CHECK(kernel_for(8192, 57344, 8, m, true) == kV2u2);
    CHECK(kernel_for(14336, 4096, 4, m, true) == kV2u2);  // 56 Mi at N = 4096
    CHECK(kernel_for(14336, 4096, 8, m, true) == kV2u2);
    CHECK(kernel_for(4096, 4096, 8, m, true) == kV1);   // 32 Mi at N = 4096
    CHECK(kernel_for(4096, 4096, 4, m, true) == kV1);   // 16 Mi
    CHECK(kernel_for(2048, 8192, 4, m, true) == kV1);   // 16 Mi
    CHECK(kernel_for(4096, 5120, 4, m, true) == kV1);   // 20 Mi
  }
  for (bool bf16 : {false, true}) {
    CHECK(kernel_for(8192, 8192, 8, 8, bf16) == kV1);
    CHECK(kernel_for(8192, 8192, 8, 17, bf16) == kWg32);
  }
}

TEST_CASE("the automatic choice finds a kernel for every M and shape on every architecture") {
  const FakeDevice dev;
  for (int cc : {80, 86, 89, 90, 100, 120})
    for (bool wgmma : {false, true})
      for (bool cublas : {false, true})
        for (int64_t cublas_min_m : {int64_t(0), int64_t(65), int64_t(1)})
          for (const auto& [k, n] : kShapes)
            for (int64_t m : kMs) {
              PlanOptions o;
              o.cublas_min_m = cublas_min_m;
              const ShapeFacts s = shape(k, n);
              const Plan p = make_plan(s, dev.facts(cc, cublas, wgmma), o, m);
              INFO("cc " << cc << " wgmma " << wgmma << " cublas " << cublas << " min_m " << cublas_min_m
                         << " " << k << "x" << n << " M=" << m);
              REQUIRE_MESSAGE(p.declined.empty(), p.declined);
              const KernelDesc& kd = kernel_desc(p.kernel);
              CHECK(cc >= kd.min_cc);
              CHECK(cc <= kd.max_cc);
              if (kd.family == Family::cublas) {
                CHECK(cublas);
                CHECK(cublas_min_m > 0);
                CHECK(m >= cublas_min_m);
              }
              CHECK(decline_reason(kd, dev.facts(cc, cublas, wgmma), s, m).empty());
              // M = 17-256 on Hopper only, M <= 32 on 32 Mi weights or more; past 256 on larger
              // layers the larger M is, to 1024 on layers of K >= 20000 and 192-256 Mi weights
              if (kd.family == Family::wgmma) {
                CHECK(cc == 90);
                CHECK(wgmma);
                CHECK(m > 16);
                const int64_t mi = int64_t(1) << 20;
                CHECK(m <= 1024);
                if (m > 256) CHECK(k * n >= 32 * mi);
                if (m > 384) CHECK(k * n >= 80 * mi);
                if (m > 640) {
                  CHECK(k >= 20000);
                  CHECK(k * n >= 192 * mi);
                  CHECK(k * n <= 256 * mi);
                }
                if (m <= 32) CHECK(k * n >= 32 * (int64_t(1) << 20));
                CHECK(p.x_image);
                CHECK(p.w_lsu);
              }
              check_geometry(p, s, dev, m);
            }
}

TEST_CASE("a forced kernel runs every call it can take and declines the others with a reason") {
  const FakeDevice dev;
  for (int i = 0; i < kKernelTableSize; ++i)
    for (int cc : {80, 90})
      for (const auto& [k, n] : kShapes)
        for (int64_t m : kMs) {
          PlanOptions o;
          o.forced = i;
          const ShapeFacts s = shape(k, n);
          const DeviceFacts f = dev.facts(cc, false, true);
          const Plan p = make_plan(s, f, o, m);
          CHECK(int(p.kernel) == i);  // never another kernel in its place
          const std::string why = decline_reason(kKernelTable[i], f, s, m);
          CHECK(p.declined == why);
          if (why.empty()) check_geometry(p, s, dev, m);
        }
  // The reasons say what was expected and what was found.
  PlanOptions o;
  o.forced = kCublas;
  CHECK(make_plan(shape(64, 16), dev.facts(90, false), o, 1).declined == "cuBLAS cannot be loaded");
  o.forced = kV1;
  const Plan big = make_plan(shape(64, 16), dev.facts(90, false), o, 65535 * 8 + 1);
  CHECK(big.declined == "kernel v1 takes at most 524280 rows per call, found M=524281");
  o.forced = kV1;
  const Plan old = make_plan(shape(64, 16), dev.facts(75, false), o, 1);
  CHECK(old.declined == "kernel v1 runs on sm_80 and newer; the device is sm_75");
  o.forced = kWg64;
  CHECK(make_plan(shape(64, 16), dev.facts(89, false), o, 64).declined ==
        "kernel wg64 runs on sm_90 only; the device is sm_89");
  CHECK(make_plan(shape(64, 16), dev.facts(100, false), o, 64).declined ==
        "kernel wg64 runs on sm_90 only; the device is sm_100");
  CHECK(make_plan(shape(64, 16), dev.facts(90, false, false), o, 64).declined ==
        "kernel wg64 is sm_90a code, not in this build (meson option nvcc_archs has no 90)");
  CHECK(make_plan(shape(64, 16), dev.facts(90, false, true), o, 64).declined.empty());
  // The x image is a wgmma launch's only: by default, and not with wgmma_x=copy.
  CHECK(make_plan(shape(4096, 4096), dev.facts(90, false), o, 64).x_image);
  o.wgmma_x_image = false;
  CHECK(!make_plan(shape(4096, 4096), dev.facts(90, false), o, 64).x_image);
  o.wgmma_x_image = true;
  o.forced = kS8;
  CHECK(!make_plan(shape(4096, 4096), dev.facts(90, false), o, 64).x_image);
  o.forced = -1;
  CHECK(!make_plan(shape(4096, 4096), dev.facts(90, false), o, 16).x_image);  // M = 16: the GEMV
  const Plan big64 = make_plan(shape(8192, 57344), dev.facts(90, false), o, 64);
  CHECK(big64.kernel == kWg64);
  CHECK(big64.x_image);
  CHECK(big64.w_lsu);  // the weight path of a wgmma launch follows wgmma_w (default lsu), and only a wgmma launch
  o.wgmma_w_lsu = false;
  CHECK(!make_plan(shape(8192, 57344), dev.facts(90, false), o, 64).w_lsu);
  o.wgmma_w_lsu = true;
  o.forced = kS8;
  CHECK(!make_plan(shape(8192, 57344), dev.facts(90, false), o, 64).w_lsu);
  o.forced = -1;
  // The Hopper rules by M and layer size (the sweep of 2026-12-03).
  CHECK(make_plan(shape(4096, 4096), dev.facts(90, false), o, 32).kernel != kWg32);  // 16 Mi weights: GEMV
  CHECK(make_plan(shape(14336, 4096), dev.facts(90, false), o, 32).kernel == kV2);  // 56 Mi: GEMV v2
  CHECK(make_plan(shape(8192, 10240), dev.facts(90, false), o, 17).kernel == kV2);   // 80 Mi
  CHECK(make_plan(shape(4096, 28672), dev.facts(90, false), o, 32).kernel == kWg32);  // 112 Mi
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, false), o, 24).kernel == kWg32);
  CHECK(make_plan(shape(4096, 8192), dev.facts(90, false), o, 32).kernel == kWg32);  // 32 Mi
  CHECK(make_plan(shape(8192, 8192), dev.facts(89, false), o, 32).kernel == kV4);    // not Hopper
  CHECK(make_plan(shape(4096, 4096), dev.facts(90, false), o, 64).kernel == kWg64);
  CHECK(make_plan(shape(14336, 4096), dev.facts(90, false), o, 64).kernel == kWg64);
  CHECK(make_plan(shape(4096, 6144), dev.facts(90, false), o, 128).kernel == kWg64);
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, false), o, 128).kernel == kWg128);
  CHECK(make_plan(shape(8192, 10240), dev.facts(90, false), o, 128).kernel == kWg128);
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, false), o, 256).kernel == kWg256);
  CHECK(make_plan(shape(4096, 28672), dev.facts(90, false), o, 129).kernel == kWg256);
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, true), o, 1024).kernel == kCublas);
  // Past M = 256 (4 bits): wg128 (wg256 at 385-512) on the larger layers, the larger M the larger the layer, to 1024
  // on 28672x8192 only; 8-bit layers (two nibble planes, K doubled) and Ampere on dequantize + cuBLAS.
  auto eight = [](int64_t k, int64_t n) {
    ShapeFacts s = shape(2 * k, n);
    s.bits = 8;
    s.planes8 = true;  // the planes paired: every tiled kernel in one pass
    s.kt8 = (s.ku + 3) / 4;
    return s;
  };
  CHECK(make_plan(shape(14336, 4096), dev.facts(90, true), o, 384).kernel == kWg128);
  CHECK(make_plan(shape(14336, 4096), dev.facts(90, true), o, 385).kernel == kCublas);
  CHECK(make_plan(shape(4096, 6144), dev.facts(90, true), o, 257).kernel == kCublas);
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, true), o, 384).kernel == kWg128);
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, true), o, 385).kernel == kCublas);
  CHECK(make_plan(shape(8192, 10240), dev.facts(90, true), o, 640).kernel == kWg128);
  CHECK(make_plan(shape(8192, 10240), dev.facts(90, true), o, 512).kernel == kWg256);
  CHECK(make_plan(shape(8192, 10240), dev.facts(90, true), o, 513).kernel == kWg128);
  CHECK(make_plan(shape(28672, 8192), dev.facts(90, true), o, 400).kernel == kWg256);
  CHECK(make_plan(shape(28672, 8192), dev.facts(90, true), o, 256).kernel == kWg256);
  CHECK(make_plan(shape(8192, 10240), dev.facts(90, true), o, 385).kernel == kWg256);
  CHECK(make_plan(shape(8192, 10240), dev.facts(90, true), o, 641).kernel == kCublas);
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, true), o, 640).kernel == kWg128);
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, true), o, 641).kernel == kCublas);
  CHECK(make_plan(shape(28672, 8192), dev.facts(90, true), o, 700).kernel == kWg128);
  CHECK(make_plan(shape(28672, 8192), dev.facts(90, true), o, 257).kernel == kWg128);
  CHECK(make_plan(shape(28672, 8192), dev.facts(90, true), o, 1024).kernel == kWg128);
  CHECK(make_plan(shape(28672, 8192), dev.facts(90, true), o, 1025).kernel == kCublas);
  CHECK(make_plan(eight(8192, 10240), dev.facts(90, true), o, 257).kernel == kCublas);
  CHECK(make_plan(eight(28672, 8192), dev.facts(90, true), o, 1024).kernel == kCublas);
  // 8 bits at M = 129-256: dequantize + cuBLAS up to 128 Mi (K doubled), wgmma above and below.
  CHECK(make_plan(eight(8192, 8192), dev.facts(90, true), o, 256).kernel == kCublas);
  CHECK(make_plan(eight(4096, 4096), dev.facts(90, true), o, 129).kernel == kCublas);
  CHECK(make_plan(eight(8192, 8192), dev.facts(90, true), o, 128).kernel == kWg128);
  CHECK(make_plan(eight(8192, 10240), dev.facts(90, true), o, 256).kernel == kWg256);
  CHECK(make_plan(shape(2 * 8192, 8192), dev.facts(90, true), o, 256).kernel == kWg256);  // 4 bits, same size
  CHECK(make_plan(eight(8192, 8192), dev.facts(90, false), o, 256).kernel == kWg256);  // no cuBLAS
  CHECK(make_plan(shape(14336, 4096), dev.facts(90, true), o, 1024).kernel == kCublas);
  CHECK(make_plan(shape(28672, 8192), dev.facts(89, true), o, 1024).kernel == kCublas);
  // Without cuBLAS past M = 256 the table's last rows (tiled l) serve 8-bit layers, never wgmma.
  CHECK(make_plan(eight(8192, 10240), dev.facts(90, false, true), o, 300).kernel == kL);
  // Where the rules pick dequantize + cuBLAS, a plugin without cuBLAS (or below cublas_min_m)
  // gets the next row's wgmma kernel.
  CHECK(make_plan(shape(4096, 4096), dev.facts(90, true), o, 128).kernel == kCublas);
  CHECK(make_plan(shape(4096, 4096), dev.facts(90, false), o, 128).kernel == kWg64);
  CHECK(make_plan(shape(4096, 4096), dev.facts(90, false), o, 256).kernel == kWg256);
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, false, false), o, 64).kernel == kS8);  // not built
  CHECK(make_plan(shape(8192, 57344), dev.facts(89, false), o, 64).kernel == kS8);
}

TEST_CASE("8-bit layers whose planes pair up: the mma.sync kernels' one-pass instance over the real K") {
  FakeDevice dev;
  KernelInfo info8[kNumKernels]{};
  for (int i = 0; i < kNumKernels; ++i) info8[i] = dev.info[i];
  info8[kS4].slots = 2 * 132;  // fewer resident blocks than the two-plane instance's 3 per SM
  const PlanOptions o;
  for (int64_t k : {4096, 4160, 96}) {
    ShapeFacts s = shape(2 * k, 4096);
    s.bits = 8;
    s.planes8 = true;
    s.kt8 = (s.ku + 3) / 4;
    INFO("K = " << k << ", ku = " << s.ku << ", kt8 = " << s.kt8);
    CHECK(s.kt8 * 2 * kUnitK >= k);  // the stages cover the real K
    DeviceFacts f = dev.facts(80, false);
    f.info8 = info8;
    PlanOptions forced = o;
    forced.forced = kS4;
    const Plan p = make_plan(s, f, forced, 64);
    REQUIRE(p.declined.empty());
    CHECK(p.tiled_planes8);
    CHECK(kernel_stages(kernel_desc(kS4), s) == s.kt8);
    CHECK(&kernel_info(kernel_desc(kS4), f, s) == &info8[kS4]);
    CHECK(int64_t(p.grid) <= int64_t(p.m_tiles) * p.n_tiles * s.kt8);
    CHECK(p.grid <= info8[kS4].slots);
    // The GEMV runs the planes as they are (its own facts and stages).
    forced.forced = kV1;
    CHECK_FALSE(make_plan(s, f, forced, 4).tiled_planes8);
    // wgmma: in one pass too, and 8-bit layers without the pairing declined with the reason.
    DeviceFacts h = dev.facts(90, false);
    forced.forced = kWg64;
    s.planes8 = false;
    CHECK(make_plan(s, h, forced, 64).declined.find("8-bit layers only with both nibble planes in one pass") !=
          std::string::npos);
    CHECK(make_plan(s, h, o, 64).kernel != kWg64);  // the automatic choice passes it over
    s.planes8 = true;
    const Plan w = make_plan(s, h, forced, 64);
    REQUIRE(w.declined.empty());
    CHECK(w.tiled_planes8);
    CHECK(kernel_stages(kernel_desc(kWg64), s) == s.kt8);
    CHECK(int64_t(w.grid) <= int64_t(w.m_tiles) * w.n_tiles * s.kt8);
    // Without the pairing (or at 4 bits) the mma.sync kernels run the plain instance.
    s.planes8 = false;
    forced.forced = kS4;
    const Plan q = make_plan(s, f, forced, 64);
    CHECK_FALSE(q.tiled_planes8);
    CHECK(int64_t(q.grid) <= int64_t(q.m_tiles) * q.n_tiles * s.kt);
  }
}

TEST_CASE("options: each takes what it documents and names what it found otherwise") {
  const FakeDevice dev;
  PlanOptions o;
  std::string why;
  CHECK(set_plan_option(o, "kernel", "v2u2", false, &why) == NIBBLE_OK);
  CHECK(o.forced == kV2u2);
  CHECK(set_plan_option(o, "kernel", "auto", false, &why) == NIBBLE_OK);
  CHECK(o.forced == -1);
  CHECK(set_plan_option(o, "kernel", "cublas", false, &why) == NIBBLE_ERR_UNSUPPORTED);
  CHECK(set_plan_option(o, "kernel", "cublas", true, &why) == NIBBLE_OK);
  CHECK(o.forced == kCublas);
  CHECK(set_plan_option(o, "kernel", "v9", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("found 'v9'") != std::string::npos);
  CHECK(why.find("v1") != std::string::npos);
  CHECK(set_plan_option(o, "cublas_min_m", "-1", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(set_plan_option(o, "cublas_min_m", "300", false, &why) == NIBBLE_OK);
  CHECK(o.cublas_min_m == 300);
  CHECK(set_plan_option(o, "overlap", "2", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(set_plan_option(o, "overlap", "0", false, &why) == NIBBLE_OK);
  CHECK(!o.overlap);
  CHECK(set_plan_option(o, "min_stages", "x", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(set_plan_option(o, "min_stages", "16", false, &why) == NIBBLE_OK);
  CHECK(o.min_stages == 16);
  CHECK(set_plan_option(o, "wgmma_x", "tma", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("wgmma_x: expected copy or image, found 'tma'") != std::string::npos);
  CHECK(o.wgmma_x_image);  // unchanged: the default
  CHECK(set_plan_option(o, "wgmma_x", "copy", false, &why) == NIBBLE_OK);
  CHECK(!o.wgmma_x_image);
  CHECK(set_plan_option(o, "wgmma_x", "image", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_x_image);
  CHECK(set_plan_option(o, "wgmma_w", "tma", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("wgmma_w: expected bulk or lsu, found 'tma'") != std::string::npos);
  CHECK(o.wgmma_w_lsu);  // unchanged: the default
  CHECK(set_plan_option(o, "wgmma_w", "lsu", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_w_lsu);
  CHECK(set_plan_option(o, "wgmma_fixup", "tree", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("wgmma_fixup: expected last, split or auto, found 'tree'") != std::string::npos);
  CHECK(o.wgmma_fixup == PlanOptions::Fixup::automatic);  // unchanged: the default
  CHECK(set_plan_option(o, "wgmma_fixup", "split", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_fixup == PlanOptions::Fixup::split);
  CHECK(set_plan_option(o, "wgmma_fixup", "last", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_fixup == PlanOptions::Fixup::last);
  CHECK(set_plan_option(o, "wgmma_fixup", "auto", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_fixup == PlanOptions::Fixup::automatic);
  // Which launches get the split fix-up: with "split" every wgmma launch (never the GEMV), with
  // "auto" tiles of BM >= 64 where a block has at most 48 k stages, with "last" none.
  PlanOptions f;
  f.wgmma_fixup = PlanOptions::Fixup::split;
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, false), f, 64).split_fixup);
  CHECK(!make_plan(shape(8192, 57344), dev.facts(90, false), f, 8).split_fixup);
  f.wgmma_fixup = PlanOptions::Fixup::automatic;
  const Plan few = make_plan(shape(8192, 8192), dev.facts(90, false), f, 128);  // 32 tiles of 256 x 128
  CHECK(few.kernel == kWg128);
  CHECK(few.split_fixup);
  CHECK(!make_plan(shape(8192, 57344), dev.facts(90, false), f, 128).split_fixup);  // 224 tiles
  CHECK(!make_plan(shape(28672, 8192), dev.facts(90, false), f, 128).split_fixup);  // 109 stages per block
  CHECK(make_plan(shape(4096, 4096), dev.facts(90, false), f, 64).split_fixup);     // wg64, 8 stages
  const Plan wg32 = make_plan(shape(4096, 28672), dev.facts(90, false), f, 32);
  CHECK(wg32.kernel == kWg32);
  CHECK(!wg32.split_fixup);  // BM 32
  f.wgmma_fixup = PlanOptions::Fixup::last;
  CHECK(!make_plan(shape(8192, 8192), dev.facts(90, false), f, 128).split_fixup);
  CHECK(set_plan_option(o, "wgmma_w", "bulk", false, &why) == NIBBLE_OK);
  CHECK(!o.wgmma_w_lsu);
  // gemv_prefetch: 0..16 batches; only GEMV launches carry it.
  PlanOptions g;
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, false), g, 1).prefetch == PlanOptions::kDefaultGemvPrefetch);
  CHECK(set_plan_option(g, "gemv_prefetch", "17", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("gemv_prefetch: expected a count of batches from 0 (none) to 16, found '17'") != std::string::npos);
  CHECK(set_plan_option(g, "gemv_prefetch", "-1", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(g.gemv_prefetch == PlanOptions::kDefaultGemvPrefetch);  // unchanged
  CHECK(set_plan_option(g, "gemv_prefetch", "5", false, &why) == NIBBLE_OK);
  const Plan gv = make_plan(shape(8192, 8192), dev.facts(90, false), g, 1);
  CHECK(kernel_desc(gv.kernel).family == Family::gemv);
  CHECK(gv.prefetch == 5);
  CHECK(set_plan_option(g, "gemv_prefetch", "0", false, &why) == NIBBLE_OK);
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, false), g, 1).prefetch == 0);
  CHECK(set_plan_option(g, "gemv_prefetch", "5", false, &why) == NIBBLE_OK);
  CHECK(make_plan(shape(8192, 57344), dev.facts(90, false), g, 64).prefetch == 0);  // wgmma: none
  // gemv_planes8: 0 or 1 (default 1); only GEMV launches carry it.
  PlanOptions q;
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, false), q, 1).planes8);
  CHECK(set_plan_option(q, "gemv_planes8", "0", false, &why) == NIBBLE_OK);
  CHECK(!make_plan(shape(8192, 8192), dev.facts(90, false), q, 1).planes8);
  CHECK(set_plan_option(q, "gemv_planes8", "2", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("gemv_planes8: expected 0 or 1, found '2'") != std::string::npos);
  CHECK(!q.gemv_planes8);  // unchanged
  CHECK(set_plan_option(q, "gemv_planes8", "1", false, &why) == NIBBLE_OK);
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, false), q, 1).planes8);
  CHECK(!make_plan(shape(8192, 57344), dev.facts(90, false), q, 64).planes8);  // wgmma: none
  // gemv_whole: 0 or 1 (default 1); only GEMV launches carry it.
  PlanOptions h;
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, false), h, 1).whole);
  CHECK(set_plan_option(h, "gemv_whole", "0", false, &why) == NIBBLE_OK);
  CHECK(!make_plan(shape(8192, 8192), dev.facts(90, false), h, 1).whole);
  CHECK(set_plan_option(h, "gemv_whole", "yes", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("gemv_whole: expected 0 or 1, found 'yes'") != std::string::npos);
  CHECK(!h.gemv_whole);  // unchanged
  CHECK(set_plan_option(h, "gemv_whole", "1", false, &why) == NIBBLE_OK);
  CHECK(!make_plan(shape(8192, 57344), dev.facts(90, false), h, 64).whole);  // wgmma: none
  // dense_chunk_mib: 1-65536 (default 128).
  PlanOptions c;
  CHECK(c.dense_chunk_mib == 128);
  CHECK(set_plan_option(c, "dense_chunk_mib", "16", false, &why) == NIBBLE_OK);
  CHECK(c.dense_chunk_mib == 16);
  for (const char* bad : {"0", "65537", "8M", ""}) {
    CHECK(set_plan_option(c, "dense_chunk_mib", bad, false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
    CHECK(why.find("dense_chunk_mib: expected MiB from 1 to 65536") != std::string::npos);
  }
  CHECK(c.dense_chunk_mib == 16);  // unchanged
  // dense_overlap: 0 or 1 (default 0).
  CHECK(!c.dense_overlap);
  CHECK(set_plan_option(c, "dense_overlap", "1", false, &why) == NIBBLE_OK);
  CHECK(c.dense_overlap);
  CHECK(set_plan_option(c, "dense_overlap", "on", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("dense_overlap: expected 0 or 1, found 'on'") != std::string::npos);
  CHECK(c.dense_overlap);  // unchanged
  CHECK(set_plan_option(o, "colour", "blue", false, &why) == NIBBLE_ERR_UNSUPPORTED);
  CHECK(why.find("unknown option 'colour'") != std::string::npos);
}

// The wgmma kernel's stream-K fix-up relies on properties of the grid's split of the items
// (wgmma_layout.h): checked here for every wgmma plan on the test shapes and for small grids
// of every size. The kernel runs the same functions.
namespace {

void check_stream_k(int64_t tiles, int64_t kt, int64_t blocks) {
  using namespace nibble::cuda;
  const int64_t work = tiles * kt;
  INFO("tiles " << tiles << " kt " << kt << " blocks " << blocks);
  REQUIRE(blocks >= 1);
  REQUIRE(blocks <= work);
  CHECK(wg_sk_begin(0, blocks, work) == 0);
  CHECK(wg_sk_begin(blocks, blocks, work) == work);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t ib = wg_sk_begin(b, blocks, work), ie = wg_sk_begin(b + 1, blocks, work);
    REQUIRE(ib < ie);  // no empty block
    for (int64_t i : {ib, (ib + ie) / 2, ie - 1}) CHECK(wg_sk_block_of(i, blocks, work) == b);
  }
  // Per block: how many shared tiles it takes part in as a participant of the split fix-up, and
  // the slots its parts go to (2b for its first tile, 2b + 1 otherwise).
  std::vector<int> waits(size_t(blocks), 0);
  std::set<int64_t> slots;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t t0 = t * kt, t1 = t0 + kt;
    const int64_t bf = wg_sk_block_of(t0, blocks, work), bl = wg_sk_block_of(t1 - 1, blocks, work);
    if (bf == bl) continue;  // one block holds the whole tile: no fix-up
    for (int64_t b = bf; b <= bl; ++b) {
      const int64_t ib = wg_sk_begin(b, blocks, work), ie = wg_sk_begin(b + 1, blocks, work);
      CHECK(std::max(ib, t0) < std::min(ie, t1));  // every block of bf .. bl holds items of t
      const int64_t slot = 2 * b + (ib / kt == t ? 0 : 1);
      CHECK(slots.insert(slot).second);  // no slot is written twice in one launch
      if (b < bl) {
        // A participant waits here, so this must be its last tile (every part a block writes
        // before its last tile is written without waiting): no block ever waits twice, and no
        // wait depends on a block that is itself waiting before writing its part.
        CHECK((ie - 1) / kt == t);
        ++waits[size_t(b)];
      } else {
        CHECK(ib > t0);  // bl's part of t is the start of its range: it goes on without waiting
      }
    }
    // The participants' chunk slices cover each chunk of the tile exactly once.
    const int np = int(bl - bf);
    for (int chunks : {1, 2, 4}) {
      std::vector<int> seen(size_t(chunks), 0);
      for (int pi = 0; pi < np; ++pi)
        for (int c = wg_split_chunk(pi, np, chunks); c < wg_split_chunk(pi + 1, np, chunks); ++c) ++seen[size_t(c)];
      for (int c = 0; c < chunks; ++c) CHECK(seen[size_t(c)] == 1);
    }
    // The counter: parts arrivals, then one per participant; the last sees 2 (bl - bf) and resets.
    CHECK((bl - bf + 1) + np - 1 == 2 * (bl - bf));
  }
  for (int64_t b = 0; b < blocks; ++b) CHECK(waits[size_t(b)] <= 1);
}

}  // namespace

TEST_CASE("the wgmma kernel's stream-K split: parts, slots and the split fix-up's waits") {
  const FakeDevice dev;
  for (const auto& [k, n] : kShapes)
    for (int64_t m : kMs) {
      const ShapeFacts s = shape(k, n);
      for (int forced : {int(kWg16), int(kWg64), int(kWg128), int(kWg256)}) {
        PlanOptions o;
        o.forced = forced;
        o.wgmma_fixup = PlanOptions::Fixup::split;
        const Plan p = make_plan(s, dev.facts(90, false), o, m);
        if (!p.declined.empty()) continue;
        CHECK(p.split_fixup);
        check_stream_k(int64_t(p.m_tiles) * p.n_tiles, s.kt, p.grid);
      }
    }
  for (int64_t tiles : {1, 2, 3, 7, 16})
    for (int64_t kt : {1, 2, 5, 64})
      for (int64_t blocks = 1; blocks <= std::min<int64_t>(tiles * kt, 40); ++blocks) check_stream_k(tiles, kt, blocks);
}

// The block walks of the wgmma kernel (wgmma_layout.h, WgItems): with whole waves or without,
// every (tile, k stage) item is run by exactly one block, a whole tile by one block from its first
// stage to its last, and the tail is a stream-K split with the properties above; the raster order
// is a bijection onto the tiles, the plain order when its group covers every m tile, and a wave of
// neighbouring tiles otherwise.
namespace {

void check_walks(int m_tiles, int n_tiles, int kt, int blocks, bool waves) {
  using namespace nibble::cuda;
  const int64_t tiles = int64_t(m_tiles) * n_tiles;
  INFO("m_tiles " << m_tiles << " n_tiles " << n_tiles << " kt " << kt << " blocks " << blocks << " waves " << waves);
  std::vector<int> seen(size_t(tiles * kt), 0);
  int64_t whole_tiles = 0;
  for (int b = 0; b < blocks; ++b) {
    const WgTail tail = wg_tail(b, blocks, tiles, kt, waves);
    whole_tiles = tail.whole;
    CHECK(tail.whole % blocks == 0);
    CHECK(tail.whole <= tiles);
    if (waves && tiles >= blocks && tail.whole < tiles) CHECK(tiles - tail.whole >= blocks);  // a wave or more
    if (waves && tail.whole < tiles) CHECK(tiles - tail.whole < 2 * blocks);
    if (!waves) CHECK(tail.whole == 0);
    WgTailStart start;
    const int n = WgItems::plan(tail, kt, blocks, &start);
    WgItems it;
    it.init(b, start);
    int prev_tile = -1, prev_kt = -1;
    for (int i = 0; i < n; ++i, it.next(kt, blocks, start)) {
      REQUIRE(it.tile >= 0);
      REQUIRE(it.tile < tiles);
      REQUIRE(it.kt >= 0);
      REQUIRE(it.kt < kt);
      ++seen[size_t(int64_t(it.tile) * kt + it.kt)];
      CHECK(it.in_whole() == (it.tile < tail.whole));
      if (it.in_whole()) CHECK(it.tile % blocks == b);
      if (it.tile == prev_tile) CHECK(it.kt == prev_kt + 1);  // a tile's stages in order, none skipped
      prev_tile = it.tile;
      prev_kt = it.kt;
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == 1);
  if (tiles > whole_tiles) check_stream_k(tiles - whole_tiles, kt, blocks);
}

}  // namespace

TEST_CASE("the wgmma kernel's walks: whole waves, then a stream-K tail; the raster order") {
  using namespace nibble::cuda;
  for (int m_tiles : {1, 2, 3, 8, 9, 17})
    for (int n_tiles : {1, 5, 16})
      for (int kt : {1, 3, 8})
        for (int blocks : {1, 2, 7, 13})
          for (bool waves : {false, true})
            if (int64_t(m_tiles) * n_tiles * kt >= blocks) check_walks(m_tiles, n_tiles, kt, blocks, waves);
  // The plans' own grids on the test shapes.
  const FakeDevice dev;
  for (const auto& [k, n] : kShapes)
    for (int64_t m : {int64_t(256), int64_t(1000), int64_t(4096)}) {
      if (m == 4096 && k * n > 4096 * 4096) continue;  // (the test's time)
      for (int forced : {int(kWg128), int(kWg256), -1}) {
        PlanOptions o;
        o.forced = forced;  // -1: the default plan (wg256 at M = 256 and 385-512, wg128 or cuBLAS elsewhere)
        if (forced >= 0) o.wgmma_sched = PlanOptions::Sched::waves;
        const Plan p = make_plan(shape(k, n), dev.facts(90, false), o, m);
        REQUIRE(p.declined.empty());
        if (forced >= 0) CHECK(p.waves);
        if (kernel_desc(KernelId(p.kernel)).family == Family::wgmma)
          check_walks(p.m_tiles, p.n_tiles, int(shape(k, n).kt), p.grid, p.waves);
      }
    }
  // Raster: a bijection; the plain order when the group covers every m tile; a run of 132 tiles
  // touches the m tiles of the bands it spans only (of kWgRasterGroup m tiles each).
  for (int m_tiles : {1, 5, 8, 13, 32})
    for (int n_tiles : {1, 7, 224}) {
      std::set<std::pair<int, int>> all;
      for (int t = 0; t < m_tiles * n_tiles; ++t) {
        int mti, nti;
        wg_tile_coords(t, m_tiles, n_tiles, kWgRasterGroup, &mti, &nti);
        REQUIRE(mti >= 0);
        REQUIRE(mti < m_tiles);
        REQUIRE(nti >= 0);
        REQUIRE(nti < n_tiles);
        all.insert({mti, nti});
        int pm, pn;
        wg_tile_coords(t, m_tiles, n_tiles, m_tiles, &pm, &pn);
        CHECK(pm == t % m_tiles);
        CHECK(pn == t / m_tiles);
      }
      CHECK(all.size() == size_t(m_tiles) * n_tiles);
      for (int t0 = 0; t0 + 132 <= m_tiles * n_tiles; t0 += 61) {
        std::set<int> ms;
        for (int t = t0; t < t0 + 132; ++t) {
          int mti, nti;
          wg_tile_coords(t, m_tiles, n_tiles, kWgRasterGroup, &mti, &nti);
          ms.insert(mti);
        }
        const int band = kWgRasterGroup * n_tiles, bands = (132 + band - 1) / band + 1;
        CHECK(ms.size() <= size_t(bands * kWgRasterGroup));
        if (n_tiles >= 132) CHECK(ms.size() <= size_t(2 * kWgRasterGroup));
      }
    }
  // The option, and which launches walk whole waves: with "auto" (the default) the tiles of
  // BM >= 128 only, with "waves" every wgmma launch, with "stream_k" none; the GEMV never.
  PlanOptions o;
  std::string why;
  // `waves(m, kernel, forced)`: the plan at m runs `kernel` (declines nothing) and walks waves.
  const auto waves = [&](int64_t m, KernelId kernel, int32_t forced = -1) {
    PlanOptions f = o;
    f.forced = forced;
    const Plan p = make_plan(shape(8192, 57344), dev.facts(90, false), f, m);
    REQUIRE(p.declined.empty());
    REQUIRE(p.kernel == kernel);
    return p.waves;
  };
  CHECK(o.wgmma_sched == PlanOptions::Sched::automatic);
  CHECK(waves(256, kWg256));
  CHECK(waves(128, kWg128));
  CHECK(!waves(64, kWg64));
  CHECK(!waves(1, kV1));
  CHECK(waves(1000, kWg128, kWg128));
  CHECK(!waves(1000, kWg64, kWg64));
  CHECK(set_plan_option(o, "wgmma_sched", "waves", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_sched == PlanOptions::Sched::waves);
  CHECK(waves(64, kWg64));
  CHECK(waves(1000, kWg16, kWg16));
  CHECK(!waves(1, kV1));
  CHECK(set_plan_option(o, "wgmma_sched", "tiles", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("wgmma_sched: expected stream_k, waves or auto, found 'tiles'") != std::string::npos);
  CHECK(o.wgmma_sched == PlanOptions::Sched::waves);  // unchanged
  CHECK(set_plan_option(o, "wgmma_sched", "stream_k", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_sched == PlanOptions::Sched::stream_k);
  CHECK(!waves(256, kWg256));
  CHECK(!waves(1000, kWg128, kWg128));
  CHECK(set_plan_option(o, "wgmma_sched", "auto", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_sched == PlanOptions::Sched::automatic);
}

TEST_CASE("clusters of 2 for the wgmma kernel (x multicast): where the plan asks for them, and their walks") {
  const FakeDevice dev;
  std::string why;
  PlanOptions o;
  CHECK(!o.wgmma_cluster);  // off until measured
  CHECK(set_plan_option(o, "wgmma_cluster", "sometimes", false, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("wgmma_cluster: expected off or on, found 'sometimes'") != std::string::npos);
  CHECK(set_plan_option(o, "wgmma_cluster", "on", false, &why) == NIBBLE_OK);
  CHECK(o.wgmma_cluster);
  int clustered = 0;
  for (const auto& [k, n] : kShapes)
    for (int64_t m : {int64_t(1), int64_t(64), int64_t(129), int64_t(256), int64_t(1000), int64_t(4096)})
      for (int forced : {int(kWg64), int(kWg128), int(kWg256), -1}) {
        PlanOptions f = o;
        f.forced = forced;
        const ShapeFacts sf = shape(k, n);
        const Plan p = make_plan(sf, dev.facts(90, false), f, m);
        REQUIRE(p.declined.empty());
        const KernelInfo& ki = dev.info[p.kernel];
        const bool can = kernel_desc(p.kernel).family == Family::wgmma && ki.bm >= 128 && p.n_tiles % 2 == 0;
        CHECK(p.cluster == can);
        if (!p.cluster) continue;
        ++clustered;
        CHECK(p.grid % 2 == 0);
        CHECK(p.grid >= 2);
        CHECK(p.grid <= ki.cluster_slots);
        CHECK(!p.split_fixup);  // a cluster launch is not cooperative
        // The kernel's walk: clusters over tiles of 2 n tiles, every (tile, k stage) once.
        if (int64_t(p.m_tiles) * p.n_tiles <= 4096) check_walks(p.m_tiles, p.n_tiles / 2, int(sf.kt), p.grid / 2, p.waves);
      }
  CHECK(clustered > 0);
  // Not for 8-bit layers in one pass, nor without the x image, nor where the device holds no cluster.
  ShapeFacts s8 = shape(8192, 8192);
  s8.bits = 8;
  s8.planes8 = true;
  PlanOptions f = o;
  f.forced = kWg128;
  CHECK(!make_plan(s8, dev.facts(90, false), f, 1000).cluster);
  f.wgmma_x_image = false;
  CHECK(!make_plan(shape(8192, 8192), dev.facts(90, false), f, 1000).cluster);
  f.wgmma_x_image = true;
  FakeDevice none;
  none.info[kWg128].cluster_slots = 0;
  CHECK(!make_plan(shape(8192, 8192), none.facts(90, false), f, 1000).cluster);
  CHECK(make_plan(shape(8192, 8192), dev.facts(90, false), f, 1000).cluster);
  CHECK(set_plan_option(o, "wgmma_cluster", "off", false, &why) == NIBBLE_OK);
  f = o;
  f.forced = kWg128;
  CHECK(!make_plan(shape(8192, 8192), dev.facts(90, false), f, 1000).cluster);
}
