// The cross-backend conformance suite: every scheme a backend declares, on odd sizes, against the
// core's reference kernel, with fresh random data each run (the seed is printed; NIBBLE_TEST_SEED
// repeats a run). Which backend: NIBBLE_TEST_BACKEND; where from: NIBBLE_TEST_PLUGIN_DIRS.
// Reports SKIP (exit 77) when the backend has no device here.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <random>

#include "test_util.h"

using namespace nibble;

namespace {

std::shared_ptr<Registry> registry() {
  static auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  return reg;
}

std::shared_ptr<Backend> backend() {
  return registry()->find(test::env_or("NIBBLE_TEST_BACKEND"));
}

uint64_t seed() {
  static const uint64_t s = [] {
    const std::string env = test::env_or("NIBBLE_TEST_SEED");
    const uint64_t v = env.empty() ? std::random_device{}() : std::stoull(env);
    fmt::print("conformance seed: {} (repeat with NIBBLE_TEST_SEED={})\n", v, v);
    return v;
  }();
  return s;
}

// A row slice [0, m) of a [M, N] tensor.
Tensor rows(const Tensor& t, int64_t m) {
  Tensor out = Tensor::zeros(t.dtype(), {m, t.dim(1)});
  std::memcpy(out.mutable_data(), t.data(), out.nbytes());
  return out;
}

// Activations as LLMs make them (16-bit activations only): every odd row gets "massive
// activations", one element in 64 (at a position that moves with the row) kOutlier times the
// others' scale, so that a kernel that holds x to a number of bits relative to the largest |x| of
// a group (the integer dot-product forms: with two 8-bit parts instead of three they fail here) or
// cancels large sums (the f32 trick forms) is tested where that costs the most. Row 0 (M = 1) and
// the even rows keep plain uniform values. 256, not more: at 1024 the f32 trick forms with 2-bit
// codes (fused-avx2, gemm-avx2) exceeded the fp16 tolerance by up to 3x in columns whose weight at
// the outlier is 0 (docs/benchmarks.md, "Integer dot products"), which is their documented limit.
constexpr double kOutlier = 256;
void add_outliers(Tensor& x) {
  const int64_t m = x.dim(0), k = x.dim(1);
  for (int64_t r = 1; r < m; r += 2)
    for (int64_t i = (5 * r) % 64; i < k; i += 64) {
      const std::size_t at = std::size_t(r * k + i);
      store_float(x.mutable_data(), x.dtype(), at, kOutlier * load_float(x.data(), x.dtype(), at));
    }
}

}  // namespace

std::string nibble::test::skip_reason() {
  const std::string name = test::env_or("NIBBLE_TEST_BACKEND");
  if (name.empty()) return "NIBBLE_TEST_BACKEND is not set";
  auto b = backend();
  if (!b) {
    // A backend that is not found at all is a failure unless it failed to load for lack of its
    // runtime, which is a machine without that device.
    for (const auto& s : registry()->skipped())
      if (s.path.stem() == name && s.kind == SkippedFile::Kind::load_failed) return name + ": " + s.reason;
    return {};  // the test case below fails with the reason
  }
  if (!b->probe().available) return name + ": " + b->probe().message;
  // A variant run (NIBBLE_TEST_REQUIRE_KERNEL) checks that the forced kernel is really the one
  // that runs; where this CPU cannot run it, the variant is skipped rather than passed.
  if (const std::string want = test::env_or("NIBBLE_TEST_REQUIRE_KERNEL"); !want.empty()) {
    LinearSpec s;
    s.name = "probe"; s.k = 64; s.n = 16; s.group_size = 32; s.act_dtype = DType::f16; s.scale_dtype = DType::f16;
    std::string got = b->prepare(random_canonical(s, 1))->kernel_name(1);
    // The kernel's name is the first word of the description ("v1 (GEMV, ...)").
    std::string norm = got.substr(0, got.find(' '));
    for (auto& c : norm) c = c == '-' ? '_' : c;
    if (norm != want && !(want == "onednn" && norm.rfind("onednn", 0) == 0))
      return name + ": kernel " + want + " is not available on this machine (it runs " + got + "; the probe: " +
             b->probe().message + ")";
  }
  return {};
}

TEST_CASE("every declared scheme matches the reference on odd sizes") {
  auto b = backend();
  REQUIRE_MESSAGE(b, "backend '" << test::env_or("NIBBLE_TEST_BACKEND") << "' not found; found: "
                                 << registry()->backend_names());
  const nibble_capabilities caps = b->capabilities();
  const uint64_t base_seed = seed();
  // (K, N): on multiples of 64, off them, K not a multiple of 8, and a long K (long groups at
  // G = -1: accumulation error grows with the rows summed). Widths other than 4 run the shapes
  // and row counts that differ in kind (the layouts of every width are tested exactly elsewhere);
  // M = 3 for every width: a block of rows that is neither 1 nor a kernel's full block (the CPU
  // forms that read an 8-bit layer's bytes, or 2-bit codes, have their own code for it).
  const std::vector<int64_t> ms4 = {1, 3, 17, 64, 257}, ms_other = {1, 3, 17, 257};
  const std::vector<std::pair<int64_t, int64_t>> shapes4 = {{512, 192}, {320, 200}, {264, 72}, {130, 40}, {4100, 24}},
                                                 shapes_other = {{320, 200}, {130, 40}};
  int cases = 0, refused = 0;
  double worst = 0;  // the largest error seen, as a fraction of the tolerance
  for (DType dt : {DType::f16, DType::bf16, DType::f32}) {
    if (!(caps.act_dtypes & NIBBLE_DTYPE_BIT(int(dt)))) continue;
    for (WeightType wt : {WeightType::uint4b8, WeightType::uint4, WeightType::uint8b128, WeightType::uint8,
                          WeightType::uint3b4, WeightType::uint3, WeightType::uint2b2, WeightType::uint2}) {
      const int bits = weight_type_bits(wt);
      if (!(caps.weight_types & NIBBLE_WT_BIT(int(wt))) || !(caps.bits & (1u << bits))) continue;
      const auto& ms = bits == 4 ? ms4 : ms_other;
      const auto& shapes = bits == 4 ? shapes4 : shapes_other;
      for (uint32_t gi = 0; gi < caps.num_group_sizes; ++gi) {
        const int g = caps.group_sizes[gi];
        for (int ao = 0; ao <= int(caps.act_order); ++ao) {
          for (const auto& [k, n] : shapes) {
            LinearSpec s;
            s.name = fmt::format("conformance.{}.{}.g{}.{}.{}x{}", dtype_name(dt), weight_type_name(wt), g,
                                 ao ? "actorder" : "plain", k, n);
            s.k = k; s.n = n; s.group_size = g; s.weight_type = wt; s.bits = bits; s.act_dtype = dt;
            s.scale_dtype = dt == DType::f32 ? DType::f16 : dt;
            s.act_order = ao != 0 && g != -1;
            s.has_bias = caps.bias && ((k + g) % 3 == 0);
            if (ao && g == -1) continue;
            // Outside the declared shape rules: the backend must refuse with a reason, not crash.
            std::string why = b->check_capabilities(s);
            if (why.empty()) why = b->can_implement(s);
            if (!why.empty()) {
              ++refused;
              CHECK_MESSAGE(!why.empty(), s.name);
              continue;
            }
            const uint64_t sd = base_seed ^ std::hash<std::string>{}(s.name);
            CanonicalLinear w = random_canonical(s, sd);
            Tensor x_all = random_activations(ms.back(), k, dt, sd + 1);
            if (dt != DType::f32) add_outliers(x_all);
            Tensor ref_all = reference_linear(w, x_all), mag_all = reference_magnitude(w, x_all);
            auto prepared = b->prepare(w);
            for (int64_t m : ms) {
              Tensor x = rows(x_all, m);
              Tensor y = prepared->apply(x);
              Comparison c = compare_to_reference(y, rows(ref_all, m), rows(mag_all, m), dt);
              ++cases;
              worst = std::max(worst, c.max_rel_to_tol);
              CHECK_MESSAGE(c.ok, fmt::format("{} M={} kernel={}: {} elements out of tolerance; worst "
                                              "[{}, {}] got {} want {} ({:.2f}x tolerance)",
                                              s.name, m, prepared->kernel_name(m), c.failures, c.worst_m,
                                              c.worst_n, c.worst_got, c.worst_want, c.max_rel_to_tol));
            }
          }
        }
      }
    }
  }
  fmt::print("{}: {} cases checked (largest error {:.3f} of the tolerance), {} configurations refused with a reason\n",
             b->name(), cases, worst, refused);
  CHECK(cases > 0);
}
