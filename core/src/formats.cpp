// canonicalize(): dispatch on the packing, and the tail every format shares.
#include "formats_common.h"

namespace nibble {

namespace detail {

void finish_canonical(CanonicalLinear& w, const LayerTensors& t, const LayerScheme& scheme, Tensor g_idx, DType act_dtype,
                      const char* g_idx_name) {
  LinearSpec& s = w.spec;
  if (scheme.act_order && g_idx.empty())
    t.fail(t.layer + "." + g_idx_name, "missing, but the config promises act order (desc_act / actorder: group)");
  if (!g_idx.empty()) {
    // A g_idx that is just k / G (GPTQ writes one even without desc_act) carries no permutation.
    const int32_t* g = g_idx.data_as<int32_t>();
    const int64_t G = s.effective_group(), ng = s.num_groups();
    bool trivial = true;
    for (int64_t k = 0; k < s.k; ++k) {
      if (g[k] < 0 || g[k] >= ng)
        t.fail(t.layer + "." + g_idx_name, fmt::format("expected values in [0, {}), found {} at row {}", ng, g[k], k));
      trivial &= g[k] == k / G;
    }
    if (!trivial) {
      s.act_order = true;
      w.g_idx = g_idx;
    }
  }
  Tensor bias = t.maybe("bias", {DType::f16, DType::bf16, DType::f32}, {s.n});
  if (!bias.empty()) {
    s.has_bias = true;
    w.bias = bias.to(act_dtype);
  }
  s.act_dtype = act_dtype;
  validate(w);
}

}  // namespace detail

const char* primary_tensor_suffix(Packing p) noexcept {
  return p == Packing::compressed_tensors ? "weight_packed" : "qweight";
}

CanonicalLinear canonicalize(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                             DType act_dtype) {
  if (scheme.kind != LayerScheme::Kind::quantized)
    throw Error(Errc::unsupported, fmt::format("layer '{}': not a quantized layer nibble runs: {}", name, scheme.reason));
  if (scheme.bits != 4)
    throw Error(Errc::unsupported, fmt::format("layer '{}': {}-bit weights; nibble runs 4-bit", name, scheme.bits));
  if (!is_float(act_dtype) || act_dtype == DType::f64)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': activation dtype {} (expected f16, bf16 or f32)", name,
                                                    dtype_name(act_dtype)));
  detail::LayerTensors t{name, tensors};
  switch (scheme.packing) {
    case Packing::gptq_v1:
    case Packing::gptq_v2: return detail::canonicalize_gptq(t, scheme, act_dtype);
    case Packing::awq_gemm: return detail::canonicalize_awq(t, scheme, act_dtype);
    case Packing::compressed_tensors: return detail::canonicalize_compressed_tensors(t, scheme, act_dtype);
  }
  throw Error(Errc::unsupported, fmt::format("layer '{}': unknown packing", name));
}

}  // namespace nibble
