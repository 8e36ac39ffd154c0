// The canonical weight form: validation, packing and dequantization helpers.
#include "nibble/canonical.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

#include "nibble/error.h"
#include "random.h"

namespace nibble {

nibble_canonical_weights CanonicalLinear::to_abi() const noexcept {
  nibble_canonical_weights w{};
  w.qweight = qweight.data_as<uint32_t>();
  w.zeros = zeros.empty() ? nullptr : zeros.data_as<uint8_t>();
  w.scales = scales.data();
  w.g_idx = g_idx.empty() ? nullptr : g_idx.data_as<int32_t>();
  w.bias = bias.empty() ? nullptr : bias.data();
  return w;
}

namespace {

[[noreturn]] void fail(const LinearSpec& s, const char* tensor, const std::string& what) {
  throw Error(Errc::format, fmt::format("layer '{}': tensor '{}': {}", s.name, tensor, what));
}

void expect(const LinearSpec& s, const char* tensor, const Tensor& t,
            std::initializer_list<DType> dtypes, const Shape& shape) {
  bool dtype_ok = false;
  for (DType d : dtypes) dtype_ok |= t.dtype() == d;
  if (!dtype_ok || t.shape() != shape) {
    std::string want;
    for (DType d : dtypes) want += (want.empty() ? "" : "|") + std::string(dtype_name(d));
    fail(s, tensor, fmt::format("expected {} {}, found {} {}", want, shape_str(shape),
                                dtype_name(t.dtype()), shape_str(t.shape())));
  }
}

}  // namespace

void validate(const CanonicalLinear& w) {
  const LinearSpec& s = w.spec;
  if (s.k <= 0 || s.n <= 0)
    throw Error(Errc::format, fmt::format("layer '{}': expected positive k and n, found k={} n={}",
                                          s.name, s.k, s.n));
  const int32_t wt_bits = weight_type_bits(s.weight_type);
  if (wt_bits == 0)
    throw Error(Errc::format, fmt::format("layer '{}': invalid weight type {}", s.name, int32_t(s.weight_type)));
  if (s.bits != wt_bits)
    throw Error(Errc::format, fmt::format("layer '{}': expected {} bits for weight type {}, found bits = {}", s.name,
                                          wt_bits, weight_type_name(s.weight_type), s.bits));
  if (s.group_size != -1 && s.group_size <= 0)
    throw Error(Errc::format, fmt::format("layer '{}': expected group size -1 or > 0, found {}",
                                          s.name, s.group_size));
  const int64_t groups = s.num_groups();
  const int64_t rows = packed_rows(s.k, s.bits);
  expect(s, "qweight", w.qweight, {DType::u32, DType::i32}, {rows, s.n});
  if (const int64_t used = s.k * s.bits - (rows - 1) * 32; used < 32) {
    // Kernels read whole words: the stream bits past K must be zero.
    const uint32_t pad = ~((1u << used) - 1u);
    const uint32_t* last = w.qweight.data_as<uint32_t>() + (rows - 1) * s.n;
    for (int64_t n = 0; n < s.n; ++n)
      if (last[n] & pad)
        fail(s, "qweight", fmt::format("expected zero padding past row {} (the last word's bits {}..31), found word "
                                       "{:#010x} in column {}", s.k - 1, used, last[n], n));
  }
  const int max_code = (1 << s.bits) - 1;
  if (!weight_type_symmetric(s.weight_type)) {
    expect(s, "zeros", w.zeros, {DType::u8}, {groups, s.n});
    const uint8_t* z = w.zeros.data_as<uint8_t>();
    for (int64_t i = 0; i < groups * s.n; ++i)
      if (z[i] > max_code)
        fail(s, "zeros", fmt::format("expected zero points in 0..{}, found {} at group {}, column {}", max_code,
                                     z[i], i / s.n, i % s.n));
  } else if (!w.zeros.empty()) {
    fail(s, "zeros", fmt::format("a symmetric ({}) layer must not carry zero points", weight_type_name(s.weight_type)));
  }
  if (s.scale_dtype != DType::f16 && s.scale_dtype != DType::bf16 && s.scale_dtype != DType::f32)
    fail(s, "scales", fmt::format("expected scale dtype f16, bf16 or f32, found {}", dtype_name(s.scale_dtype)));
  expect(s, "scales", w.scales, {s.scale_dtype}, {groups, s.n});
  for (int64_t i = 0; i < groups * s.n; ++i)
    if (!std::isfinite(w.scales.at(std::size_t(i))))
      fail(s, "scales", fmt::format("expected finite scales, found {} at group {}, column {}",
                                    w.scales.at(std::size_t(i)), i / s.n, i % s.n));
  if (s.act_order) {
    expect(s, "g_idx", w.g_idx, {DType::i32}, {s.k});
    const int32_t* g = w.g_idx.data_as<int32_t>();
    for (int64_t k = 0; k < s.k; ++k)
      if (g[k] < 0 || g[k] >= groups)
        fail(s, "g_idx", fmt::format("expected values in [0, {}), found {} at row {}", groups, g[k], k));
  } else if (!w.g_idx.empty()) {
    fail(s, "g_idx", "present, but the spec says no act order");
  }
  if (s.has_bias) {
    expect(s, "bias", w.bias, {s.act_dtype}, {s.n});
  } else if (!w.bias.empty()) {
    fail(s, "bias", "present, but the spec says no bias");
  }
}

Tensor pack_codes_k(const Tensor& codes, int bits) {
  if (codes.dtype() != DType::u8 || codes.ndim() != 2)
    throw Error(Errc::invalid_argument, "pack_codes_k: expected u8 [K, N] codes");
  if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
    throw Error(Errc::invalid_argument, fmt::format("pack_codes_k: {} bits (expected 2, 3, 4 or 8)", bits));
  const int64_t k = codes.dim(0), n = codes.dim(1);
  Tensor q = Tensor::zeros(DType::u32, {packed_rows(k, bits), n});
  const uint8_t* c = codes.data_as<uint8_t>();
  uint32_t* out = q.mutable_data_as<uint32_t>();
  const uint32_t mask = (1u << bits) - 1;
  for (int64_t r = 0; r < k; ++r) {
    const int64_t bit = r * bits, row = bit >> 5;
    const int shift = int(bit & 31);
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t v = uint64_t(c[r * n + j] & mask) << shift;
      out[row * n + j] |= uint32_t(v);
      if (shift + bits > 32) out[(row + 1) * n + j] |= uint32_t(v >> 32);
    }
  }
  return q;
}

Tensor unpack_codes_k(const Tensor& qweight, int64_t k, int bits) {
  const int64_t n = qweight.dim(1);
  Tensor codes = Tensor::zeros(DType::u8, {k, n});
  const uint32_t* q = qweight.data_as<uint32_t>();
  uint8_t* c = codes.mutable_data_as<uint8_t>();
  for (int64_t r = 0; r < k; ++r)
    for (int64_t j = 0; j < n; ++j) c[r * n + j] = CanonicalLinear::stream_code(q + j, n, r, bits);
  return codes;
}

Tensor dequantize(const CanonicalLinear& w) {
  Tensor out = Tensor::zeros(DType::f32, {w.spec.k, w.spec.n});
  float* o = out.mutable_data_as<float>();
  for (int64_t k = 0; k < w.spec.k; ++k)
    for (int64_t n = 0; n < w.spec.n; ++n) o[k * w.spec.n + n] = float(w.weight(k, n));
  return out;
}

CanonicalLinear random_canonical(const LinearSpec& spec, uint64_t seed) {
  detail::Rng rng(seed);
  CanonicalLinear w;
  w.spec = spec;
  const int64_t k = spec.k, n = spec.n, groups = spec.num_groups();
  const uint64_t levels = uint64_t(1) << weight_type_bits(spec.weight_type);
  w.spec.bits = weight_type_bits(spec.weight_type);
  Tensor codes = Tensor::zeros(DType::u8, {k, n});
  for (auto& c : std::span(codes.mutable_data_as<uint8_t>(), std::size_t(k * n))) c = uint8_t(rng.below(levels));
  w.qweight = pack_codes_k(codes, w.spec.bits);
  if (!weight_type_symmetric(spec.weight_type)) {
    w.zeros = Tensor::zeros(DType::u8, {groups, n});
    for (auto& z : std::span(w.zeros.mutable_data_as<uint8_t>(), std::size_t(groups * n)))
      z = uint8_t(rng.below(levels));
  }
  w.scales = Tensor::zeros(spec.scale_dtype, {groups, n});
  for (int64_t i = 0; i < groups * n; ++i)
    store_float(w.scales.mutable_data(), spec.scale_dtype, std::size_t(i), rng.uniform(0.001, 0.006) * 16.0 / double(levels));
  if (spec.act_order) {
    // As GPTQ writes it: rows are visited in a random order and the i-th visited row joins group
    // i / G, so every group has G members scattered over K.
    std::vector<int32_t> perm(static_cast<std::size_t>(k));
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t i = k - 1; i > 0; --i) std::swap(perm[std::size_t(i)], perm[rng.below(uint64_t(i + 1))]);
    w.g_idx = Tensor::zeros(DType::i32, {k});
    int32_t* g = w.g_idx.mutable_data_as<int32_t>();
    for (int64_t i = 0; i < k; ++i) g[perm[std::size_t(i)]] = int32_t(i / spec.effective_group());
  }
  if (spec.has_bias) {
    w.bias = Tensor::zeros(spec.act_dtype, {n});
    for (int64_t i = 0; i < n; ++i) store_float(w.bias.mutable_data(), spec.act_dtype, std::size_t(i), rng.uniform(-0.5, 0.5));
  }
  return w;
}

Tensor random_activations(int64_t m, int64_t k, DType dtype, uint64_t seed) {
  detail::Rng rng(seed ^ 0x5bd1e995ull);
  Tensor x = Tensor::zeros(dtype, {m, k});
  for (int64_t i = 0; i < m * k; ++i) store_float(x.mutable_data(), dtype, std::size_t(i), rng.uniform(-1.0, 1.0));
  return x;
}

}  // namespace nibble
