// compressed-tensors `pack-quantized`.
//   weight_packed     i32 [N, ceil(K/8)]  packed along K (the last dim), nibble = signed value + 8
//   weight_shape      i32 [2] = (N, K)
//   weight_scale      [N, K/G] in the model dtype (the transpose of the canonical [K/G, N])
//   weight_zero_point i32 [ceil(N/8), K/G] packed along N (dim 0), nibble = signed zp + 8;
//                     asymmetric only (the transpose orientation of GPTQ's qzeros)
//   weight_g_idx      i32 [K] only with actorder: group
// w = s * (v - zp) = s * ((q - 8) - (zq - 8)) = s * (q - zq): the stored nibbles are the canonical
// unsigned code and true zero point as they are.
#include <cstring>

#include "formats_common.h"

namespace nibble::detail {

CanonicalLinear canonicalize_compressed_tensors(const LayerTensors& t, const LayerScheme& scheme, DType act_dtype) {
  Tensor shape = t.need("weight_shape", {DType::i32, DType::i64}, {2});
  const int64_t n = shape.dtype() == DType::i32 ? shape.data_as<int32_t>()[0] : shape.data_as<int64_t>()[0];
  const int64_t k = shape.dtype() == DType::i32 ? shape.data_as<int32_t>()[1] : shape.data_as<int64_t>()[1];
  if (n <= 0 || k <= 0 || n > (int64_t(1) << 31) || k > (int64_t(1) << 31))
    t.fail(t.layer + ".weight_shape", fmt::format("expected positive (N, K), found ({}, {})", n, k));
  const int64_t k8 = (k + 7) / 8, groups = groups_for(k, scheme.group_size);
  Tensor packed = t.need("weight_packed", {DType::i32, DType::u32}, {n, k8});

  CanonicalLinear w;
  w.spec = layer_spec(t, scheme, k, n);
  LinearSpec& s = w.spec;
  s.format = Format::compressed_tensors;

  // weight_packed [N, K/8] holds the canonical words transposed.
  w.qweight = Tensor::zeros(DType::u32, {k8, n});
  const uint32_t* src = static_cast<const uint32_t*>(packed.data());
  uint32_t* dst = w.qweight.mutable_data_as<uint32_t>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k8; ++c) dst[c * n + r] = src[r * k8 + c];
  if (k % 8) {  // the padding nibbles past K must not leak into a kernel that reads whole words
    const uint32_t keep = (1u << (4 * (k % 8))) - 1;
    for (int64_t r = 0; r < n; ++r) dst[(k8 - 1) * n + r] &= keep;
  }

  Tensor scale = t.need("weight_scale", {DType::f16, DType::bf16, DType::f32}, {n, groups});
  s.scale_dtype = scale.dtype();
  w.scales = Tensor::zeros(scale.dtype(), {groups, n});
  const std::size_t es = dtype_size(scale.dtype());
  const auto* sp = static_cast<const uint8_t*>(scale.data());
  auto* dp = static_cast<uint8_t*>(w.scales.mutable_data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g) std::memcpy(dp + (g * n + r) * es, sp + (r * groups + g) * es, es);

  if (scheme.symmetric) {
    if (!t.source("weight_zero_point").empty())
      t.fail(t.layer + ".weight_zero_point", "present, but the config says symmetric (zero points are never read then)");
  } else {
    // The format decides the orientation: [ceil(N/8), groups], packed along N. A tensor in GPTQ's
    // orientation [groups, ceil(N/8)] is refused by the shape check, not silently transposed.
    Tensor zp = t.need("weight_zero_point", {DType::i32, DType::u32}, {(n + 7) / 8, groups});
    w.zeros = Tensor::zeros(DType::u8, {groups, n});
    const uint32_t* zs = static_cast<const uint32_t*>(zp.data());
    uint8_t* z = w.zeros.mutable_data_as<uint8_t>();
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < groups; ++g) z[g * n + r] = uint8_t((zs[(r / 8) * groups + g] >> (4 * (r % 8))) & 0xfu);
  }
  Tensor g_idx = t.maybe("weight_g_idx", {DType::i32}, {k});
  finish_canonical(w, t, scheme, g_idx, act_dtype, "weight_g_idx");
  return w;
}

}  // namespace nibble::detail
