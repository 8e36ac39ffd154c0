// GPU-free tests of cuda_w4a16's layout planning (layout_plan.h): padding, the packed row order of
// act order (every canonical row exactly once, in its group's slot, groups padded to a multiple of
// 32), the canonical group of each packed group, the kernels' multiply-high group lookup, and the
// errors a malformed layer gets.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>
#include <random>
#include <vector>

#include "layout.h"
#include "layout_plan.h"
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
  CHECK(p.k == s.k);
  CHECK(p.n == s.n);
  CHECK(p.k_pad % cuda::kTileK == 0);
  CHECK(p.n_pad % cuda::kNPad == 0);
  CHECK(p.n_pad >= s.n);
  CHECK(p.n_pad - s.n < cuda::kNPad);
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
