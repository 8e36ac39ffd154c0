// rocm_w4a16's kernel source run on the CPU through gpu_emulation.h (one std::thread per GPU
// thread), built twice: NIBBLE_EMULATED_WARP = 64 (CDNA's wave64, which no GPU of this project
// has) and 32 (RDNA and NVIDIA). Every kernel variant (GEMV with 1, 2, 4, 8 and 16 rows, tiled),
// each x access mode (16-byte loads, scalar loads, act-order gather) and both activation types
// run on small odd shapes against the core's reference. Slow by nature (threads and barriers
// stand in for lanes), so the shapes are few; the GPU conformance suite covers the rest.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstring>

#include "kernels.hip"  // the kernels themselves, compiled by the host compiler for emulation
#include "test_util.h"

using namespace nibble;

std::string nibble::test::skip_reason() { return {}; }

namespace {

struct Case {
  DType dt;
  WeightType wt;
  int g;
  bool act_order;
  int64_t k, n;
};

}  // namespace

TEST_CASE("emulated kernels match the reference") {
  fmt::print("emulated wavefront width {}\n", rocm::kWarpSize);
  const Case cases[] = {
      {DType::f16, WeightType::uint4b8, 128, false, 264, 72},  // K % 8 == 0: 16-byte x loads
      {DType::bf16, WeightType::uint4, 32, true, 130, 40},     // act order: gathered x
      {DType::f16, WeightType::uint4, -1, false, 130, 21},     // per channel, K % 8 != 0: scalar x
      {DType::bf16, WeightType::uint4b8, 64, false, 320, 9},
      {DType::f16, WeightType::uint8, 128, false, 264, 40},     // 8 bits: two nibble planes
      {DType::bf16, WeightType::uint8b128, 32, true, 130, 24},  // 8 bits, act order: composed row map
  };
  const int64_t ms[] = {1, 2, 3, 5, 16, 17};  // every GEMV width and the tiled kernel
  int checked = 0;
  for (const Case& cs : cases) {
    LinearSpec s;
    s.name = fmt::format("emulated.{}.{}.g{}.{}.{}x{}", dtype_name(cs.dt), weight_type_name(cs.wt), cs.g,
                         cs.act_order ? "actorder" : "plain", cs.k, cs.n);
    s.k = cs.k; s.n = cs.n; s.group_size = cs.g; s.weight_type = cs.wt; s.act_dtype = cs.dt; s.scale_dtype = cs.dt;
    s.act_order = cs.act_order; s.has_bias = cs.k % 2 == 0;
    s.bits = nibble_weight_type_bits(int32_t(cs.wt));
    const CanonicalLinear w = random_canonical(s, uint64_t(cs.k * 7 + cs.n));
    const nibble_linear_spec as = s.to_abi();
    const nibble_canonical_weights cw = w.to_abi();
    const rocm::HostLayout h = rocm::make_layout(as, cw);
    rocm::DeviceWeights dw;  // "device" memory is host memory here
    dw.d = h.d;
    dw.codes = h.codes.data();
    dw.scales = h.scales.data();
    dw.zeros = h.zeros.data();
    dw.row_src = h.row_src.empty() ? nullptr : h.row_src.data();
    dw.bias = h.bias.empty() ? nullptr : h.bias.data();
    for (int64_t m : ms) {
      const Tensor x = random_activations(m, cs.k, cs.dt, uint64_t(m));
      const Tensor ref = reference_linear(w, x), mag = reference_magnitude(w, x);
      Tensor y = Tensor::zeros(cs.dt, {m, cs.n});
      rocm::MatmulArgs a;
      a.w = &dw;
      a.x = x.data();
      a.y = y.mutable_data();
      a.m = m;
      a.act_dtype = int32_t(cs.dt);
      char msg[256] = "";
      REQUIRE_MESSAGE(rocm::run_matmul(a, nullptr, msg, sizeof msg) == NIBBLE_OK, msg);
      const Comparison c = compare_to_reference(y, ref, mag, cs.dt);
      ++checked;
      CHECK_MESSAGE(c.ok, fmt::format("{} M={} ({}): {} elements out of tolerance; worst [{}, {}] got {} want {}",
                                      s.name, m, rocm::gemv_rows_for(m) ? "gemv" : "tiled", c.failures, c.worst_m,
                                      c.worst_n, c.worst_got, c.worst_want));
    }
  }
  CHECK(checked == 6 * 6);
}
