// plugins/common/nibble_planes.h: every 2-, 3- and 8-bit scheme rewritten as a 4-bit layer gives
// the same product as the layer itself (both through the double-precision reference), and the
// canonical packing of every width round-trips.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "nibble/canonical.h"
#include "nibble/error.h"
#include "nibble/reference.h"
#include "nibble_planes.h"
#include "test_util.h"

using namespace nibble;

std::string nibble::test::skip_reason() { return {}; }

namespace {

template <class T>
Tensor from_vector(const std::vector<T>& v, DType dt, Shape shape) {
  Tensor t = Tensor::zeros(dt, std::move(shape));
  std::memcpy(t.mutable_data(), v.data(), t.nbytes());
  return t;
}

// The virtual layer as a CanonicalLinear, and x gathered through its row map.
CanonicalLinear virtual_layer(const plugin::NibblePlanes& p, const CanonicalLinear& real) {
  CanonicalLinear v;
  v.spec = real.spec;
  v.spec.k = p.spec.k;
  v.spec.full_k = p.spec.full_k;
  v.spec.full_n = p.spec.full_n;
  v.spec.parallel = Parallel(p.spec.parallel);
  v.spec.bits = p.spec.bits;
  v.spec.weight_type = WeightType(p.spec.weight_type);
  v.spec.group_size = p.spec.group_size;
  v.spec.act_order = p.spec.act_order != 0;
  const int64_t groups = v.spec.num_groups(), n = v.spec.n;
  v.qweight = from_vector(p.qweight, DType::u32, {(v.spec.k + 7) / 8, n});
  if (!p.zeros.empty()) v.zeros = from_vector(p.zeros, DType::u8, {groups, n});
  v.scales = Tensor::zeros(v.spec.scale_dtype, {groups, n});
  REQUIRE(p.scales.size() == v.scales.nbytes());
  std::memcpy(v.scales.mutable_data(), p.scales.data(), p.scales.size());
  if (v.spec.act_order) {
    v.g_idx = Tensor::zeros(DType::i32, {v.spec.k});
    std::memcpy(v.g_idx.mutable_data(), p.weights().g_idx, v.g_idx.nbytes());
  }
  v.bias = real.bias;
  validate(v);
  return v;
}

Tensor gather(const Tensor& x, const plugin::NibblePlanes& p) {
  if (p.x_rows.empty()) return x;
  const int64_t m = x.dim(0), kv = int64_t(p.x_rows.size()), k = x.dim(1);
  Tensor out = Tensor::zeros(DType::f64, {m, kv});
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < kv; ++j) {
      const int32_t src = p.x_rows[size_t(j)];
      out.mutable_data_as<double>()[r * kv + j] = src < 0 ? 0.0 : x.at(size_t(r * k + src));
    }
  return out;
}

}  // namespace

TEST_CASE("canonical packing of every width round-trips, and 3-bit codes straddle words") {
  for (int bits : {2, 3, 4, 8}) {
    for (int64_t k : {1, 7, 31, 32, 33, 96, 100}) {
      Tensor codes = Tensor::zeros(DType::u8, {k, 5});
      for (int64_t i = 0; i < k * 5; ++i) codes.mutable_data_as<uint8_t>()[i] = uint8_t((i * 37 + 11) % (1 << bits));
      Tensor q = pack_codes_k(codes, bits);
      CHECK(q.dim(0) == packed_rows(k, bits));
      Tensor back = unpack_codes_k(q, k, bits);
      CHECK(std::memcmp(back.data(), codes.data(), codes.nbytes()) == 0);
    }
  }
  // Code 10 of a 3-bit column: bits 30..32, i.e. two bits of word 0 and one of word 1.
  Tensor codes = Tensor::zeros(DType::u8, {32, 1});
  codes.mutable_data_as<uint8_t>()[10] = 7;
  Tensor q = pack_codes_k(codes, 3);
  CHECK(q.data_as<uint32_t>()[0] == 0xc0000000u);
  CHECK(q.data_as<uint32_t>()[1] == 0x1u);
  CHECK(q.data_as<uint32_t>()[2] == 0u);
}

TEST_CASE("validate refuses bits that contradict the weight type and garbage past K") {
  LinearSpec s;
  s.name = "l";
  s.k = 40;
  s.n = 8;
  s.group_size = 32;
  s.weight_type = WeightType::uint8b128;
  s.bits = 8;
  CanonicalLinear w = random_canonical(s, 3);
  CHECK_NOTHROW(validate(w));
  CanonicalLinear bad = w;
  bad.spec.bits = 4;
  CHECK(test::contains(test::error_of([&] { validate(bad); }), "expected 8 bits for weight type uint8b128"));
  // 40 rows of 3 bits = 120 bits: the 4th word's bits 24..31 are padding.
  s.weight_type = WeightType::uint3;
  s.bits = 3;
  CanonicalLinear w3 = random_canonical(s, 4);
  CHECK_NOTHROW(validate(w3));
  w3.qweight = w3.qweight.clone();
  w3.qweight.mutable_data_as<uint32_t>()[3 * 8 + 2] |= 0x80000000u;
  CHECK(test::contains(test::error_of([&] { validate(w3); }), "expected zero padding past row 39"));
}

TEST_CASE("nibble planes: every 2-, 3- and 8-bit scheme gives the layer's own product") {
  int cases = 0;
  for (WeightType wt : {WeightType::uint2, WeightType::uint2b2, WeightType::uint3, WeightType::uint3b4,
                        WeightType::uint8, WeightType::uint8b128})
    for (int g : {32, 64, 128, -1})
      for (bool act_order : {false, true})
        for (DType sd : {DType::f16, DType::bf16, DType::f32})
          for (int64_t k : {96, 200}) {  // 200: a partial last group
            if (act_order && g == -1) continue;
            LinearSpec s;
            s.name = "model.layers.0.mlp.down_proj";
            s.k = k;
            s.n = 24;
            s.group_size = g;
            s.weight_type = wt;
            s.bits = weight_type_bits(wt);
            s.scale_dtype = sd;
            s.act_dtype = DType::f32;
            s.act_order = act_order;
            s.has_bias = (k == 200);
            CAPTURE(s.summary());
            CanonicalLinear w = random_canonical(s, uint64_t(++cases));
            validate(w);
            const nibble_linear_spec abi = w.spec.to_abi();
            const plugin::NibblePlanes p = plugin::make_nibble_planes(abi, w.to_abi());
            CHECK(p.spec.bits == 4);
            CHECK(p.real_k == k);
            if (s.bits == 8) {
              CHECK(p.spec.weight_type == NIBBLE_WT_UINT4);
              CHECK(p.spec.act_order == 0);
              CHECK(p.x_rows.size() == size_t(p.spec.k));
            } else {
              CHECK(p.spec.weight_type == (weight_type_symmetric(wt) ? NIBBLE_WT_UINT4B8 : NIBBLE_WT_UINT4));
              CHECK(p.x_rows.empty());
            }
            CanonicalLinear v = virtual_layer(p, w);
            Tensor x = random_activations(3, k, DType::f32, uint64_t(cases));
            Tensor want = reference_linear(w, x), got = reference_linear(v, gather(x, p));
            Tensor mag = reference_magnitude(w, x);
            double worst = 0;
            for (int64_t i = 0; i < want.numel(); ++i)
              worst = std::max(worst, std::fabs(got.at(size_t(i)) - want.at(size_t(i))) / (mag.at(size_t(i)) + 1e-30));
            CHECK(worst < 1e-12);
          }
  CHECK(cases == 6 * 7 * 3 * 2);
}

TEST_CASE("nibble planes refuse a 4-bit layer and inconsistent input by name") {
  LinearSpec s;
  s.name = "l";
  s.k = 64;
  s.n = 8;
  s.weight_type = WeightType::uint4;
  CanonicalLinear w = random_canonical(s, 1);
  const auto msg = [&](const nibble_linear_spec& a, const nibble_canonical_weights& c) {
    try {
      plugin::make_nibble_planes(a, c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(test::contains(msg(w.spec.to_abi(), w.to_abi()), "expected a 2-, 3- or 8-bit layer, found 4 bits"));
  s.weight_type = WeightType::uint8;
  s.bits = 8;
  CanonicalLinear w8 = random_canonical(s, 2);
  nibble_canonical_weights c = w8.to_abi();
  c.zeros = nullptr;
  CHECK(test::contains(msg(w8.spec.to_abi(), c), "tensor 'zeros' is missing"));
}
