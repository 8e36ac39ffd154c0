// AWQ GEMM (AutoAWQ `version: gemm`; also AutoRound's auto_awq packing), 4 bits only: the layout
// interleaves nibbles within a word, and AutoAWQ writes no other width.
//   qweight i32 [K, N/8]   packed along N, interleaved: nibble i of word c = column 8c + kOrder[i]
//   qzeros  i32 [K/G, N/8] the same interleave, storing z
//   scales  f16 [K/G, N]
// config: quant_method "awq", bits, group_size, zero_point, version, modules_to_not_convert.
#include "../input.h"
#include "unit.h"

namespace nibble::detail {

namespace {

using json = nlohmann::ordered_json;

// AutoAWQ packs columns (0, 2, 4, 6, 1, 3, 5, 7) into nibbles 0..7 of each word.
constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

LinearSpec describe(const LayerTensors& t, const LayerScheme& sc) {
  need_bits(t, sc, {4}, "AWQ");
  const TensorInfo& q = t.need("qweight", {DType::i32, DType::u32});
  t.need_rank("qweight", q, 2, "[K, N/8]");
  const int64_t k = q.shape[0], words = q.shape[1];
  LinearSpec s = base_spec(t, sc, k, words * 8);
  const int64_t groups = s.num_groups();
  const std::string note = sc.group_size > 0 ? fmt::format("ceil(K/G) = {} groups for K = {}, G = {}", groups, k, sc.group_size)
                                             : "one group per column";
  s.scale_dtype = t.need("scales", {DType::f16, DType::bf16, DType::f32}, {groups, s.n}, note).dtype;
  if (!sc.symmetric) t.need("qzeros", {DType::i32, DType::u32}, {groups, words}, "[K/G, N/8], interleaved like qweight");
  else t.maybe("qzeros", {DType::i32, DType::u32}, {groups, words}, "[K/G, N/8], interleaved like qweight");
  if (t.header("g_idx")) t.fail("g_idx", "present, but AWQ has no act order (nothing reads a g_idx in this packing)");
  return s;
}

void read(const LayerTensors& t, const LayerScheme& sc, CanonicalLinear& w) {
  const LinearSpec& s = w.spec;
  const int64_t k = s.k, n = s.n, words = n / 8, groups = s.num_groups();
  w.scales = t.data("scales");
  // Repack: AWQ packs 8 columns of one row into a word; the canonical form packs 8 rows of one column.
  Tensor qweight = t.data("qweight");
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
  if (!t.header("qzeros")) return;
  Tensor qzeros = t.data("qzeros");
  const uint32_t* zs = static_cast<const uint32_t*>(qzeros.data());
  if (sc.symmetric) {
    // zero_point: false means the zero is 8; zero points stored otherwise contradict the config.
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t c = 0; c < words; ++c)
        for (int i = 0; i < 8; ++i)
          if (const uint32_t z = (zs[g * words + c] >> (4 * i)) & 0xfu; z != 8)
            t.fail("qzeros", fmt::format("the config says zero_point: false (zero point 8), but qzeros stores {} at "
                                         "group {}, column {}: the layer has real zero points",
                                         z, g, 8 * c + kOrder[i]));
    return;
  }
  w.zeros = Tensor::zeros(DType::u8, {groups, n});
  uint8_t* z = w.zeros.mutable_data_as<uint8_t>();
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t c = 0; c < words; ++c)
      for (int i = 0; i < 8; ++i) z[g * n + 8 * c + kOrder[i]] = uint8_t((zs[g * words + c] >> (4 * i)) & 0xfu);
}

[[noreturn]] void cannot(const LinearSpec& s, const std::string& why) {
  throw Error(Errc::unsupported, fmt::format("layer '{}': cannot write it as {}: {}", s.name, packing_name(Packing::awq_gemm), why));
}

// Packs [rows, N] values (< 16) along N, 8 per word, interleaved.
Tensor pack_n(int64_t rows, int64_t n, const auto& value) {
  const int64_t words = n / 8;
  Tensor q = Tensor::zeros(DType::i32, {rows, words});
  uint32_t* out = static_cast<uint32_t*>(q.mutable_data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t wd = 0; wd < words; ++wd) {
      uint32_t word = 0;
      for (int i = 0; i < 8; ++i) word |= uint32_t(value(r, 8 * wd + kOrder[i]) & 0xf) << (4 * i);
      out[r * words + wd] = word;
    }
  return q;
}

std::vector<std::pair<std::string, Tensor>> write(const CanonicalLinear& w, Packing) {
  const LinearSpec& s = w.spec;
  if (s.bits != 4) cannot(s, fmt::format("{}-bit codes (AWQ packs 4 bits)", s.bits));
  if (s.act_order) cannot(s, "AWQ has no g_idx (act order)");
  if (s.n % 8) cannot(s, fmt::format("N {} is not a multiple of 8", s.n));
  std::vector<std::pair<std::string, Tensor>> t;
  t.emplace_back("qweight", pack_n(s.k, s.n, [&](int64_t r, int64_t c) { return int(w.code(r, c)); }));
  t.emplace_back("qzeros", pack_n(groups_for(s.k, s.group_size), s.n, [&](int64_t g, int64_t c) { return int(w.zero(g, c)); }));
  t.emplace_back("scales", w.scales);
  return t;
}

std::vector<Finding> lint(const LayerTensors&, const LayerScheme&, const LinearSpec&) { return {}; }

void parse_config(const json& q, const std::string& origin, ConfigRules& r) {
  LayerScheme s;
  s.kind = LayerScheme::Kind::quantized;
  s.format = Format::awq;
  s.packing = Packing::awq_gemm;
  s.bits = get_int(q, {"bits", "w_bit"}, 4, origin, "quantization_config", 1, 64);
  s.group_size = get_group_size(q, {"group_size", "q_group_size"}, 128, origin);
  s.symmetric = !get_bool(q, {"zero_point"}, true, origin);
  s.origin = "quantization_config.bits";
  std::string v = get_str(q, {"version"}, "gemm", origin);
  const std::string version = v;
  for (auto& ch : v) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (v != "gemm")
    r.unsupported = fmt::format("AWQ version '{}' (quantization_config.version): nibble reads the gemm layout; "
                                "gemv and gemv_fast pack weights differently", printable(version));
  if (const std::string why = bits_reason(s.bits, {4}, "quantization_config.bits", "AWQ"); !why.empty())
    s.kind = LayerScheme::Kind::unsupported, s.reason = why;
  // As AutoAWQ and vLLM skip them: any layer whose name contains an entry.
  for (const auto& m : get_list(q, "modules_to_not_convert", origin)) {
    QuantConfig::Override o;
    o.pattern = m;
    o.match = QuantConfig::Match::substring;
    o.skip = true;
    o.origin = fmt::format("'{}' in quantization_config.modules_to_not_convert", printable(m));
    r.skips.push_back(o);
  }
  r.lm_head_reason = "lm_head is not quantized: AWQ leaves it in 16 bits";
  r.format = Format::awq;
  r.base = s;
  r.has_base = true;
  r.summary = fmt::format("awq, {}, {}-bit, G{}, {}", packing_name(s.packing), s.bits, s.group_size,
                          s.symmetric ? "symmetric" : "asymmetric");
}

nlohmann::ordered_json write_config(const QuantizeOptions& o, const WriterVariant&) {
  return {{"quant_method", "awq"}, {"bits", o.bits}, {"group_size", o.group_size}, {"zero_point", !o.symmetric},
          {"version", "gemm"}, {"modules_to_not_convert", {"lm_head"}}};
}

}  // namespace

const FormatUnit& awq_format() {
  static const PackingUnit packing{Packing::awq_gemm, "qweight", "scales", {"qweight", "qzeros", "scales"}, {4}, 0, false, describe, read, write, lint};
  static const FormatUnit unit{"awq", {"awq"}, parse_config, {&packing}, {{"awq", Packing::awq_gemm, write_config}}};
  return unit;
}

}  // namespace nibble::detail
