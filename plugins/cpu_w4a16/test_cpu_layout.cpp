// Host-side tests of cpu_w4a16's weight layout (cpu_weights.h), on any CPU: every layout made from
// a random canonical layer, in both code orders and with every scale type, must give back the
// canonical dequantized weights through dequantize_tile and CpuWeights::scale, and the bf16-pair
// order must turn into the bf16 numbers 128 + q that the avx512bf16 kernel multiplies by (the same
// shift-and-mask it does with vpternlogd), so that the layout is checked where CI has no bf16 CPU.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <vector>

#include "cpu_weights.h"
#include "nibble/canonical.h"
#include "nibble/dtype.h"
#include "test_util.h"

using namespace nibble;
using nibble::cpu::CodeOrder;
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
      // The codes as the bf16 kernel reads them: pair p of word -> 0x4300 | q in each half.
      if (cw.order == CodeOrder::kBf16Pairs && r % 8 == 0)
        for (int64_t c = 0; c < cpu::kTileN; ++c) {
          const uint32_t word = cw.tile_codes(t)[(r / 8) * cpu::kTileN + c];
          for (int p = 0; p < 4; ++p) {
            const uint32_t pair = ((word >> (4 * p)) & 0x000f000fu) | 0x43004300u;
            const float lo = bf16_to_float(uint16_t(pair)), hi = bf16_to_float(uint16_t(pair >> 16));
            if (lo != 128.0f + float(cw.code(word, 2 * p)) || hi != 128.0f + float(cw.code(word, 2 * p + 1)))
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

TEST_CASE("cpu_w4a16 layout: both code orders, every scale type, act order, asymmetric, odd sizes") {
  struct Shape { int64_t k, n; int32_t g; };
  int checked = 0;
  for (const Shape sh : {Shape{200, 37, 32}, Shape{256, 48, -1}, Shape{96, 16, 64}, Shape{4100, 24, 128}})
    for (const bool act_order : {false, true})
      for (const WeightType wt : {WeightType::uint4b8, WeightType::uint4})
        for (const DType sd : {DType::f16, DType::bf16, DType::f32})
          for (const CodeOrder order : {CodeOrder::kRows, CodeOrder::kBf16Pairs}) {
            if (act_order && sh.g <= 0) continue;
            LinearSpec s;
            s.name = "layout"; s.k = sh.k; s.n = sh.n; s.group_size = sh.g; s.weight_type = wt;
            s.act_dtype = DType::bf16; s.scale_dtype = sd; s.act_order = act_order;
            const CanonicalLinear w = random_canonical(s, uint64_t(sh.k * 31 + sh.n + checked));
            const nibble_linear_spec as = w.spec.to_abi();
            const CpuWeights cw = cpu::prepare_cpu_weights(as, w.to_abi(), order);
            CHECK((cw.tile_zeros(0) == nullptr) == (wt == WeightType::uint4b8));  // symmetric: no zero stream
            CHECK_MESSAGE(mismatch(w, cw) == "", fmt::format("K={} N={} G={} act_order={} {} scales {} order {}", sh.k,
                                                             sh.n, sh.g, act_order, wt == WeightType::uint4 ? "uint4" : "uint4b8",
                                                             dtype_name(sd), order == CodeOrder::kRows ? "rows" : "bf16 pairs"));
            ++checked;
          }
  CHECK(checked == 4 * 2 * 2 * 3 * 2 - 2 * 3 * 2);
}
