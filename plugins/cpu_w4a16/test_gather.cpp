// Host-side tests of gather_x (kernel_portable.cpp), on any CPU: x gathered by a team of any
// size, in any order of its units, must be bit for bit what one member gathers alone, in every
// layout a kernel form reads (f32, bf16 pairs, fp16 as hi + lo, the AMX tile layout, the integer
// parts, an 8-bit layer's bytes), for layers whose rows are x's own (identity rows) and for those
// read through row_src (act order, 8-bit nibble rows), at M below and above the team's size (where
// a row is split into parts, one per member).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cpu_weights.h"
#include "kernels.h"
#include "nibble/canonical.h"
#include "nibble/dtype.h"
#include "test_util.h"
#include "thread_team.h"

using namespace nibble;

std::string nibble::test::skip_reason() { return {}; }

namespace {

struct Gathered {
  std::vector<float> xp, xs;
};

// x gathered by `members` members, each taking the units u = member, member + members, ... (so
// that a split row's parts go to different members, in an order unlike the static share), into
// buffers filled with a NaN pattern first: slots nobody writes stay as they were in both runs.
Gathered gather(const cpu::CpuWeights& w, const std::vector<uint16_t>& x, DType dt, const cpu::XLayout& l, int64_t m,
                int members) {
  Gathered g;
  g.xp.assign(size_t(cpu::x_buffer_words(w, l, m)), std::numeric_limits<float>::quiet_NaN());
  g.xs.assign(size_t((m + l.rb - 1) / l.rb * w.segments() * 2 * l.rb), std::numeric_limits<float>::quiet_NaN());
  const int64_t units = cpu::gather_x_units(w, l, m, members);
  for (int member = 0; member < members; ++member)
    for (int64_t u = member; u < units; u += members)
      cpu::gather_x_unit(w, x.data(), int32_t(dt), l, m, members, u, g.xp.data(), g.xs.data());
  return g;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("gather_x: a team of any size gathers what one member gathers, in every layout") {
  struct Layer { const char* what; int bits; bool act_order; WeightType wt; };
  const Layer layers[] = {{"4-bit", 4, false, WeightType::uint4b8},
                          {"4-bit act order", 4, true, WeightType::uint4},
                          {"2-bit", 2, false, WeightType::uint2b2},
                          {"8-bit", 8, false, WeightType::uint8b128},
                          {"8-bit act order", 8, true, WeightType::uint8}};
  int checked = 0;
  for (const Layer& ly : layers)
    for (const DType dt : {DType::bf16, DType::f16}) {
      LinearSpec s;
      s.name = "gather"; s.k = 1000; s.n = 40; s.group_size = 128; s.weight_type = ly.wt;
      s.act_dtype = dt; s.scale_dtype = DType::bf16; s.act_order = ly.act_order; s.bits = ly.bits;
      const CanonicalLinear c = random_canonical(s, uint64_t(17 + checked));
      const nibble_linear_spec as = c.spec.to_abi();
      const cpu::CpuWeights w =
          ly.bits == 8 ? cpu::prepare_cpu_weights_8bit(as, c.to_abi()) : cpu::prepare_cpu_weights(as, c.to_abi());
      CHECK(w.identity_rows == (ly.bits != 8 && !ly.act_order));
      struct Form { cpu::XForm f; int64_t rb; bool tiles; };
      std::vector<Form> forms = {{cpu::XForm::kF32, 1, false}, {cpu::XForm::kF32, 3, false},
                                 {dt == DType::f16 ? cpu::XForm::kBf16x2 : cpu::XForm::kBf16, 8, false},
                                 {dt == DType::f16 ? cpu::XForm::kBf16x2 : cpu::XForm::kBf16, 16, true},
                                 {cpu::XForm::kInt8, 4, false}};
      if (w.byte_rows) forms.insert(forms.end(), {{cpu::XForm::kF32Bytes, 8, false}, {cpu::XForm::kInt8Bytes, 4, false}});
      for (const int64_t m : {1, 3, 7})
        for (const Form& f : forms) {
          const cpu::XLayout l{f.f, std::min(f.rb, f.tiles ? f.rb : m), f.tiles ? cpu::amx_tile_steps(w) : 0};
          std::vector<uint16_t> x(size_t(m * s.k));
          uint64_t r = uint64_t(m) * 7919 + uint64_t(checked);
          for (auto& v : x) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const float val = float(int(r >> 40) % 2001 - 1000) / 250.0f;
            v = dt == DType::bf16 ? float_to_bf16(val) : float_to_f16(val);
          }
          const Gathered one = gather(w, x, dt, l, m, 1);
          for (const int members : {2, 3, 5, 16}) {
            const Gathered team = gather(w, x, dt, l, m, members);
            const std::string where = fmt::format("{} {} M={} form {} rb {} tiles {} members {}", ly.what,
                                                  dtype_name(dt), m, int(f.f), l.rb, f.tiles, members);
            const std::string xp_msg = "xp differs: " + where, xs_msg = "xs differs: " + where;
            CHECK_MESSAGE(same_bits(one.xp, team.xp), xp_msg);
            CHECK_MESSAGE(same_bits(one.xs, team.xs), xs_msg);
            ++checked;
          }
        }
    }
  CHECK(checked > 0);
}
