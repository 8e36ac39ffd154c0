// Core value types: float conversions, tensors, packing, validation, the reference kernel and
// the tolerance rule.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "test_util.h"

using namespace nibble;

std::string nibble::test::skip_reason() { return {}; }

TEST_CASE("f16 conversion round-trips every half value") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_float(uint16_t(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(f16_to_float(float_to_f16(f))));
      continue;
    }
    CHECK(float_to_f16(f) == uint16_t(h));
  }
  CHECK(f16_to_float(0x3c00) == 1.0f);
  CHECK(f16_to_float(0x0001) == doctest::Approx(5.960464477539063e-08));
  CHECK(float_to_f16(65520.0f) == 0x7c00);               // rounds to infinity
  CHECK(float_to_f16(1.0f + 0x1p-11f) == 0x3c00);        // tie to even (down)
  CHECK(float_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);    // tie to even (up)
}

TEST_CASE("bf16 conversion rounds to nearest even") {
  CHECK(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3f80);        // tie, stays even
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);    // tie, rounds up to even
  CHECK(float_to_bf16(128.0f) == 0x4300);
  for (uint32_t h = 0; h < 65536; h += 7) {
    const float f = bf16_to_float(uint16_t(h));
    if (!std::isnan(f)) CHECK(float_to_bf16(f) == uint16_t(h));
  }
}

TEST_CASE("pack_codes_k and unpack_codes_k are inverse, and nibble j is row 8r+j") {
  Tensor codes = Tensor::zeros(DType::u8, {19, 3});
  for (int64_t i = 0; i < codes.numel(); ++i) codes.mutable_data_as<uint8_t>()[i] = uint8_t((i * 7 + 3) % 16);
  Tensor q = pack_codes_k(codes);
  CHECK(q.shape() == Shape{3, 3});
  Tensor back = unpack_codes_k(q, 19);
  CHECK(std::memcmp(back.data(), codes.data(), codes.nbytes()) == 0);
  Tensor seq = Tensor::zeros(DType::u8, {8, 1});
  for (int i = 0; i < 8; ++i) seq.mutable_data_as<uint8_t>()[i] = uint8_t(i);
  CHECK(pack_codes_k(seq).data_as<uint32_t>()[0] == 0x76543210u);
}

TEST_CASE("checked_numel refuses overflow and negative dimensions") {
  CHECK(checked_numel({2, 3, 4}) == 24);
  CHECK_THROWS_AS(checked_numel({int64_t(1) << 40, int64_t(1) << 40}), Error);
  CHECK_THROWS_AS(checked_numel({-1, 4}), Error);
}

namespace {
LinearSpec small_spec(WeightType wt, int g, bool act_order = false) {
  LinearSpec s;
  s.name = "layers.0.proj";
  s.k = 64; s.n = 16; s.group_size = g; s.weight_type = wt;
  s.act_dtype = DType::f16; s.scale_dtype = DType::f16; s.act_order = act_order;
  return s;
}
std::string error_of(const CanonicalLinear& w) {
  try { validate(w); } catch (const Error& e) { return e.what(); }
  return "";
}
}  // namespace

TEST_CASE("validate names the layer, tensor, expected and found values") {
  CanonicalLinear w = random_canonical(small_spec(WeightType::uint4, 32), 1);
  CHECK(error_of(w).empty());

  CanonicalLinear bad = w;
  bad.scales = Tensor::zeros(DType::f16, {16, 2});
  CHECK(error_of(bad) == "layer 'layers.0.proj': tensor 'scales': expected f16 [2, 16], found f16 [16, 2]");

  bad = w;
  bad.zeros = Tensor::zeros(DType::u8, {2, 16});
  bad.zeros.mutable_data_as<uint8_t>()[5] = 16;
  CHECK(error_of(bad).find("expected zero points in 0..15, found 16 at group 0, column 5") != std::string::npos);

  CanonicalLinear sym = random_canonical(small_spec(WeightType::uint4b8, 32), 2);
  sym.zeros = w.zeros;
  CHECK(error_of(sym).find("symmetric (uint4b8) layer must not carry zero points") != std::string::npos);

  CanonicalLinear ao = random_canonical(small_spec(WeightType::uint4b8, 32, true), 3);
  CHECK(error_of(ao).empty());
  ao.g_idx = ao.g_idx.clone();
  ao.g_idx.mutable_data_as<int32_t>()[7] = 2;
  CHECK(error_of(ao).find("tensor 'g_idx': expected values in [0, 2), found 2 at row 7") != std::string::npos);

  CanonicalLinear nan_scale = w;
  nan_scale.scales = w.scales.clone();
  nan_scale.scales.mutable_data_as<uint16_t>()[3] = 0x7e00;
  CHECK(error_of(nan_scale).find("expected finite scales") != std::string::npos);
}

TEST_CASE("reference kernel matches a hand computation") {
  // K = 8, N = 2, one group, zero 3 for column 0 and 5 for column 1, scales 0.5 and 2.
  LinearSpec s = small_spec(WeightType::uint4, -1);
  s.k = 8; s.n = 2; s.has_bias = true;
  CanonicalLinear w;
  w.spec = s;
  Tensor codes = Tensor::zeros(DType::u8, {8, 2});
  for (int k = 0; k < 8; ++k) {
    codes.mutable_data_as<uint8_t>()[k * 2 + 0] = uint8_t(k);
    codes.mutable_data_as<uint8_t>()[k * 2 + 1] = uint8_t(15 - k);
  }
  w.qweight = pack_codes_k(codes);
  w.zeros = Tensor::zeros(DType::u8, {1, 2});
  w.zeros.mutable_data_as<uint8_t>()[0] = 3;
  w.zeros.mutable_data_as<uint8_t>()[1] = 5;
  w.scales = Tensor::zeros(DType::f16, {1, 2});
  store_float(w.scales.mutable_data(), DType::f16, 0, 0.5);
  store_float(w.scales.mutable_data(), DType::f16, 1, 2.0);
  w.bias = Tensor::zeros(DType::f16, {2});
  store_float(w.bias.mutable_data(), DType::f16, 1, 1.0);
  validate(w);
  Tensor x = Tensor::zeros(DType::f16, {1, 8});
  for (int k = 0; k < 8; ++k) store_float(x.mutable_data(), DType::f16, std::size_t(k), k % 2 ? -1.0 : 1.0);
  Tensor y = reference_linear(w, x);
  // column 0: 0.5 * sum_k (+-1)(k - 3) = 0.5 * (0-1+2-3+4-5+6-7) = -2
  // column 1: 2 * sum_k (+-1)(15 - k - 5) + 1 = 2 * 4 + 1 = 9
  CHECK(y.at(0) == -2.0);
  CHECK(y.at(1) == 9.0);
}

TEST_CASE("compare_to_reference accepts rounding and rejects one corrupted zero point") {
  LinearSpec s = small_spec(WeightType::uint4, 32);
  s.k = 512; s.n = 64; s.act_dtype = DType::bf16; s.scale_dtype = DType::bf16;
  CanonicalLinear w = random_canonical(s, 11);
  Tensor x = random_activations(8, s.k, DType::bf16, 12);
  Tensor ref = reference_linear(w, x), mag = reference_magnitude(w, x);
  CHECK(compare_to_reference(ref.to(DType::bf16), ref, mag, DType::bf16).ok);
  CanonicalLinear wrong = w;
  wrong.zeros = w.zeros.clone();
  uint8_t& z = wrong.zeros.mutable_data_as<uint8_t>()[3 * 64 + 9];
  z = uint8_t(z ^ 8);  // off by 8: the size of a v1/v2 or sym/asym mix-up
  Comparison c = compare_to_reference(reference_linear(wrong, x).to(DType::bf16), ref, mag, DType::bf16);
  CHECK_FALSE(c.ok);
  CHECK(c.worst_n == 9);
}
