// pack_layer(): the canonical form written back in each tool's layout (the inverse of
// canonicalize; used by `nibble quantize` and the round-trip tests).
#include <cstring>

#include "formats_common.h"

namespace nibble {

namespace {

using Tensors = std::vector<std::pair<std::string, Tensor>>;
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

[[noreturn]] void cannot(const LinearSpec& s, Packing p, const std::string& why) {
  throw Error(Errc::unsupported, fmt::format("layer '{}': cannot write it as {}: {}", s.name, packing_name(p), why));
}

int64_t groups_of(const LinearSpec& s) { return detail::groups_for(s.k, s.group_size); }

Tensor codes_kn(const CanonicalLinear& w) { return unpack_codes_k(w.qweight, w.spec.k); }

// qzeros packed along N, 8 columns per word, nibble j = column 8c + order[j].
Tensor pack_zeros_n(const CanonicalLinear& w, Packing p, const int* order) {
  const LinearSpec& s = w.spec;
  const int64_t groups = groups_of(s), words = (s.n + 7) / 8;
  Tensor q = Tensor::zeros(DType::i32, {groups, words});
  uint32_t* out = static_cast<uint32_t*>(q.mutable_data());
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < words; ++c) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j) {
        const int64_t col = 8 * c + (order ? order[j] : j);
        int z = col < s.n ? w.zero(g, col) : 0;
        if (p == Packing::gptq_v1) {
          if (col < s.n && z == 0) cannot(s, p, fmt::format("zero point 0 at group {}, column {} (v1 stores z - 1)", g, col));
          z = col < s.n ? z - 1 : 0;
        }
        word |= uint32_t(z & 0xf) << (4 * j);
      }
      out[g * words + c] = word;
    }
  return q;
}

Tensors pack_gptq(const CanonicalLinear& w, Packing p) {
  const LinearSpec& s = w.spec;
  Tensors t;
  t.emplace_back("qweight", w.qweight.as_dtype(DType::i32));
  t.emplace_back("qzeros", pack_zeros_n(w, p, nullptr));
  t.emplace_back("scales", w.scales);
  Tensor g_idx = Tensor::zeros(DType::i32, {s.k});
  for (int64_t k = 0; k < s.k; ++k) g_idx.mutable_data_as<int32_t>()[k] = int32_t(w.group_of(k));
  t.emplace_back("g_idx", g_idx);  // GPTQ always writes one
  return t;
}

Tensors pack_awq(const CanonicalLinear& w) {
  const LinearSpec& s = w.spec;
  if (s.act_order) cannot(s, Packing::awq_gemm, "AWQ has no g_idx (act order)");
  if (s.n % 8) cannot(s, Packing::awq_gemm, fmt::format("N {} is not a multiple of 8", s.n));
  const int64_t words = s.n / 8;
  Tensor codes = codes_kn(w);
  Tensor q = Tensor::zeros(DType::i32, {s.k, words});
  uint32_t* out = static_cast<uint32_t*>(q.mutable_data());
  const uint8_t* c = codes.data_as<uint8_t>();
  for (int64_t r = 0; r < s.k; ++r)
    for (int64_t wd = 0; wd < words; ++wd) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t(c[r * s.n + 8 * wd + kAwqOrder[i]]) << (4 * i);
      out[r * words + wd] = word;
    }
  Tensors t;
  t.emplace_back("qweight", q);
  t.emplace_back("qzeros", pack_zeros_n(w, Packing::awq_gemm, kAwqOrder));
  t.emplace_back("scales", w.scales);
  return t;
}

Tensors pack_compressed_tensors(const CanonicalLinear& w) {
  const LinearSpec& s = w.spec;
  const int64_t k8 = (s.k + 7) / 8, groups = groups_of(s);
  Tensor packed = Tensor::zeros(DType::i32, {s.n, k8});
  const uint32_t* src = w.qweight.data_as<uint32_t>();
  uint32_t* dst = static_cast<uint32_t*>(packed.mutable_data());
  for (int64_t r = 0; r < k8; ++r)
    for (int64_t c = 0; c < s.n; ++c) dst[c * k8 + r] = src[r * s.n + c];
  Tensor shape = Tensor::zeros(DType::i32, {2});
  shape.mutable_data_as<int32_t>()[0] = int32_t(s.n);
  shape.mutable_data_as<int32_t>()[1] = int32_t(s.k);
  Tensor scale = Tensor::zeros(w.scales.dtype(), {s.n, groups});
  const std::size_t es = dtype_size(w.scales.dtype());
  for (int64_t c = 0; c < s.n; ++c)
    for (int64_t g = 0; g < groups; ++g)
      std::memcpy(static_cast<uint8_t*>(scale.mutable_data()) + (c * groups + g) * es,
                  static_cast<const uint8_t*>(w.scales.data()) + (g * s.n + c) * es, es);
  Tensors t;
  t.emplace_back("weight_packed", packed);
  t.emplace_back("weight_shape", shape);
  t.emplace_back("weight_scale", scale);
  if (s.weight_type == WeightType::uint4) {
    Tensor zp = Tensor::zeros(DType::i32, {(s.n + 7) / 8, groups});
    uint32_t* z = static_cast<uint32_t*>(zp.mutable_data());
    for (int64_t c = 0; c < s.n; ++c)
      for (int64_t g = 0; g < groups; ++g) z[(c / 8) * groups + g] |= uint32_t(w.zero(g, c)) << (4 * (c % 8));
    t.emplace_back("weight_zero_point", zp);
  }
  if (s.act_order) t.emplace_back("weight_g_idx", w.g_idx);
  return t;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> pack_layer(const CanonicalLinear& w, Packing packing) {
  if (w.spec.parallel != Parallel::none)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': cannot write a tensor-parallel partition", w.spec.name));
  Tensors t;
  switch (packing) {
    case Packing::gptq_v1:
    case Packing::gptq_v2: t = pack_gptq(w, packing); break;
    case Packing::awq_gemm: t = pack_awq(w); break;
    case Packing::compressed_tensors: t = pack_compressed_tensors(w); break;
  }
  if (!w.bias.empty()) t.emplace_back("bias", w.bias);
  return t;
}

}  // namespace nibble
