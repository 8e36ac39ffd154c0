// Tensor parallelism on the CPU: every fixture's layers split over 2 and 4 ranks (column- and
// row-parallel, act order included), each rank's partition prepared and run by a backend (cpu_w4a16
// here), the parts combined on the host as an engine would (concatenated, or summed), against the
// reference of the unsplit layer. A split that cannot be made is refused with a reason naming the
// layer, the split and the group size, never a wrong answer.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>

#include "nibble/checkpoint.h"
#include "nibble/shard.h"
#include "test_util.h"

using namespace nibble;
namespace fs = std::filesystem;

std::string nibble::test::skip_reason() {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  auto b = reg->find(test::env_or("NIBBLE_TEST_BACKEND", "cpu_w4a16"));
  if (b && !b->probe().available) return b->name() + ": " + b->probe().message;
  return {};
}

namespace {

// Columns [c0, c0 + nc) of x [M, K].
Tensor cols(const Tensor& x, int64_t c0, int64_t nc) {
  Tensor out = Tensor::zeros(x.dtype(), {x.dim(0), nc});
  const std::size_t es = dtype_size(x.dtype());
  for (int64_t r = 0; r < x.dim(0); ++r)
    std::memcpy(static_cast<uint8_t*>(out.mutable_data()) + r * nc * es,
                static_cast<const uint8_t*>(x.data()) + (r * x.dim(1) + c0) * es, std::size_t(nc) * es);
  return out;
}

}  // namespace

TEST_CASE("every fixture over 2 and 4 ranks gives the unsplit layer's result") {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  auto backend = reg->find(test::env_or("NIBBLE_TEST_BACKEND", "cpu_w4a16"));
  REQUIRE_MESSAGE(backend, "backend not found; found: " << reg->backend_names());
  const fs::path fixtures = fs::path(test::env_or("NIBBLE_TEST_DATA")) / "fixtures";
  int combined = 0, refused = 0, row_act_order = 0;
  for (const auto& dir : fs::directory_iterator(fixtures)) {
    if (!dir.is_directory()) continue;
    auto ckpt = Checkpoint::open(dir.path());
    for (const auto& e : ckpt->layers()) {
      if (e.scheme.kind != LayerScheme::Kind::quantized) continue;
      const CanonicalLinear w = ckpt->load(e.name);
      const DType dt = w.spec.act_dtype;
      const Tensor x = random_activations(5, w.spec.k, dt, 99);
      const Tensor ref = reference_linear(w, x), mag = reference_magnitude(w, x);
      for (Parallel how : {Parallel::column, Parallel::row})
        for (int world : {2, 4}) {
          CAPTURE(dir.path().filename().string());
          CAPTURE(e.name);
          CAPTURE(parallel_name(how));
          CAPTURE(world);
          std::vector<double> sum(std::size_t(5 * w.spec.n), 0.0);
          bool split = true;
          for (int r = 0; r < world && split; ++r) {
            CanonicalLinear part;
            try {
              part = shard(w, how, r, world);
            } catch (const Error& err) {
              // Refused: with the layer, the split and the rule it breaks.
              const std::string m = err.what();
              CHECK(test::contains(m, e.name));
              CHECK(test::contains(m, fmt::format("over {} ranks", world)));
              split = false;
              ++refused;
              break;
            }
            const Tensor xs = how == Parallel::row ? cols(x, r * part.spec.k, part.spec.k) : x;
            const Tensor y = backend->prepare(part)->apply(xs);
            for (int64_t m = 0; m < 5; ++m)
              for (int64_t n = 0; n < part.spec.n; ++n) {
                const int64_t col = how == Parallel::column ? r * part.spec.n + n : n;
                sum[std::size_t(m * w.spec.n + col)] += y.at(std::size_t(m * part.spec.n + n));
              }
          }
          if (!split) continue;
          Tensor got = Tensor::zeros(DType::f64, {5, w.spec.n});
          std::memcpy(got.mutable_data(), sum.data(), sum.size() * sizeof(double));
          const Comparison c = compare_to_reference(got, ref, mag, dt);
          CHECK_MESSAGE(c.ok, fmt::format("{} {}-parallel over {}: worst {:.2f}x tolerance", e.name, parallel_name(how),
                                          world, c.max_rel_to_tol));
          ++combined;
          row_act_order += how == Parallel::row && w.spec.act_order;
        }
    }
  }
  MESSAGE(fmt::format("{} splits combined, {} refused with a reason, {} of them row-parallel with act order", combined,
                      refused, row_act_order));
  CHECK(combined > 60);
  CHECK(row_act_order >= 4);
}
