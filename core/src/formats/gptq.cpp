// GPTQ (AutoGPTQ, GPTQModel; v1 and v2 zero points), at 2, 3, 4 and 8 bits. Its packing is also
// AutoRound's auto_gptq (v1) and gptqmodel / auto_round (v2) packings (autoround.cpp).
//   qweight i32 [K*b/32, N]   packed along K as a bit stream per column: the canonical layout as is
//                             (3 bits: every 3 words hold 32 codes; codes 10 and 21 straddle words)
//   qzeros  i32 [G', N*b/32]  packed along N as a bit stream per group; v1 stores z - 1
//   scales  f16 [G', N];  g_idx i32 [K] (always written; only a non-trivial one means act order)
// config: quant_method "gptq", bits, group_size, sym, desc_act, checkpoint_format (gptq | gptq_v2),
// pack_dtype, lm_head, and GPTQModel's per-layer `dynamic` overrides.
#include "../input.h"
#include "unit.h"

namespace nibble::detail {

namespace {

using json = nlohmann::ordered_json;

constexpr std::initializer_list<int> kWidths = {2, 3, 4, 8};

// The zero point a v1 / v2 qzeros stores for a symmetric layer: z - 1 = 2^(b-1) - 1, or z = 2^(b-1).
uint32_t symmetric_stored(int bits, bool v1) { return (1u << (bits - 1)) - (v1 ? 1u : 0u); }

// qzeros of a layer with `groups` groups and N columns: [groups, ceil(N*b/32)]. AutoGPTQ and
// auto-round size it N // 32 * b words, too narrow when N % 32 != 0; symmetric layers never read
// it, so there that width is accepted too.
int64_t check_qzeros(const LayerTensors& t, int64_t groups, int64_t n, int bits, bool symmetric) {
  const TensorInfo& z = t.need("qzeros", {DType::i32, DType::u32});
  const int64_t words = stream_words(n, bits);
  const Shape want{groups, words};
  if (z.shape == want) return words;
  if (z.shape.size() == 2 && z.shape[0] == groups && z.shape[1] * 32 / bits < n) {
    if (symmetric && z.shape[1] == n / 32 * bits) return z.shape[1];
    t.fail("qzeros", fmt::format("expected shape {} (ceil(N*{}/32) words for N = {} zero points per group), found {}: "
                                 "too narrow for N, as AutoGPTQ and auto-round size it when N % 32 != 0",
                                 shape_str(want), bits, n, shape_str(z.shape)));
  }
  if (z.shape == Shape{words, groups})
    t.fail("qzeros", fmt::format("expected shape {} [groups, N*{}/32] (GPTQ packs zero points along N), found {}: the "
                                 "transposed orientation of compressed-tensors",
                                 shape_str(want), bits, shape_str(z.shape)));
  t.fail("qzeros", fmt::format("expected shape {} [groups, N*{}/32], found {}", shape_str(want), bits, shape_str(z.shape)));
}

LinearSpec describe(const LayerTensors& t, const LayerScheme& sc) {
  need_bits(t, sc, kWidths, "GPTQ");
  const int b = sc.bits;
  const TensorInfo& q = t.need("qweight", {DType::i32, DType::u32});
  t.need_rank("qweight", q, 2, fmt::format("[K*{}/32, N]", b).c_str());
  const int64_t rows = q.shape[0], n = q.shape[1];
  int64_t k = 0;
  if (const TensorInfo* g = t.header("g_idx")) {
    t.check("g_idx", *g, {DType::i32}, {}, "");
    t.need_rank("g_idx", *g, 1, "[K]");
    k = g->shape[0];
    if (k <= 0 || packed_rows(k, b) != rows)
      t.fail("g_idx", fmt::format("expected [K] with ceil(K*{}/32) = {} (the rows of qweight at {} bits), found {}", b, rows,
                                  b, shape_str(g->shape)));
  } else {
    if ((rows * 32) % b)
      t.fail("qweight", fmt::format("expected a multiple of {} rows for {}-bit codes (32 codes in every {} words), found {}",
                                    b, b, b, shape_str(q.shape)));
    k = rows * 32 / b;
  }
  LinearSpec s = base_spec(t, sc, k, n);
  const int64_t groups = s.num_groups();
  const std::string note = sc.group_size > 0 ? fmt::format("ceil(K/G) = {} groups for K = {}, G = {}", groups, k, sc.group_size)
                                             : "one group per column";
  s.scale_dtype = t.need("scales", {DType::f16, DType::bf16, DType::f32}, {groups, n}, note).dtype;
  if (!sc.symmetric || t.header("qzeros")) check_qzeros(t, groups, n, b, sc.symmetric);
  s.act_order = act_order_from(t, sc, s, "g_idx");
  return s;
}

void read(const LayerTensors& t, const LayerScheme& sc, CanonicalLinear& w) {
  const LinearSpec& s = w.spec;
  const bool v1 = sc.packing == Packing::gptq_v1;
  const int b = s.bits;
  const int64_t groups = s.num_groups(), n = s.n;
  w.qweight = canonical_codes(t.data("qweight"), s.k, b);
  w.scales = t.data("scales");
  if (t.header("qzeros")) {
    const int64_t words = check_qzeros(t, groups, n, b, sc.symmetric);
    const int64_t stored_n = std::min<int64_t>(n, words * 32 / b);
    Tensor qz = t.data("qzeros");
    const uint32_t* src = static_cast<const uint32_t*>(qz.data());
    const uint32_t all = (1u << b) - 1;
    if (sc.symmetric) {
      // Never read for the product (the zero is 2^(b-1)); a value that is neither convention's
      // constant contradicts the config's sym.
      const uint32_t c1 = symmetric_stored(b, true), c2 = symmetric_stored(b, false);
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < stored_n; ++c)
          if (const uint32_t z = stream_code(src + g * words, c, b); z != c1 && z != c2)
            t.fail("qzeros", fmt::format("the config says sym (zero point {}), but qzeros stores {} at group {}, column {} "
                                         "(expected {} as {} stores it): the layer has real zero points",
                                         1 << (b - 1), z, g, c, v1 ? c1 : c2, v1 ? "v1" : "v2"));
    } else {
      w.zeros = Tensor::zeros(DType::u8, {groups, n});
      uint8_t* z = w.zeros.mutable_data_as<uint8_t>();
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < n; ++c) {
          const uint32_t stored = stream_code(src + g * words, c, b);
          if (v1 && stored == all)
            t.fail("qzeros", fmt::format("GPTQ v1 zero {} at group {}, column {}: v1 stores z - 1, so this is z = {} "
                                         "(AutoGPTQ's reading) or an intended z = 0 that wrapped; neither is a {}-bit "
                                         "zero point. Re-export the checkpoint as gptq_v2.",
                                         all, g, c, all + 1, b));
          z[g * n + c] = uint8_t(v1 ? stored + 1 : stored);  // v1: the offset is applied here, once
        }
    }
  }
  w.g_idx = canonical_g_idx(t, s, "g_idx");
}

[[noreturn]] void cannot(const LinearSpec& s, Packing p, const std::string& why) {
  throw Error(Errc::unsupported, fmt::format("layer '{}': cannot write it as {}: {}", s.name, packing_name(p), why));
}

std::vector<std::pair<std::string, Tensor>> write(const CanonicalLinear& w, Packing p) {
  const LinearSpec& s = w.spec;
  const int b = s.bits;
  if (b != 2 && b != 3 && b != 4 && b != 8) cannot(s, p, fmt::format("{}-bit codes", b));
  const bool v1 = p == Packing::gptq_v1;
  const int64_t groups = groups_for(s.k, s.group_size), words = stream_words(s.n, b);
  Tensor qz = Tensor::zeros(DType::i32, {groups, words});
  uint32_t* out = static_cast<uint32_t*>(qz.mutable_data());
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < s.n; ++c) {
      uint32_t z = w.zero(g, c);
      if (v1) {
        if (z == 0) cannot(s, p, fmt::format("zero point 0 at group {}, column {} (v1 stores z - 1)", g, c));
        --z;
      }
      put_stream_code(out + g * words, c, b, z);
    }
  std::vector<std::pair<std::string, Tensor>> t;
  t.emplace_back("qweight", w.qweight.as_dtype(DType::i32));
  t.emplace_back("qzeros", qz);
  t.emplace_back("scales", w.scales);
  Tensor g_idx = Tensor::zeros(DType::i32, {s.k});
  for (int64_t k = 0; k < s.k; ++k) g_idx.mutable_data_as<int32_t>()[k] = int32_t(w.group_of(k));
  t.emplace_back("g_idx", g_idx);  // GPTQ always writes one
  return t;
}

std::vector<Finding> lint(const LayerTensors& t, const LayerScheme& sc, const LinearSpec& s) {
  std::vector<Finding> out;
  if (!t.header("qzeros")) return out;
  const bool v1 = sc.packing == Packing::gptq_v1;
  const int b = s.bits;
  const int64_t groups = s.num_groups(), words = t.header("qzeros")->shape[1];
  const int64_t stored_n = std::min<int64_t>(s.n, words * 32 / b);
  if (stored_n < s.n)
    out.push_back({t.name("qzeros"), fmt::format("{} words per group hold {} zero points, fewer than N = {}: sized "
                                                 "N // 32 * {} as AutoGPTQ and auto-round do when N % 32 != 0",
                                                 words, stored_n, s.n, b)});
  Tensor qz = t.data("qzeros");
  const uint32_t* src = static_cast<const uint32_t*>(qz.data());
  if (sc.symmetric) {
    // Which convention's constant the symmetric zeros are stored in, against checkpoint_format.
    const uint32_t own = symmetric_stored(b, v1), other = symmetric_stored(b, !v1);
    int64_t n_other = 0, n_all = 0;
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < stored_n; ++c, ++n_all) n_other += stream_code(src + g * words, c, b) == other;
    if (n_all && n_other == n_all)
      out.push_back({t.name("qzeros"),
                     fmt::format("the symmetric zero points are stored as {} (the {} convention) although the config "
                                 "says {} ({}): a {} checkpoint labelled {} (GPTQModel v5 wrote such files: vLLM PR #38966)",
                                 other, v1 ? "gptq_v2" : "gptq v1", v1 ? "gptq (v1)" : "gptq_v2", own,
                                 v1 ? "v2" : "v1", v1 ? "v1" : "v2")});
  } else if (v1 && 32 % b == 0) {
    // AutoGPTQ packs a v1 zero point of 0 as -1 cast to uint32: the whole word turns into ones.
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t wd = 0; wd < words; ++wd)
        if (src[g * words + wd] == 0xffffffffu) {
          out.push_back({t.name("qzeros"),
                         fmt::format("word {} of group {} is 0xffffffff: a zero point of 0 packed by AutoGPTQ (it ORs -1 "
                                     "into the word), so every zero of that word reads back as {}; re-export as gptq_v2",
                                     wd, g, 1 << b)});
          return out;
        }
  }
  return out;
}

const PackingUnit& packing(Packing p) {
  static const PackingUnit v1{Packing::gptq_v1, "qweight", "scales", {"qweight", "qzeros", "scales", "g_idx"}, {2, 3, 4, 8}, 1, true,
                              describe, read, write, lint};
  static const PackingUnit v2{Packing::gptq_v2, "qweight", "scales", {"qweight", "qzeros", "scales", "g_idx"}, {2, 3, 4, 8}, 0, true,
                              describe, read, write, lint};
  return p == Packing::gptq_v1 ? v1 : v2;
}

std::string scheme_summary(const LayerScheme& s) {
  std::string r = fmt::format("{}-bit, G{}, {}", s.bits, s.group_size, s.symmetric ? "symmetric" : "asymmetric");
  if (s.act_order) r += ", act order";
  return r;
}

void parse_config(const json& q, const std::string& origin, ConfigRules& r) {
  const std::string qc = "quantization_config";
  LayerScheme s;
  s.kind = LayerScheme::Kind::quantized;
  s.format = Format::gptq;
  s.bits = get_int(q, {"bits", "w_bit"}, 4, origin, qc, 1, 64);
  s.group_size = get_group_size(q, {"group_size", "q_group_size"}, 128, origin);
  s.symmetric = get_bool(q, {"sym"}, true, origin);
  s.act_order = get_bool(q, {"desc_act"}, false, origin);
  s.origin = qc + ".bits";
  const std::string fmt_ = get_str(q, {"checkpoint_format", "format"}, "gptq", origin);
  if (fmt_ == "gptq") s.packing = Packing::gptq_v1;
  else if (fmt_ == "gptq_v2") s.packing = Packing::gptq_v2, s.format = Format::gptq_v2;
  else r.unsupported = fmt::format("checkpoint_format '{}' (quantization_config.checkpoint_format): nibble reads gptq and gptq_v2", printable(fmt_));
  const std::string pack_dtype = get_str(q, {"pack_dtype"}, "int32", origin);
  if (pack_dtype != "int32" && pack_dtype != "torch.int32")
    r.unsupported = fmt::format("pack_dtype '{}' (quantization_config.pack_dtype): nibble reads int32 packing", printable(pack_dtype));
  if (const std::string why = bits_reason(s.bits, kWidths, "quantization_config.bits", "GPTQ"); !why.empty())
    s.kind = LayerScheme::Kind::unsupported, s.reason = why;
  r.quantize_lm_head = get_bool(q, {"lm_head"}, false, origin);
  r.lm_head_reason = "lm_head is not quantized (quantization_config.lm_head is false)";
  // GPTQModel "dynamic": {"-:regex": {}} skips layers; "+:regex" or "regex": {bits, group_size, ...}.
  // As GPTQModel and vLLM read it: in the file's order, the first rule whose regex matches at the
  // start of the name (re.match) decides, a skip or its overrides (keys it lacks: the base's).
  if (auto dyn = q.find("dynamic"); dyn != q.end() && !dyn->is_null()) {
    if (!dyn->is_object()) config_error(origin, fmt::format("quantization_config.dynamic: expected an object, found {}", printable_json(*dyn)));
    for (const auto& [key, val] : dyn->items()) {
      QuantConfig::Override o;
      o.match = QuantConfig::Match::prefix;
      o.origin = fmt::format("quantization_config.dynamic[\"{}\"]", printable(key));
      o.skip = key.starts_with("-:");
      o.pattern = key.starts_with("-:") || key.starts_with("+:") ? key.substr(2) : key;
      check_pattern(o.pattern, origin, o.origin);
      if (!val.is_object()) config_error(origin, fmt::format("{}: expected an object, found {}", o.origin, printable_json(val)));
      o.scheme = s;
      o.scheme.kind = LayerScheme::Kind::quantized;
      o.scheme.reason.clear();
      o.scheme.bits = get_int(val, {"bits"}, s.bits, origin, o.origin, 1, 64);
      o.scheme.group_size = get_group_size(val, {"group_size"}, s.group_size, origin, o.origin);
      o.scheme.symmetric = get_bool(val, {"sym"}, s.symmetric, origin, o.origin);
      o.scheme.act_order = get_bool(val, {"desc_act"}, s.act_order, origin, o.origin);
      o.scheme.origin = o.origin;
      if (const std::string why = bits_reason(o.scheme.bits, kWidths, o.origin + ".bits", "GPTQ"); !why.empty())
        o.scheme.kind = LayerScheme::Kind::unsupported, o.scheme.reason = why;
      r.overrides.push_back(o);
    }
  }
  r.format = s.format;
  r.base = s;
  r.has_base = true;
  r.summary = fmt::format("gptq, {}, {}", packing_name(s.packing), scheme_summary(s));
  if (!r.overrides.empty()) r.summary += fmt::format(", {} dynamic override(s)", r.overrides.size());
}

nlohmann::ordered_json write_config(const QuantizeOptions& o, const WriterVariant& v) {
  return {{"quant_method", "gptq"}, {"bits", o.bits}, {"group_size", o.group_size}, {"desc_act", o.act_order},
          {"sym", o.symmetric}, {"checkpoint_format", v.name}, {"static_groups", false}, {"true_sequential", true},
          {"damp_percent", 0.01}, {"lm_head", false}};
}

}  // namespace

const FormatUnit& gptq_format() {
  static const FormatUnit unit{"gptq", {"gptq"}, parse_config, {&packing(Packing::gptq_v1), &packing(Packing::gptq_v2)},
                               {{"gptq", Packing::gptq_v1, write_config}, {"gptq_v2", Packing::gptq_v2, write_config}}};
  return unit;
}

}  // namespace nibble::detail
