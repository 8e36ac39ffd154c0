// GPU-free tests of cuda_w4a16's layout planning (layout_plan.h): padding, the packed row order of
// act order (every canonical row exactly once, in its group's slot, groups padded to a multiple of
// 32), the canonical group of each packed group, the kernels' multiply-high group lookup, and the
// errors a malformed layer gets.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "layout.h"
#include "layout_plan.h"
#include "nibble/dtype.h"
#include "test_util.h"

using namespace nibble;
using nibble::cuda::LayoutPlan;

std::string nibble::test::skip_reason() { return {}; }

namespace {

LayoutPlan plan_of(const LinearSpec& s, const int32_t* g_idx) {
  const nibble_linear_spec abi = s.to_abi();
  LayoutPlan p;
  std::string why;
  const int32_t st = cuda::plan_layout(abi, g_idx, &p, &why);
  REQUIRE_MESSAGE(st == NIBBLE_OK, why);
  return p;
}

// The geometry every plan must have, whatever the layer.
void check_geometry(const LinearSpec& s, const LayoutPlan& p) {
  if (s.k > 0) {
    CHECK(p.k == s.k);
    CHECK(p.n == s.n);
  }
  CHECK(p.k_pad % cuda::kTileK == 0);
  CHECK(p.n_pad % cuda::kNPad == 0);
  CHECK(p.n_pad >= p.n);
  CHECK(p.n_pad - p.n < cuda::kNPad);
  CHECK(p.strips * int64_t(cuda::kStripN) == p.n_pad);
  CHECK(p.ku * int64_t(cuda::kUnitK) == p.k_pad);
  CHECK(p.kt * int64_t(cuda::kTileK) == p.k_pad);
  CHECK(p.g_eff % cuda::kGroupAlign == 0);
  CHECK(p.groups_pad == (p.k_pad + p.g_eff - 1) / p.g_eff);
  CHECK(p.gmap.size() == std::size_t(p.groups_pad));
  // The kernels' group of a unit (multiply-high by g_magic) is the division it stands for.
  for (int64_t u = 0; u < p.ku; ++u)
    REQUIRE_MESSAGE(cuda::plan_unit_group(u, p.g_magic) == u * cuda::kUnitK / p.g_eff, "unit ", u);
}

}  // namespace

TEST_CASE("plain layers: rows in order, K padded to a stage, groups as given") {
  for (int g : {32, 64, 128, -1})
    for (int64_t k : {64, 130, 320, 4100, 14336}) {
      LinearSpec s;
      s.name = "plain";
      s.k = k;
      s.n = 200;
      s.group_size = g;
      const LayoutPlan p = plan_of(s, nullptr);
      check_geometry(s, p);
      CHECK(p.perm.empty());
      CHECK(p.k_pad == (k + 63) / 64 * 64);
      CHECK(p.g_eff == (g > 0 ? g : p.k_pad));
      const int64_t groups = s.num_groups();
      for (int32_t gi = 0; gi < p.groups_pad; ++gi) CHECK(p.gmap[std::size_t(gi)] == (gi < groups ? gi : -1));
      // Every canonical row k falls in its own canonical group.
      for (int64_t r = 0; r < k; ++r) REQUIRE(p.gmap[std::size_t(r / p.g_eff)] == (g > 0 ? r / g : 0));
    }
}

TEST_CASE("act order: every row once, in its group's slot, in canonical order") {
  std::mt19937_64 rng(7);
  for (int g : {32, 64, 128})
    for (int64_t k : {130, 512, 4100}) {
      LinearSpec s;
      s.name = "act";
      s.k = k;
      s.n = 40;
      s.group_size = g;
      s.act_order = true;
      const CanonicalLinear w = random_canonical(s, rng());
      const auto* g_idx = w.g_idx.data_as<int32_t>();
      const LayoutPlan p = plan_of(s, g_idx);
      check_geometry(s, p);
      REQUIRE(p.perm.size() == std::size_t(p.k_pad));
      std::vector<int> seen(std::size_t(k), 0);
      std::vector<int64_t> longest(std::size_t(s.num_groups()), 0);
      for (int64_t r = 0; r < k; ++r) ++longest[std::size_t(g_idx[r])];
      int64_t most = 0;
      for (int64_t v : longest) most = std::max(most, v);
      CHECK(p.g_eff == (most + 31) / 32 * 32);
      for (int64_t row = 0; row < p.k_pad; ++row) {
        const int32_t src = p.perm[std::size_t(row)];
        if (src < 0) continue;
        REQUIRE(src < k);
        ++seen[std::size_t(src)];
        // The packed group of this row is the canonical group of its source row.
        REQUIRE_MESSAGE(p.gmap[std::size_t(row / p.g_eff)] == g_idx[src], "packed row ", row);
        // Within a slot, canonical order.
        if (row % p.g_eff && p.perm[std::size_t(row - 1)] >= 0) REQUIRE(p.perm[std::size_t(row - 1)] < src);
      }
      for (int64_t r = 0; r < k; ++r) REQUIRE_MESSAGE(seen[std::size_t(r)] == 1, "row ", r);
    }
}

TEST_CASE("act order on a row-parallel shard: empty groups take no slot") {
  LinearSpec s;
  s.name = "shard";
  s.k = 96;
  s.full_k = 512;
  s.parallel = Parallel::row;
  s.n = 24;
  s.group_size = 32;
  s.act_order = true;
  // The shard holds rows of groups 1, 5 and 9 only (16 groups in the full layer).
  std::vector<int32_t> g_idx(std::size_t(s.k));
  for (int64_t r = 0; r < s.k; ++r) g_idx[std::size_t(r)] = int32_t(1 + 4 * (r % 3));
  const LayoutPlan p = plan_of(s, g_idx.data());
  check_geometry(s, p);
  CHECK(p.g_eff == 32);
  CHECK(p.k_pad == 128);  // 3 slots of 32, rounded up to a stage of 64
  CHECK(p.gmap[0] == 1);
  CHECK(p.gmap[1] == 5);
  CHECK(p.gmap[2] == 9);
  CHECK(p.gmap[3] == -1);
}

TEST_CASE("malformed layers are refused with the layer, the tensor and the value") {
  LinearSpec s;
  s.name = "model.layers.3.mlp.up_proj";
  s.k = 64;
  s.n = 8;
  s.group_size = 32;
  s.act_order = true;
  std::vector<int32_t> g_idx(64, 0);
  g_idx[17] = 2;  // 2 groups only
  const nibble_linear_spec abi = s.to_abi();
  LayoutPlan p;
  std::string why;
  CHECK(cuda::plan_layout(abi, g_idx.data(), &p, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("model.layers.3.mlp.up_proj") != std::string::npos);
  CHECK(why.find("g_idx[17] = 2") != std::string::npos);
  why.clear();
  CHECK(cuda::plan_layout(abi, nullptr, &p, &why) == NIBBLE_ERR_INVALID_ARGUMENT);
  CHECK(why.find("g_idx missing") != std::string::npos);

  // A bf16 scale beyond fp16's range cannot be used with fp16 activations.
  LinearSpec f;
  f.name = "scales";
  f.k = 64;
  f.n = 4;
  f.group_size = 32;
  f.act_dtype = DType::f16;
  f.scale_dtype = DType::bf16;
  std::vector<uint16_t> sc(8, 0x3f80);  // 1.0
  sc[5] = 0x4780;                       // 65536
  const nibble_linear_spec fa = f.to_abi();
  why.clear();
  CHECK(cuda::check_scales(fa, sc.data(), &why) == NIBBLE_ERR_UNSUPPORTED);
  CHECK(why.find("group 1, column 1") != std::string::npos);
  sc[5] = 0x3f80;
  CHECK(cuda::check_scales(fa, sc.data(), &why) == NIBBLE_OK);
}

TEST_CASE("every width: the packed rows, read through the x map, compute the real layer") {
  // For each packed row r: its 4-bit layer row v = perm[r] (or r), its x column x_map[r] (or v).
  // Sum over packed rows of x[x_map[r]] * w4(v, n) must be the real layer's sum of x[k] * w(k, n).
  std::mt19937_64 rng(11);
  for (WeightType wt : {WeightType::uint2, WeightType::uint2b2, WeightType::uint3, WeightType::uint3b4,
                        WeightType::uint4, WeightType::uint8, WeightType::uint8b128})
    for (int g : {32, 128, -1})
      for (bool ao : {false, true}) {
        if (ao && g == -1) continue;
        LinearSpec s;
        s.name = fmt::format("width.{}.g{}.{}", weight_type_name(wt), g, ao ? "act" : "plain");
        s.k = 200;
        s.n = 12;
        s.group_size = g;
        s.weight_type = wt;
        s.bits = nibble_weight_type_bits(int32_t(wt));
        s.act_order = ao;
        s.scale_dtype = DType::f16;
        const CanonicalLinear w = random_canonical(s, rng());
        const nibble_linear_spec abi = s.to_abi();
        const nibble_canonical_weights cw = w.to_abi();
        cuda::PlannedLayer layer;
        std::string why;
        REQUIRE_MESSAGE(cuda::plan_layer(abi, cw, &layer, &why) == NIBBLE_OK, why);
        INFO(s.name);
        CHECK(layer.spec.bits == 4);
        CHECK(layer.planes.has_value() == (s.bits != 4));
        const LayoutPlan& p = layer.lp;
        check_geometry(LinearSpec{}, p);  // geometry checks that need no spec
        if (!layer.x_map.empty()) REQUIRE(layer.x_map.size() == std::size_t(p.k_pad));
        // The dense path's one-pass 8-bit dequantization: every 8-bit layout pairs its planes, no
        // other width claims to, and a twin reading another column or a column read twice breaks it.
        CHECK(cuda::planes8_dense_pairs(layer, abi) == (s.bits == 8));
        if (s.bits == 8) {
          const int64_t ge = p.g_eff;
          for (int mutation = 0; mutation < 4; ++mutation) {
            cuda::PlannedLayer bad = layer;
            std::vector<int32_t>& xm = bad.x_map;
            int64_t r = 0;  // the first low-plane row that reads x
            while (xm[std::size_t(r)] < 0) ++r;
            if (mutation == 0) xm[std::size_t(r + ge)] = (xm[std::size_t(r)] + 1) % int32_t(s.k);  // twins differ
            if (mutation == 1) xm[std::size_t(r)] = xm[std::size_t(r + ge)] = xm[std::size_t(r + 1)];  // read twice
            if (mutation == 2) xm[std::size_t(r)] = xm[std::size_t(r + ge)] = -1;  // a column never read
            if (mutation == 3) bad.lp.g_eff = ge / 2 * 3;  // groups that do not pair up
            INFO("mutation " << mutation);
            CHECK_FALSE(cuda::planes8_dense_pairs(bad, abi));
          }
        }
        // The 4-bit layer's weight of row v, column n.
        const nibble_linear_spec& vs = layer.spec;
        const auto* q = layer.weights.qweight;
        const auto* sc = static_cast<const uint16_t*>(layer.weights.scales);
        const int64_t vg = vs.group_size <= 0 ? vs.k : vs.group_size;
        auto w4 = [&](int64_t v, int64_t n) {
          const int64_t grp = layer.weights.g_idx ? layer.weights.g_idx[v] : v / vg;
          const int code = int((q[(v / 8) * vs.n + n] >> (4 * (v % 8))) & 0xfu);
          const int z = layer.weights.zeros ? layer.weights.zeros[grp * vs.n + n] : 8;
          return double(f16_to_float(sc[grp * vs.n + n])) * (code - z);
        };
        std::vector<double> x(std::size_t(s.k));
        for (auto& v : x) v = std::uniform_real_distribution<double>(-1, 1)(rng);
        for (int64_t n = 0; n < s.n; ++n) {
          double want = 0, got = 0, mag = 0;
          for (int64_t k = 0; k < s.k; ++k)
            want += x[std::size_t(k)] * w.weight(k, n), mag += std::fabs(x[std::size_t(k)] * w.weight(k, n));
          for (int64_t r = 0; r < p.k_pad; ++r) {
            const int64_t v = p.perm.empty() ? (r < vs.k ? r : -1) : p.perm[std::size_t(r)];
            const int64_t xc = layer.x_map.empty() ? v : layer.x_map[std::size_t(r)];
            REQUIRE((v >= 0 || xc < 0));  // a zero row never reads x (a planes' padding row may have v >= 0)
            if (xc >= 0) got += x[std::size_t(xc)] * w4(v, n);
          }
          REQUIRE_MESSAGE(std::fabs(got - want) <= 1e-12 * mag + 1e-300, "column ", n, ": ", got, " vs ",
                          want);
          // The tiled kernels' one-pass 8-bit walk (mma_sync.cu, wgmma.cu): real unit r is packed
          // unit r + upg (r / upg) and its twin upg units on, both multiplied by x of the compact
          // map's rows r * 32 .. r * 32 + 31 (low_plane_rows).
          if (s.bits == 8) {
            constexpr int64_t kUnitK = cuda::kUnitK;
            const std::vector<int32_t> x8 = cuda::low_plane_rows(layer.x_map, p);
            REQUIRE(int64_t(x8.size()) == p.ku / 2 * kUnitK);
            const int64_t upg = p.g_eff / kUnitK;
            double got8 = 0;
            for (int64_t r = 0; r < p.ku / 2; ++r)
              for (int64_t i = 0; i < kUnitK; ++i) {
                const int64_t lo = (r + upg * (r / upg)) * kUnitK + i, hi = lo + upg * kUnitK;
                const int32_t xc = x8[std::size_t(r * kUnitK + i)];
                REQUIRE(p.perm.empty());
                if (xc >= 0) got8 += x[std::size_t(xc)] * ((lo < vs.k ? w4(lo, n) : 0) + (hi < vs.k ? w4(hi, n) : 0));
              }
            REQUIRE_MESSAGE(std::fabs(got8 - want) <= 1e-12 * mag + 1e-300, "column ", n, " (one-pass walk): ",
                            got8, " vs ", want);
          }
        }
      }
}
