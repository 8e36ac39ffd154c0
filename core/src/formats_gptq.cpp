// GPTQ (v1 and v2; also AutoRound's auto_gptq / gptqmodel packings).
//   qweight i32 [K/8, N]  packed along K, nibble j of row r = k 8r+j   -> the canonical layout as is
//   qzeros  i32 [G', N/8] packed along N (nibble j of word c = column 8c+j); v1 stores z - 1
//   scales  f16 [G', N];  g_idx i32 [K] (always written; only a non-trivial one means act order)
#include "formats_common.h"

namespace nibble::detail {

CanonicalLinear canonicalize_gptq(const LayerTensors& t, const LayerScheme& scheme, DType act_dtype) {
  const bool v1 = scheme.packing == Packing::gptq_v1;
  Tensor qweight = t.need("qweight", {DType::i32, DType::u32});
  if (qweight.ndim() != 2) t.fail(t.layer + ".qweight", fmt::format("expected rank 2 [K/8, N], found {}", shape_str(qweight.shape())));
  const int64_t n = qweight.dim(1);
  int64_t k = qweight.dim(0) * 8;
  Tensor g_idx = t.maybe("g_idx", {DType::i32});
  if (!g_idx.empty()) {
    if (g_idx.ndim() != 1 || (g_idx.dim(0) + 7) / 8 != qweight.dim(0))
      t.fail(t.layer + ".g_idx", fmt::format("expected [K] with K/8 = {} (the rows of qweight), found {}", qweight.dim(0),
                                             shape_str(g_idx.shape())));
    k = g_idx.dim(0);
  }
  const int64_t groups = groups_for(k, scheme.group_size);

  CanonicalLinear w;
  w.spec = layer_spec(t, scheme, k, n);
  LinearSpec& s = w.spec;
  w.scales = t.need("scales", {DType::f16, DType::bf16, DType::f32}, {groups, n});
  s.scale_dtype = w.scales.dtype();
  w.qweight = qweight.as_dtype(DType::u32);  // zero copy: GPTQ's packing is the canonical one

  if (scheme.symmetric) {
    // The zero is the constant 8: the stored qzeros are checked for shape only, never read.
    t.maybe("qzeros", {DType::i32, DType::u32}, {groups, (n + 7) / 8});
  } else {
    Tensor qzeros = t.need("qzeros", {DType::i32, DType::u32}, {groups, (n + 7) / 8});
    w.zeros = Tensor::zeros(DType::u8, {groups, n});
    const uint32_t* src = static_cast<const uint32_t*>(qzeros.data());
    uint8_t* z = w.zeros.mutable_data_as<uint8_t>();
    const int64_t words = (n + 7) / 8;
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < n; ++c) {
        const uint32_t stored = (src[g * words + c / 8] >> (4 * (c % 8))) & 0xfu;
        if (v1 && stored == 15)
          t.fail(t.layer + ".qzeros",
                 fmt::format("GPTQ v1 zero nibble 15 at group {}, column {}: v1 stores z - 1, so this is z = 16 "
                             "(AutoGPTQ's reading) or an intended z = 0 that wrapped; neither is a 4-bit zero point. "
                             "Re-export the checkpoint as gptq_v2.", g, c));
        z[g * n + c] = uint8_t(v1 ? stored + 1 : stored);  // v1: the offset is applied here, once
      }
  }
  finish_canonical(w, t, scheme, g_idx, act_dtype);
  return w;
}

}  // namespace nibble::detail
