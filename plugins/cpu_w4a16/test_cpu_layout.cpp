// Host-side tests of cpu_w4a16's weight layout (cpu_weights.h), on any CPU: every layout made from
// a random canonical layer, 4- and 2-bit, with every scale type, must give back the canonical
// dequantized weights through dequantize_tile and CpuWeights::scale, and a 4-bit line's pairs of
// rows (p, p + 4) must turn into the bf16 numbers 128 + q that the avx512bf16 and AMX kernels
// multiply by (the same shift-and-mask they do with vpternlogd), so that the layout is checked
// where CI has no bf16 CPU.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <vector>

#include "cpu_weights.h"
#include "nibble/canonical.h"
#include "nibble/dtype.h"
#include "test_util.h"

using namespace nibble;
using nibble::cpu::CpuWeights;

std::string nibble::test::skip_reason() { return {}; }

namespace {

// The first mismatch between the layout and the canonical layer, or "".
std::string mismatch(const CanonicalLinear& w, const CpuWeights& cw) {
  const int64_t K = w.spec.k, N = w.spec.n;
  std::vector<float> tile(size_t(cw.lines * 8 * cpu::kTileN));
  std::vector<int> seen(size_t(K), 0);
  for (int64_t t = 0; t < cw.tiles; ++t) {
    cpu::dequantize_tile(cw, t, 0, cw.lines, tile.data());
    for (int64_t r = 0; r < cw.lines * 8; ++r) {
      const int32_t k = cw.row_src[size_t(r)];
      if (k < 0) continue;
      if (t == 0) ++seen[size_t(k)];
      for (int64_t c = 0; c < cpu::kTileN && t * cpu::kTileN + c < N; ++c) {
        const int64_t n = t * cpu::kTileN + c;
        const float want = float(w.weight(k, n)), got = tile[size_t(r * cpu::kTileN + c)];
        if (got != want) return fmt::format("w[{}, {}] (padded row {}) = {} want {}", k, n, r, got, want);
        if (cw.scale(t, w.group_of(k), c) != float(w.scale(w.group_of(k), n)))
          return fmt::format("scale of group {} column {}", w.group_of(k), n);
      }
      // The codes as the bf16 kernels read them: pair p of word -> 0x4300 | q in each half, the
      // rows p and p + kPairStride of the line.
      if (cw.code_bits == 4 && r % 8 == 0)
        for (int64_t c = 0; c < cpu::kTileN; ++c) {
          const uint32_t word = cw.tile_codes(t)[(r / 8) * cpu::kTileN + c];
          for (int p = 0; p < 4; ++p) {
            const uint32_t pair = ((word >> (4 * p)) & 0x000f000fu) | 0x43004300u;
            const float lo = bf16_to_float(uint16_t(pair)), hi = bf16_to_float(uint16_t(pair >> 16));
            if (lo != 128.0f + float(cw.code_at(t, r / 8, c, p)) ||
                hi != 128.0f + float(cw.code_at(t, r / 8, c, p + cpu::kPairStride)))
              return fmt::format("bf16 pair {} of line {} column {}", p, r / 8, t * cpu::kTileN + c);
          }
        }
    }
  }
  for (int64_t k = 0; k < K; ++k)
    if (seen[size_t(k)] != 1) return fmt::format("canonical row {} appears {} times", k, seen[size_t(k)]);
  return {};
}

}  // namespace

TEST_CASE("cpu_w4a16 layout: 4- and 2-bit codes, every scale type, act order, asymmetric, odd sizes") {
  struct Shape { int64_t k, n; int32_t g; };
  int checked = 0;
  for (const Shape sh : {Shape{200, 37, 32}, Shape{256, 48, -1}, Shape{96, 16, 64}, Shape{4100, 24, 128}, Shape{72, 20, 24}})
    for (const bool act_order : {false, true})
      for (const WeightType wt : {WeightType::uint4b8, WeightType::uint4, WeightType::uint2b2, WeightType::uint2})
        for (const DType sd : {DType::f16, DType::bf16, DType::f32}) {
            if (act_order && sh.g <= 0) continue;
            const bool two = wt == WeightType::uint2b2 || wt == WeightType::uint2;
            LinearSpec s;
            s.name = "layout"; s.k = sh.k; s.n = sh.n; s.group_size = sh.g; s.weight_type = wt;
            s.act_dtype = DType::bf16; s.scale_dtype = sd; s.act_order = act_order;
            s.bits = two ? 2 : 4;
            const CanonicalLinear w = random_canonical(s, uint64_t(sh.k * 31 + sh.n + checked));
            const nibble_linear_spec as = w.spec.to_abi();
            const CpuWeights cw = cpu::prepare_cpu_weights(as, w.to_abi());
            const bool sym = wt == WeightType::uint4b8 || wt == WeightType::uint2b2;
            CHECK((cw.tile_zeros(0) == nullptr) == sym);  // symmetric: no zero stream
            CHECK(cw.code_bits == s.bits);
            if (two) {  // the layer's own bytes: a 64-byte line of codes per 16 rows (groups padded to 16)
              for (size_t g = 0; g + 1 < cw.group_line.size(); ++g) CHECK(cw.group_line[g] % 2 == 0);
              CHECK(cw.q.size() == size_t(cw.tiles * cw.lines / 2 * cpu::kTileN));
              if (sym) CHECK(cw.sym_zero == 2.0f);
            }
            CHECK_MESSAGE(mismatch(w, cw) == "", fmt::format("K={} N={} G={} act_order={} {} scales {}", sh.k, sh.n,
                                                             sh.g, act_order, weight_type_name(wt), dtype_name(sd)));
            ++checked;
          }
  // 5 shapes (one without groups: no act order), 4 weight types, 3 scale types.
  CHECK(checked == (5 * 2 - 1) * 4 * 3);
}

TEST_CASE("cpu_w4a16 layout: a width other than 4 or 2 bits, or a weight type of another width, is refused") {
  LinearSpec s;
  s.name = "layout.bad"; s.k = 64; s.n = 16; s.group_size = 32;
  const CanonicalLinear w = random_canonical(s, 1);
  nibble_linear_spec as = w.spec.to_abi();
  as.bits = 3;
  CHECK_THROWS_WITH(cpu::prepare_cpu_weights(as, w.to_abi()), doctest::Contains("expected 4- or 2-bit codes, found 3"));
  as.bits = 2;  // uint4b8 with 2 bits
  CHECK_THROWS_WITH(cpu::prepare_cpu_weights(as, w.to_abi()), doctest::Contains("does not have 2 bits"));
}
