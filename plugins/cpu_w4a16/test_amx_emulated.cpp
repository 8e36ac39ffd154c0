// The AMX form's kernel logic (kernel_amx_impl.h) on the scalar tile emulation (amx_emulation.h),
// so that its tile configuration, the VNNI pair layout of the B tiles it makes from the codes, the
// A tiles of gather_x's tile layout and the segment ends are tested on any CPU with AVX-512 and VBMI (the
// part of the kernel that is not tiles); the hardware form is tested by the conformance variant
// gemm_amx where the CPU has AMX. Every layout against the core's reference kernel: bf16 and fp16
// activations, symmetric and asymmetric weights, every group size, act order, odd sizes, M across
// the row-block cases, tile ranges and K slices as apply cuts them.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "amx_emulation.h"
#include "cpu_weights.h"
#include "nibble/canonical.h"
#include "nibble/reference.h"
#include "test_util.h"

using namespace nibble;
using cpu::amx::EmuTiles;
using cpu::amx::TileConfig;

std::string nibble::test::skip_reason() {
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vbmi");
  return avx512 ? "" : "this CPU lacks AVX-512 F/BW/VL/DQ/VBMI, which the AMX form's non-tile code uses";
}

namespace {

struct Run {
  int64_t tile_split = -1;    // the tiles in two ranges cut here (-1: one range)
  int64_t slices = 1;         // K slices, summed afterwards
  bool wrong_layout = false;  // x in the line layout, which the AMX form must not accept
};

// y f32 [m, n] from the emulated AMX form on layer w and activations x.
Tensor amx_emulated(const CanonicalLinear& w, const Tensor& x, const Run& run, int64_t* dps) {
  const nibble_linear_spec s = w.spec.to_abi();
  const cpu::CpuWeights cw = cpu::prepare_cpu_weights(s, w.to_abi());
  const int64_t m = x.dim(0), steps = cpu::amx_tile_steps(cw), ldy = cpu::fused_y_stride(cw);
  cpu::XLayout l;
  l.form = w.spec.act_dtype == DType::f16 ? cpu::XForm::kBf16x2 : cpu::XForm::kBf16;
  l.rb = std::min<int64_t>(16, m);
  l.tile_steps = run.wrong_layout ? 0 : steps;
  std::vector<float> xp(size_t(cpu::x_buffer_words(cw, l, m))),
      xs(size_t((m + l.rb - 1) / l.rb * cw.segments() * 2 * l.rb));
  cpu::gather_x(cw, x.data(), s.act_dtype, l, m, xp.data(), xs.data(), cpu::TeamMember(nullptr, 0, 1));
  if (run.wrong_layout) xp.resize(size_t(cpu::x_buffer_words(cw, {l.form, l.rb, steps}, m)), 0.0f);
  std::vector<int64_t> bounds = {0};
  for (int64_t i = 1; i < run.slices; ++i) bounds.push_back(cw.segments() * i / run.slices);
  bounds.push_back(cw.segments());
  std::vector<float> y(size_t(int64_t(bounds.size() - 1) * m * ldy), 0.0f);
  const int64_t before = EmuTiles::state().dpbf16ps;
  for (size_t sl = 0; sl + 1 < bounds.size(); ++sl) {
    cpu::FusedArgs a{&cw, xp.data(), xs.data(), m,          l.rb,           y.data() + int64_t(sl) * m * ldy,
                     ldy, false,     l.form,    bounds[sl], bounds[sl + 1], steps};
    if (run.tile_split > 0 && run.tile_split < cw.tiles) {
      cpu::amx::gemm_emulated(a, 0, run.tile_split);
      cpu::amx::gemm_emulated(a, run.tile_split, cw.tiles);
    } else {
      cpu::amx::gemm_emulated(a, 0, cw.tiles);
    }
  }
  *dps = EmuTiles::state().dpbf16ps - before;
  Tensor out = Tensor::zeros(DType::f32, {m, w.spec.n});
  float* o = out.mutable_data_as<float>();
  for (size_t sl = 0; sl + 1 < bounds.size(); ++sl)
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < w.spec.n; ++c)
        o[r * w.spec.n + c] += y[size_t((int64_t(sl) * m + r) * ldy + c)];
  return out;
}

Comparison check(const CanonicalLinear& w, const Tensor& x, const Run& run, int64_t* dps) {
  const Tensor y = amx_emulated(w, x, run, dps);
  return compare_to_reference(y, reference_linear(w, x), reference_magnitude(w, x), w.spec.act_dtype);
}

}  // namespace

TEST_CASE("the tile emulation: tdpbf16ps on known pairs, and the checks where the hardware faults") {
  TileConfig cfg = cpu::amx::tile_config(3);  // A, C: 3 rows; B: 16 pairs
  EmuTiles::config(cfg);
  // A row i: pairs (i + 1, 2) in every k; B row k: column n holds the pair (n, 1/2).
  uint16_t a[3][32], b[16][32];
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 16; ++k)
      a[i][2 * k] = float_to_bf16(float(i + 1)), a[i][2 * k + 1] = float_to_bf16(2.0f);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n) b[k][2 * n] = float_to_bf16(float(n)), b[k][2 * n + 1] = float_to_bf16(0.5f);
  float c[3][16];
  EmuTiles::load<4>(a, 64);
  EmuTiles::load<6>(b, 64);
  EmuTiles::zero<0>();
  EmuTiles::dpbf16ps<0, 4, 6>();
  EmuTiles::dpbf16ps<0, 4, 6>();  // accumulates
  EmuTiles::store<0>(c, 64);
  for (int i = 0; i < 3; ++i)
    for (int n = 0; n < 16; ++n) CHECK(c[i][n] == 2.0f * 16.0f * (float(i + 1) * float(n) + 1.0f));
  // Faults: a tile used as two operands, shapes that do not fit, an unconfigured tile.
  CHECK_THROWS_AS((EmuTiles::dpbf16ps<0, 4, 4>()), std::logic_error);
  cfg.rows[4] = 2;  // A with 2 rows against C with 3
  EmuTiles::config(cfg);
  CHECK_THROWS_AS((EmuTiles::dpbf16ps<0, 4, 6>()), std::logic_error);
  cfg.colsb[6] = 32;  // B of 8 columns against C of 16
  cfg.rows[4] = 3;
  EmuTiles::config(cfg);
  CHECK_THROWS_AS((EmuTiles::dpbf16ps<0, 4, 6>()), std::logic_error);
  EmuTiles::release();
  CHECK_THROWS_AS(EmuTiles::zero<0>(), std::logic_error);
  TileConfig bad;
  bad.reserved1[0] = 1;
  CHECK_THROWS_AS(EmuTiles::config(bad), std::logic_error);
}

TEST_CASE("the AMX form on emulated tiles matches the reference: 4- and 2-bit codes, every layout, M, tile range and K slice") {
  struct Shape {
    int64_t k, n;
  };
  int cases = 0;
  double worst = 0;
  for (DType dt : {DType::bf16, DType::f16})
    for (WeightType wt : {WeightType::uint4b8, WeightType::uint4, WeightType::uint2b2, WeightType::uint2})
      for (int g : {32, 64, 128, -1})
        for (bool ao : {false, true})
          for (Shape sh : {Shape{512, 192}, Shape{320, 200}, Shape{264, 72}, Shape{130, 40}}) {
            if (ao && g == -1) continue;
            LinearSpec s;
            s.name = fmt::format("amx.{}.{}.g{}.{}.{}x{}", dtype_name(dt), weight_type_name(wt), g, ao, sh.k,
                                 sh.n);
            s.k = sh.k;
            s.n = sh.n;
            s.group_size = g;
            s.weight_type = wt;
            s.act_dtype = dt;
            s.scale_dtype = dt;
            s.act_order = ao;
            const bool two = wt == WeightType::uint2b2 || wt == WeightType::uint2;
            s.bits = two ? 2 : 4;
            const CanonicalLinear w = random_canonical(s, uint64_t(cases) * 7919 + 1);
            for (int64_t m : {1, 3, 16, 17, 33, 40}) {
              const Tensor x = random_activations(m, sh.k, dt, uint64_t(cases) + 5);
              const int64_t tiles = (sh.n + 15) / 16;
              // An odd cut (single-tile tails); K slices on the odd M.
              const Run run{(tiles / 2) | 1, m % 2 ? 2 : 1, false};
              int64_t dps = 0;
              const Comparison c = check(w, x, run, &dps);
              worst = std::max(worst, c.max_rel_to_tol);
              CHECK_MESSAGE(c.ok, fmt::format("{} M={}: {} elements out of tolerance, worst [{}, {}] got {} want {}",
                                              s.name, m, c.failures, c.worst_m, c.worst_n, c.worst_got, c.worst_want));
              CHECK(dps > 0);
              ++cases;
            }
          }
  fmt::print("amx emulated: {} cases, largest error {:.3f} of the tolerance\n", cases, worst);
  CHECK(cases == 2 * 4 * (4 * 4 + 3 * 4) * 6);
}

TEST_CASE("the comparison catches a wrong x layout (the test can fail)") {
  LinearSpec s;
  s.name = "amx.wrong";
  s.k = 512;
  s.n = 64;
  s.group_size = 128;
  s.act_dtype = DType::bf16;
  s.scale_dtype = DType::bf16;
  const CanonicalLinear w = random_canonical(s, 3);
  const Tensor x = random_activations(17, s.k, DType::bf16, 4);
  int64_t dps = 0;
  CHECK(check(w, x, Run{}, &dps).ok);
  CHECK_FALSE(check(w, x, Run{-1, 1, true}, &dps).ok);
}
