// compressed-tensors `pack-quantized`, at 4 and 8 bits (group and channel strategies).
//   weight_packed     i32 [N, ceil(K*b/32)]  packed along K (the last dim), code = signed value + 2^(b-1)
//   weight_shape      i32 or i64 [2] = (N, K)
//   weight_scale      [N, K/G] in the model dtype (the transpose of the canonical [K/G, N])
//   weight_zero_point i32 [ceil(N*b/32), K/G] packed along N (dim 0), code = signed zp + 2^(b-1);
//                     asymmetric only (the transpose orientation of GPTQ's qzeros)
//   weight_g_idx      i32 [K] only with actorder: group
// w = s (v - zp) = s ((q - o) - (zq - o)) = s (q - zq) with o = 2^(b-1): the stored codes are the
// canonical unsigned code and true zero point as they are.
// config: quant_method "compressed-tensors", format, ignore, config_groups {targets, weights
// {num_bits, type, symmetric, strategy, group_size, actorder}, input_activations}.
#include <cstring>

#include "../input.h"
#include "../pattern.h"
#include "unit.h"

namespace nibble::detail {

namespace {

using json = nlohmann::ordered_json;

constexpr std::initializer_list<int> kWidths = {4, 8};

LinearSpec describe(const LayerTensors& t, const LayerScheme& sc) {
  need_bits(t, sc, kWidths, "compressed-tensors pack-quantized");
  const int b = sc.bits;
  t.need("weight_shape", {DType::i32, DType::i64}, {2}, "(N, K)");
  Tensor shape = t.data("weight_shape");
  const int64_t n = shape.dtype() == DType::i32 ? shape.data_as<int32_t>()[0] : shape.data_as<int64_t>()[0];
  const int64_t k = shape.dtype() == DType::i32 ? shape.data_as<int32_t>()[1] : shape.data_as<int64_t>()[1];
  if (n <= 0 || k <= 0 || n > (int64_t(1) << 31) || k > (int64_t(1) << 31))
    t.fail("weight_shape", fmt::format("expected (N, K) in [1, 2^31], found ({}, {})", n, k));
  LinearSpec s = base_spec(t, sc, k, n);
  const int64_t groups = s.num_groups(), words = packed_rows(k, b);
  t.need("weight_packed", {DType::i32, DType::u32}, {n, words},
         fmt::format("[N, ceil(K*{}/32)] for weight_shape ({}, {})", b, n, k));
  const std::string note = sc.group_size > 0 ? fmt::format("[N, ceil(K/G)] for K = {}, G = {}", k, sc.group_size)
                                             : "[N, 1] for the channel strategy";
  s.scale_dtype = t.need("weight_scale", {DType::f16, DType::bf16, DType::f32}, {n, groups}, note).dtype;
  if (sc.symmetric) {
    if (t.header("weight_zero_point"))
      t.fail("weight_zero_point", "present, but the config says symmetric (zero points are never read then)");
  } else {
    // The format decides the orientation: [ceil(N*b/32), groups], packed along N. A tensor in
    // GPTQ's orientation [groups, ceil(N*b/32)] is refused by the shape check, not silently transposed.
    t.need("weight_zero_point", {DType::i32, DType::u32}, {stream_words(n, b), groups},
           fmt::format("[ceil(N*{}/32), groups], packed along N", b));
  }
  s.act_order = act_order_from(t, sc, s, "weight_g_idx");
  return s;
}

void read(const LayerTensors& t, const LayerScheme& sc, CanonicalLinear& w) {
  LinearSpec& s = w.spec;
  const int b = s.bits;
  const int64_t n = s.n, k = s.k, words = packed_rows(k, b), groups = s.num_groups();
  // weight_packed [N, words] holds the canonical words transposed.
  Tensor packed = t.data("weight_packed");
  Tensor q = Tensor::zeros(DType::u32, {words, n});
  const uint32_t* src = static_cast<const uint32_t*>(packed.data());
  uint32_t* dst = q.mutable_data_as<uint32_t>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < words; ++c) dst[c * n + r] = src[r * words + c];
  w.qweight = canonical_codes(q, k, b);  // the padding codes past K must not leak into a kernel that reads whole words

  Tensor scale = t.data("weight_scale");
  w.scales = Tensor::zeros(scale.dtype(), {groups, n});
  const std::size_t es = dtype_size(scale.dtype());
  const auto* sp = static_cast<const uint8_t*>(scale.data());
  auto* dp = static_cast<uint8_t*>(w.scales.mutable_data());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t g = 0; g < groups; ++g) std::memcpy(dp + (g * n + r) * es, sp + (r * groups + g) * es, es);

  if (!sc.symmetric) {
    Tensor zp = t.data("weight_zero_point");
    w.zeros = Tensor::zeros(DType::u8, {groups, n});
    const uint32_t* zs = static_cast<const uint32_t*>(zp.data());
    uint8_t* z = w.zeros.mutable_data_as<uint8_t>();
    const uint32_t mask = (1u << b) - 1;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < groups; ++g)
        z[g * n + r] = uint8_t((zs[(r * b / 32) * groups + g] >> ((r * b) % 32)) & mask);  // b divides 32
  }
  w.g_idx = canonical_g_idx(t, s, "weight_g_idx");
}

[[noreturn]] void cannot(const LinearSpec& s, const std::string& why) {
  throw Error(Errc::unsupported, fmt::format("layer '{}': cannot write it as {}: {}", s.name,
                                             packing_name(Packing::compressed_tensors), why));
}

std::vector<std::pair<std::string, Tensor>> write(const CanonicalLinear& w, Packing) {
  const LinearSpec& s = w.spec;
  const int b = s.bits;
  if (b != 4 && b != 8) cannot(s, fmt::format("{}-bit codes (pack-quantized is written at 4 and 8 bits)", b));
  const int64_t words = packed_rows(s.k, b), groups = groups_for(s.k, s.group_size);
  Tensor packed = Tensor::zeros(DType::i32, {s.n, words});
  const uint32_t* src = w.qweight.data_as<uint32_t>();
  uint32_t* dst = static_cast<uint32_t*>(packed.mutable_data());
  for (int64_t r = 0; r < words; ++r)
    for (int64_t c = 0; c < s.n; ++c) dst[c * words + r] = src[r * s.n + c];
  Tensor shape = Tensor::zeros(DType::i64, {2});
  shape.mutable_data_as<int64_t>()[0] = s.n;
  shape.mutable_data_as<int64_t>()[1] = s.k;
  Tensor scale = Tensor::zeros(w.scales.dtype(), {s.n, groups});
  const std::size_t es = dtype_size(w.scales.dtype());
  for (int64_t c = 0; c < s.n; ++c)
    for (int64_t g = 0; g < groups; ++g)
      std::memcpy(static_cast<uint8_t*>(scale.mutable_data()) + (c * groups + g) * es,
                  static_cast<const uint8_t*>(w.scales.data()) + (g * s.n + c) * es, es);
  std::vector<std::pair<std::string, Tensor>> t;
  t.emplace_back("weight_packed", packed);
  t.emplace_back("weight_shape", shape);
  t.emplace_back("weight_scale", scale);
  if (!weight_type_symmetric(s.weight_type)) {
    Tensor zp = Tensor::zeros(DType::i32, {stream_words(s.n, b), groups});
    uint32_t* z = static_cast<uint32_t*>(zp.mutable_data());
    for (int64_t c = 0; c < s.n; ++c)
      for (int64_t g = 0; g < groups; ++g) z[(c * b / 32) * groups + g] |= uint32_t(w.zero(g, c)) << ((c * b) % 32);
    t.emplace_back("weight_zero_point", zp);
  }
  if (s.act_order) t.emplace_back("weight_g_idx", w.g_idx);
  return t;
}

std::vector<Finding> lint(const LayerTensors&, const LayerScheme&, const LinearSpec&) { return {}; }

// A name rule of ignore or targets: "re:" + regex, a layer name, or (targets only, `classes`) a class
// name (Linear, *.Linear, LinearBase); vLLM matches ignore entries by name alone.
QuantConfig::Override name_rule(const std::string& entry, const std::string& origin, const std::string& key,
                                bool classes) {
  QuantConfig::Override o;
  if (entry.starts_with("re:")) {
    o.pattern = entry.substr(3);
    o.match = QuantConfig::Match::prefix;
    check_pattern(o.pattern, origin, key);
  } else if (classes && (entry == "Linear" || entry.ends_with(".Linear") || entry == "LinearBase")) {
    o.pattern = entry;
    o.match = QuantConfig::Match::every;
  } else {
    o.pattern = entry;
    o.match = QuantConfig::Match::exact;
  }
  return o;
}

void parse_config(const json& q, const std::string& origin, ConfigRules& r) {
  LayerScheme s;
  s.kind = LayerScheme::Kind::quantized;
  s.format = Format::compressed_tensors;
  s.packing = Packing::compressed_tensors;
  r.format = Format::compressed_tensors;
  r.by_targets = true;
  const std::string top_format = get_str(q, {"format"}, "", origin);
  // ignore and targets as compressed-tensors and vLLM match them: "re:" entries by re.match (at
  // the start of the name), others by equality; a class target ("Linear") takes every layer but
  // lm_head, and only where no target names the layer.
  for (const auto& m : get_list(q, "ignore", origin)) {
    QuantConfig::Override o =
        name_rule(m, origin, fmt::format("quantization_config.ignore entry '{}'", printable(m)), false);
    o.skip = true;
    o.origin = fmt::format("'{}' in quantization_config.ignore", printable(m));
    r.skips.push_back(o);
  }
  r.targets_origin = "matches no target of quantization_config.config_groups";
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) config_error(origin, "quantization_config: missing 'config_groups'");
  for (const auto& [gname, g] : groups->items()) {
    const std::string where = fmt::format("quantization_config.config_groups.{}", printable(gname));
    if (!g.is_object()) config_error(origin, fmt::format("{}: expected an object, found {}", where, printable_json(g)));
    QuantConfig::Override o;
    o.origin = where;
    o.scheme = s;
    o.scheme.origin = where + ".weights.num_bits";
    const std::string fmt_g = get_str(g, {"format"}, top_format, origin, where);
    std::string unsupported;
    if (fmt_g != "pack-quantized")
      unsupported = fmt::format("format '{}' ({}.format): nibble reads pack-quantized", printable(fmt_g), where);
    auto w = g.find("weights");
    if (w == g.end() || !w->is_object()) config_error(origin, fmt::format("{}.weights: missing", where));
    const std::string ww = where + ".weights";
    o.scheme.bits = get_int(*w, {"num_bits"}, 4, origin, ww, 1, 64);
    if (const std::string why = bits_reason(o.scheme.bits, kWidths, ww + ".num_bits", "compressed-tensors pack-quantized"); !why.empty())
      unsupported = why;
    const std::string type = get_str(*w, {"type"}, "int", origin, ww);
    if (type != "int") unsupported = fmt::format("weights type '{}' ({}.type): nibble runs integer weights", printable(type), ww);
    o.scheme.symmetric = get_bool(*w, {"symmetric"}, true, origin, ww);
    const std::string strategy = get_str(*w, {"strategy"}, "group", origin, ww);
    if (strategy == "group") o.scheme.group_size = get_group_size(*w, {"group_size"}, 128, origin, ww);
    else if (strategy == "channel") o.scheme.group_size = -1;
    else unsupported = fmt::format("strategy '{}' ({}.strategy): nibble runs group and channel", printable(strategy), ww);
    const std::string actorder = get_str(*w, {"actorder"}, "", origin, ww);
    o.scheme.act_order = actorder == "group";
    if (!actorder.empty() && actorder != "group" && actorder != "weight" && actorder != "static")
      unsupported = fmt::format("actorder '{}' ({}.actorder)", printable(actorder), ww);
    if (auto ia = g.find("input_activations"); ia != g.end() && !ia->is_null())
      unsupported = fmt::format("{}.input_activations is set (activations quantized): nibble runs 16-bit activations", where);
    if (!unsupported.empty()) {
      o.scheme.kind = LayerScheme::Kind::unsupported;
      o.scheme.reason = unsupported;
    }
    auto targets = get_list(g, "targets", origin, where);
    if (targets.empty()) config_error(origin, fmt::format("{}.targets: empty", where));
    for (const auto& target : targets) {
      QuantConfig::Override ot = o;
      const QuantConfig::Override rule =
          name_rule(target, origin, fmt::format("{}.targets entry '{}'", where, printable(target)), true);
      ot.pattern = rule.pattern;
      ot.match = rule.match;
      r.targets.push_back(ot);
    }
  }
  r.summary = "compressed-tensors pack-quantized";
  if (!r.targets.empty()) {
    const LayerScheme& f = r.targets.front().scheme;
    r.summary += fmt::format(", {}-bit, G{}, {}{}", f.bits, f.group_size, f.symmetric ? "symmetric" : "asymmetric",
                             f.act_order ? ", act order" : "");
  }
  r.base = s;
  r.has_base = true;
}

nlohmann::ordered_json write_config(const QuantizeOptions& o, const WriterVariant&) {
  using ojson = nlohmann::ordered_json;
  ojson weights = {{"num_bits", o.bits}, {"type", "int"}, {"symmetric", o.symmetric},
                   {"strategy", o.group_size == -1 ? "channel" : "group"},
                   {"group_size", o.group_size == -1 ? ojson(nullptr) : ojson(o.group_size)}, {"dynamic", false},
                   {"actorder", o.act_order ? ojson("group") : ojson(nullptr)}, {"observer", "minmax"}};
  return {{"quant_method", "compressed-tensors"}, {"format", "pack-quantized"}, {"ignore", {"lm_head"}},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"input_activations", nullptr},
                                          {"output_activations", nullptr}, {"weights", weights}}}}}};
}

}  // namespace

const FormatUnit& compressed_tensors_format() {
  static const PackingUnit packing{Packing::compressed_tensors,
                                   "weight_packed",
                                   "weight_scale",
                                   {"weight_packed", "weight_shape", "weight_scale", "weight_zero_point", "weight_g_idx"},
                                   {4, 8},
                                   0,
                                   true,
                                   describe,
                                   read,
                                   write,
                                   lint};
  static const FormatUnit unit{"compressed-tensors", {"compressed-tensors"}, parse_config, {&packing},
                               {{"compressed-tensors", Packing::compressed_tensors, write_config}}};
  return unit;
}

}  // namespace nibble::detail
