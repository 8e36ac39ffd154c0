// AWQ GEMM (AutoAWQ `version: gemm`; also AutoRound's auto_awq packing).
//   qweight i32 [K, N/8]  packed along N, interleaved: nibble i of word c = column 8c + kOrder[i]
//   qzeros  i32 [K/G, N/8] the same interleave, storing z
//   scales  f16 [K/G, N]
#include "formats_common.h"

namespace nibble::detail {

namespace {
// AutoAWQ packs columns (0, 2, 4, 6, 1, 3, 5, 7) into nibbles 0..7 of each word.
constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
}  // namespace

CanonicalLinear canonicalize_awq(const LayerTensors& t, const LayerScheme& scheme, DType act_dtype) {
  Tensor qweight = t.need("qweight", {DType::i32, DType::u32});
  if (qweight.ndim() != 2) t.fail(t.layer + ".qweight", fmt::format("expected rank 2 [K, N/8], found {}", shape_str(qweight.shape())));
  const int64_t k = qweight.dim(0), words = qweight.dim(1), n = words * 8;
  const int64_t groups = groups_for(k, scheme.group_size);

  CanonicalLinear w;
  w.spec = layer_spec(t, scheme, k, n);
  LinearSpec& s = w.spec;
  w.scales = t.need("scales", {DType::f16, DType::bf16, DType::f32}, {groups, n});
  s.scale_dtype = w.scales.dtype();

  // Repack: AWQ packs 8 columns of one row into a word; the canonical form packs 8 rows of one column.
  w.qweight = Tensor::zeros(DType::u32, {(k + 7) / 8, n});
  const uint32_t* src = static_cast<const uint32_t*>(qweight.data());
  uint32_t* dst = w.qweight.mutable_data_as<uint32_t>();
  for (int64_t r = 0; r < k; ++r) {
    uint32_t* out = dst + (r / 8) * n;
    const int shift = int(4 * (r % 8));
    for (int64_t c = 0; c < words; ++c) {
      const uint32_t word = src[r * words + c];
      for (int i = 0; i < 8; ++i) out[8 * c + kOrder[i]] |= ((word >> (4 * i)) & 0xfu) << shift;
    }
  }
  if (scheme.symmetric) {
    t.maybe("qzeros", {DType::i32, DType::u32}, {groups, words});  // shape only; never read
  } else {
    Tensor qzeros = t.need("qzeros", {DType::i32, DType::u32}, {groups, words});
    w.zeros = Tensor::zeros(DType::u8, {groups, n});
    const uint32_t* zs = static_cast<const uint32_t*>(qzeros.data());
    uint8_t* z = w.zeros.mutable_data_as<uint8_t>();
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < words; ++c)
        for (int i = 0; i < 8; ++i) z[g * n + 8 * c + kOrder[i]] = uint8_t((zs[g * words + c] >> (4 * i)) & 0xfu);
  }
  finish_canonical(w, t, scheme, Tensor(), act_dtype);
  return w;
}

}  // namespace nibble::detail
