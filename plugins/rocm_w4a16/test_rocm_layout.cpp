// Host-side tests of rocm_w4a16's layout (rocm_layout.h), no GPU needed: every layout made from a
// random canonical layer is unpacked back with the documented index rules and compared with the
// canonical codes, scales, zero points, groups and bias; a host emulation of the GEMV kernel's
// walk over the layout (same line/group/row-map arithmetic and the same magic-number dequant)
// must match the core's reference.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "rocm_layout.h"
#include "test_util.h"

using namespace nibble;
using nibble::rocm::HostLayout;
using nibble::rocm::LayoutDims;

std::string nibble::test::skip_reason() { return {}; }

namespace {

uint32_t code_at(const HostLayout& h, int64_t p, int64_t n) {
  const uint32_t word = h.codes[rocm::code_index(h.d, n / 4, p / 8, int(n % 4))];
  return (word >> (4 * (p % 8))) & 0xfu;
}

/// Compares the layout with the canonical layer it was made from; returns the first mismatch.
std::string mismatch(const CanonicalLinear& w, const HostLayout& h) {
  const LayoutDims& d = h.d;
  const int64_t K = w.spec.k, N = w.spec.n;
  if (d.k != K || d.n != N) return "dims";
  if (d.groups != w.spec.num_groups()) return fmt::format("groups {} want {}", d.groups, w.spec.num_groups());
  if (d.g_eff % rocm::kGroupAlign || d.g_eff <= 0) return fmt::format("g_eff {} not a positive multiple of 32", d.g_eff);
  if (d.k_pad != d.groups * d.g_eff || d.lines * 8 != d.k_pad) return "k_pad / lines";
  if (d.quads != (N + 3) / 4) return "quads";
  if (h.codes.size() != std::size_t(d.quads * d.lines * 4)) return "codes size";
  if (h.scales.size() != std::size_t(d.quads * d.groups * 4) || h.zeros.size() != std::size_t(d.quads * d.groups))
    return "scales / zeros size";

  // Padded row of each canonical row, and no canonical row twice.
  std::vector<int64_t> padded(std::size_t(K), -1);
  if (h.row_src.empty()) {
    if (w.spec.act_order) return "act order without a row map";
    if (d.k_pad < K) return "k_pad below K";
    std::iota(padded.begin(), padded.end(), int64_t(0));
  } else {
    if (h.row_src.size() != std::size_t(d.k_pad)) return "row_src size";
    for (int64_t p = 0; p < d.k_pad; ++p) {
      const int32_t k = h.row_src[std::size_t(p)];
      if (k < -1 || k >= K) return fmt::format("row_src[{}] = {}", p, k);
      if (k >= 0) {
        if (padded[std::size_t(k)] >= 0) return fmt::format("row {} appears twice", k);
        padded[std::size_t(k)] = p;
      }
    }
  }
  std::vector<bool> used(std::size_t(d.k_pad), false);
  for (int64_t k = 0; k < K; ++k) {
    const int64_t p = padded[std::size_t(k)];
    if (p < 0) return fmt::format("row {} missing", k);
    used[std::size_t(p)] = true;
    const int64_t g = p / d.g_eff;
    if (g != w.group_of(k)) return fmt::format("row {} (padded {}) in group {}, want {}", k, p, g, w.group_of(k));
    for (int64_t n = 0; n < N; ++n)
      if (code_at(h, p, n) != w.code(k, n))
        return fmt::format("code ({}, {}) = {}, want {}", k, n, code_at(h, p, n), w.code(k, n));
  }
  // Padding rows and padding columns hold code 0.
  for (int64_t p = 0; p < d.k_pad; ++p)
    for (int64_t n = 0; n < d.quads * 4; ++n)
      if ((!used[std::size_t(p)] || n >= N) && code_at(h, p, n) != 0) return fmt::format("padding ({}, {}) nonzero", p, n);
  for (int64_t g = 0; g < d.groups; ++g)
    for (int64_t n = 0; n < d.quads * 4; ++n) {
      const float s = h.scales[rocm::scale_index(d, n / 4, g, int(n % 4))];
      const uint32_t z = (h.zeros[rocm::zero_index(d, n / 4, g)] >> (4 * (n % 4))) & 0xfu;
      if (n >= N) {
        if (s != 0.0f) return fmt::format("padding column {} has scale {}", n, s);
        continue;
      }
      if (double(s) != w.scale(g, n)) return fmt::format("scale ({}, {}) = {}, want {}", g, n, s, w.scale(g, n));
      if (z != w.zero(g, n)) return fmt::format("zero ({}, {}) = {}, want {}", g, n, z, w.zero(g, n));
    }
  if (w.spec.has_bias) {
    if (h.bias.size() != std::size_t(d.quads * 4)) return "bias size";
    for (int64_t n = 0; n < N; ++n)
      if (double(h.bias[std::size_t(n)]) != w.bias.at(std::size_t(n))) return fmt::format("bias {}", n);
  } else if (!h.bias.empty()) {
    return "bias without has_bias";
  }
  // Without act order and with whole words, the pack is a transpose of 16-byte blocks.
  if (!w.spec.act_order && K % 8 == 0)
    for (int64_t l = 0; l < K / 8; ++l)
      for (int64_t n = 0; n < N; ++n)
        if (h.codes[rocm::code_index(d, n / 4, l, int(n % 4))] != w.qweight.data_as<uint32_t>()[l * N + n])
          return fmt::format("word ({}, {}) differs from the canonical word", l, n);
  return {};
}

HostLayout layout_of(const CanonicalLinear& w) {
  const nibble_linear_spec s = w.spec.to_abi();
  const nibble_canonical_weights cw = w.to_abi();
  return rocm::make_layout(s, cw);
}

/// The GEMV kernel's arithmetic on the host: per line, codes -> (magic | q) - (magic + z) exactly,
/// 8-row partial sums scaled once per line, fp32 accumulation, x through the row map.
Tensor emulate_gemv(const HostLayout& h, const Tensor& x, DType act) {
  const LayoutDims& d = h.d;
  const int64_t M = x.dim(0);
  Tensor y = Tensor::zeros(DType::f64, {M, d.n});
  const int64_t lines_per_group = d.g_eff / 8;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < d.n; ++n) {
      float acc = 0.0f;
      for (int64_t l = 0; l < d.lines; ++l) {
        const int64_t g = l / lines_per_group;
        const uint32_t word = h.codes[rocm::code_index(d, n / 4, l, int(n % 4))];
        const uint32_t z = (h.zeros[rocm::zero_index(d, n / 4, g)] >> (4 * (n % 4))) & 0xfu;
        float part = 0.0f;
        for (int j = 0; j < 8; ++j) {
          const int64_t p = 8 * l + j;
          const int64_t src = h.row_src.empty() ? (p < d.k ? p : -1) : h.row_src[std::size_t(p)];
          const float xv = src >= 0 ? float(x.at(std::size_t(m * d.k + src))) : 0.0f;
          const uint32_t q = (word >> (4 * j)) & 0xfu;
          float dq;
          if (act == DType::f16)
            dq = f16_to_float(uint16_t(0x6400u | q)) - f16_to_float(uint16_t(0x6400u | z));
          else
            dq = bits_float(0x43000000u | (q << 16)) - (128.0f + float(z));
          part = std::fma(dq, xv, part);
        }
        acc = std::fma(h.scales[rocm::scale_index(d, n / 4, g, int(n % 4))], part, acc);
      }
      if (!h.bias.empty()) acc += h.bias[std::size_t(n)];
      y.mutable_data_as<double>()[m * d.n + n] =
          act == DType::f16 ? f16_to_float(float_to_f16(acc)) : bf16_to_float(float_to_bf16(acc));
    }
  return y;
}

LinearSpec spec_of(int64_t k, int64_t n, int g, WeightType wt, bool ao, DType act, DType scale, bool bias) {
  LinearSpec s;
  s.name = fmt::format("rocm.{}.{}.g{}.{}.{}.{}x{}", dtype_name(act), weight_type_name(wt), g, ao ? "actorder" : "plain",
                       dtype_name(scale), k, n);
  s.k = k; s.n = n; s.group_size = g; s.weight_type = wt; s.act_dtype = act; s.scale_dtype = scale;
  s.act_order = ao; s.has_bias = bias;
  return s;
}

}  // namespace

TEST_CASE("the magic numbers are what the kernels assume") {
  for (uint32_t q = 0; q < 16; ++q) {
    CHECK(f16_to_float(uint16_t(0x6400u | q)) == 1024.0f + float(q));
    CHECK(bf16_to_float(uint16_t(0x4300u | q)) == 128.0f + float(q));
    CHECK(bits_float(0x43000000u | (q << 16)) == 128.0f + float(q));  // the bf16 magic as an fp32
    for (uint32_t z = 0; z < 16; ++z)  // the subtraction the fp16 kernel does in half precision
      CHECK(f16_to_float(float_to_f16(f16_to_float(uint16_t(0x6400u | q)) - f16_to_float(uint16_t(0x6400u | z)))) ==
            float(q) - float(z));
  }
}

TEST_CASE("layouts unpack to the canonical layer: every G, symmetry, act order, odd K and N") {
  const std::pair<int64_t, int64_t> shapes[] = {{512, 192}, {320, 200}, {264, 72}, {130, 40}, {7, 5},
                                                {1, 1},     {33, 3},    {300, 6},  {129, 257}};
  int checked = 0;
  uint64_t seed = 1;
  for (WeightType wt : {WeightType::uint4b8, WeightType::uint4})
    for (int g : {32, 64, 128, -1})
      for (bool ao : {false, true})
        for (const auto& [k, n] : shapes) {
          const DType act = (checked % 2) ? DType::bf16 : DType::f16;
          const DType scale = checked % 3 == 0 ? DType::f32 : act;
          const LinearSpec s = spec_of(k, n, g, wt, ao, act, scale, (k + n) % 2 == 0);
          const CanonicalLinear w = random_canonical(s, ++seed);
          const HostLayout h = layout_of(w);
          INFO(s.name);
          CHECK(mismatch(w, h) == "");
          if (!ao) CHECK(h.d.g_eff == (g > 0 ? g : (k + 31) / 32 * 32));
          ++checked;
        }
  CHECK(checked == 2 * 4 * 2 * 9);
}

TEST_CASE("act order with ragged groups pads every group to the largest, rounded up to 32") {
  LinearSpec s = spec_of(200, 24, 32, WeightType::uint4, true, DType::f16, DType::f16, false);
  CanonicalLinear w = random_canonical(s, 7);
  // 7 groups of uneven sizes: group 3 has the first 50 rows, the others share the rest.
  Tensor gi = Tensor::zeros(DType::i32, {s.k});
  for (int64_t k = 0; k < s.k; ++k) gi.mutable_data_as<int32_t>()[k] = int32_t(k < 50 ? 3 : k % 6 == 3 ? 6 : k % 6);
  w.g_idx = gi;
  validate(w);
  const HostLayout h = layout_of(w);
  CHECK(mismatch(w, h) == "");
  int64_t largest = 0;
  std::vector<int64_t> count(7, 0);
  for (int64_t k = 0; k < s.k; ++k) largest = std::max(largest, ++count[std::size_t(w.group_of(k))]);
  CHECK(h.d.g_eff == (largest + 31) / 32 * 32);
  CHECK(h.d.k_pad == 7 * h.d.g_eff);
}

TEST_CASE("row-parallel act-order partitions keep all groups") {
  for (WeightType wt : {WeightType::uint4b8, WeightType::uint4}) {
    const LinearSpec s = spec_of(512, 72, 64, wt, true, DType::bf16, DType::bf16, true);
    const CanonicalLinear full = random_canonical(s, 11);
    for (int rank = 0; rank < 2; ++rank) {
      const CanonicalLinear part = shard(full, Parallel::row, rank, 2);
      const HostLayout h = layout_of(part);
      INFO("rank " << rank);
      CHECK(h.d.groups == 512 / 64);
      CHECK(mismatch(part, h) == "");
    }
  }
}

TEST_CASE("the GEMV kernel's walk over the layout matches the reference") {
  const std::pair<int64_t, int64_t> shapes[] = {{264, 72}, {130, 40}, {7, 5}, {320, 20}};
  for (DType act : {DType::f16, DType::bf16})
    for (WeightType wt : {WeightType::uint4b8, WeightType::uint4})
      for (int g : {32, 128, -1})
        for (bool ao : {false, true})
          for (const auto& [k, n] : shapes) {
            const LinearSpec s = spec_of(k, n, g, wt, ao && g > 0, act, act, k % 3 == 0);
            const CanonicalLinear w = random_canonical(s, uint64_t(k * 31 + n + g));
            const Tensor x = random_activations(3, k, act, 5);
            const Tensor y = emulate_gemv(layout_of(w), x, act);
            const Comparison c = compare_to_reference(y, reference_linear(w, x), reference_magnitude(w, x), act);
            INFO(s.name);
            CHECK_MESSAGE(c.ok, fmt::format("{} failures; worst [{}, {}] got {} want {}", c.failures, c.worst_m,
                                            c.worst_n, c.worst_got, c.worst_want));
          }
}

TEST_CASE("inconsistent canonical weights are refused with the tensor named") {
  const LinearSpec s = spec_of(64, 8, 32, WeightType::uint4, true, DType::f16, DType::f16, false);
  CanonicalLinear w = random_canonical(s, 3);
  nibble_linear_spec as = s.to_abi();
  nibble_canonical_weights cw = w.to_abi();
  std::vector<int32_t> bad(64, 0);
  bad[5] = 2;  // only groups 0 and 1 exist
  cw.g_idx = bad.data();
  try {
    (void)rocm::make_layout(as, cw);
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("g_idx") != std::string::npos);
  }
  cw = w.to_abi();
  cw.zeros = nullptr;
  CHECK_THROWS_AS((void)rocm::make_layout(as, cw), std::invalid_argument);
}
