// config.json quantization_config -> a LayerScheme per layer, for GPTQ, AWQ, compressed-tensors
// and AutoRound (see docs/formats.md).
#include "nibble/quant_config.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "nibble/error.h"
#include "nibble/policy.h"
#include "pattern.h"

namespace nibble {

using json = nlohmann::json;

const char* packing_name(Packing p) noexcept {
  switch (p) {
    case Packing::gptq_v1: return "gptq (v1 zeros)";
    case Packing::gptq_v2: return "gptq_v2";
    case Packing::awq_gemm: return "awq gemm";
    case Packing::compressed_tensors: return "pack-quantized";
  }
  return "?";
}

namespace {

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw Error(Errc::format, fmt::format("{}: quantization_config: {}", origin, what));
}

// Reads an integer key (or the first of several aliases); `fallback` if absent.
int get_int(const json& q, std::initializer_list<const char*> keys, int fallback, const std::string& origin) {
  for (const char* k : keys) {
    auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_number_integer()) bad(origin, fmt::format("'{}' must be an integer, found {}", k, it->dump()));
    const int64_t v = it->get<int64_t>();
    if (v < -1 || v > (1 << 20)) bad(origin, fmt::format("'{}' = {} is out of range", k, v));
    return int(v);
  }
  return fallback;
}

bool get_bool(const json& q, std::initializer_list<const char*> keys, bool fallback, const std::string& origin) {
  for (const char* k : keys) {
    auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_boolean()) bad(origin, fmt::format("'{}' must be true or false, found {}", k, it->dump()));
    return it->get<bool>();
  }
  return fallback;
}

std::string get_str(const json& q, std::initializer_list<const char*> keys, const std::string& fallback,
                    const std::string& origin) {
  for (const char* k : keys) {
    auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_string()) bad(origin, fmt::format("'{}' must be a string, found {}", k, it->dump()));
    return it->get<std::string>();
  }
  return fallback;
}

std::vector<std::string> get_list(const json& q, const char* key, const std::string& origin) {
  std::vector<std::string> out;
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) return out;
  if (it->is_string()) {  // AutoRound writes block_name_to_quantize as "a,b"
    std::string s = it->get<std::string>();
    std::size_t start = 0;
    while (start <= s.size()) {
      std::size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) out.push_back(s.substr(start, end - start));
      start = end + 1;
    }
    return out;
  }
  if (!it->is_array()) bad(origin, fmt::format("'{}' must be a list of strings", key));
  for (const auto& v : *it) {
    if (!v.is_string()) bad(origin, fmt::format("'{}' must hold only strings, found {}", key, v.dump()));
    out.push_back(v.get<std::string>());
  }
  return out;
}

// A group size as written by the tools: -1 (or 0 / null in some tools) means per channel.
int normalize_group(int g) { return g <= 0 ? -1 : g; }

std::string scheme_summary(const LayerScheme& s) {
  std::string r = fmt::format("{}-bit, G{}, {}", s.bits, s.group_size, s.symmetric ? "symmetric" : "asymmetric");
  if (s.act_order) r += ", act order";
  return r;
}

// Does a layer name match an AutoRound extra_config key or GPTQModel dynamic key? Exact names
// first; otherwise the key is a regular expression searched in the name.
bool search_match(const std::string& pattern, const std::string& name) {
  if (pattern == name) return true;
  return detail::regex_search(pattern, name);
}

bool is_lm_head(const std::string& name) { return name == "lm_head" || name.ends_with(".lm_head"); }

}  // namespace

QuantConfig QuantConfig::parse(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(Errc::format, fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!root.is_object()) throw Error(Errc::format, fmt::format("{}: expected a JSON object", origin));
  QuantConfig c;
  std::string dt = get_str(root, {"torch_dtype", "dtype"}, "float16", origin);
  if (auto d = parse_dtype(dt); d && (*d == DType::f16 || *d == DType::bf16 || *d == DType::f32)) c.model_dtype_ = *d;

  auto qit = root.find("quantization_config");
  if (qit == root.end() || qit->is_null()) return c;
  const json& q = *qit;
  if (!q.is_object()) bad(origin, "expected an object");
  const std::string method = get_str(q, {"quant_method"}, "", origin);
  if (method.empty()) bad(origin, "missing 'quant_method'");

  LayerScheme s;
  s.kind = LayerScheme::Kind::quantized;
  if (method == "gptq") {
    s.bits = get_int(q, {"bits", "w_bit"}, 4, origin);
    s.group_size = normalize_group(get_int(q, {"group_size", "q_group_size"}, 128, origin));
    s.symmetric = get_bool(q, {"sym"}, true, origin);
    s.act_order = get_bool(q, {"desc_act"}, false, origin);
    const std::string fmt_ = get_str(q, {"checkpoint_format", "format"}, "gptq", origin);
    if (fmt_ == "gptq") s.packing = Packing::gptq_v1, s.format = Format::gptq;
    else if (fmt_ == "gptq_v2") s.packing = Packing::gptq_v2, s.format = Format::gptq_v2;
    else c.unsupported_ = fmt::format("checkpoint_format '{}' (quantization_config.checkpoint_format): nibble reads gptq and gptq_v2", fmt_);
    const std::string pack_dtype = get_str(q, {"pack_dtype"}, "int32", origin);
    if (pack_dtype != "int32" && pack_dtype != "torch.int32")
      c.unsupported_ = fmt::format("pack_dtype '{}' (quantization_config.pack_dtype): nibble reads int32 packing", pack_dtype);
    c.quantize_lm_head_ = get_bool(q, {"lm_head"}, false, origin);
    // GPTQModel "dynamic": {"-:regex": {}} skips layers, "+:regex" or "regex" overrides bits etc.
    if (auto dyn = q.find("dynamic"); dyn != q.end() && dyn->is_object()) {
      for (const auto& [key, val] : dyn->items()) {
        Override o;
        o.regex_search = true;
        o.origin = fmt::format("quantization_config.dynamic[\"{}\"]", key);
        o.skip = key.starts_with("-:");
        o.pattern = key.starts_with("-:") || key.starts_with("+:") ? key.substr(2) : key;
        o.scheme = s;
        if (val.is_object()) {
          o.scheme.bits = get_int(val, {"bits"}, s.bits, origin);
          o.scheme.group_size = normalize_group(get_int(val, {"group_size"}, s.group_size, origin));
          o.scheme.symmetric = get_bool(val, {"sym"}, s.symmetric, origin);
          o.scheme.act_order = get_bool(val, {"desc_act"}, s.act_order, origin);
        }
        c.overrides_.push_back(o);
      }
    }
    c.format_ = s.format;
  } else if (method == "awq") {
    s.format = Format::awq;
    s.packing = Packing::awq_gemm;
    s.bits = get_int(q, {"bits", "w_bit"}, 4, origin);
    s.group_size = normalize_group(get_int(q, {"group_size", "q_group_size"}, 128, origin));
    s.symmetric = !get_bool(q, {"zero_point"}, true, origin);
    const std::string version = get_str(q, {"version"}, "gemm", origin);
    std::string v = version;
    for (auto& ch : v) ch = char(std::tolower(ch));
    if (v != "gemm")
      c.unsupported_ = fmt::format("AWQ version '{}' (quantization_config.version): nibble reads the gemm layout; "
                                   "gemv and gemv_fast pack weights differently", version);
    c.not_converted_ = get_list(q, "modules_to_not_convert", origin);
    c.format_ = Format::awq;
  } else if (method == "compressed-tensors") {
    c.format_ = Format::compressed_tensors;
    s.format = Format::compressed_tensors;
    s.packing = Packing::compressed_tensors;
    const std::string top_format = get_str(q, {"format"}, "", origin);
    c.ignore_ = get_list(q, "ignore", origin);
    auto groups = q.find("config_groups");
    if (groups == q.end() || !groups->is_object() || groups->empty()) bad(origin, "missing 'config_groups'");
    for (const auto& [gname, g] : groups->items()) {
      const std::string where = fmt::format("quantization_config.config_groups.{}", gname);
      if (!g.is_object()) bad(origin, fmt::format("{} must be an object", where));
      Override o;
      o.origin = where;
      o.scheme = s;
      const std::string fmt_g = get_str(g, {"format"}, top_format, origin);
      std::string unsupported;
      if (fmt_g != "pack-quantized")
        unsupported = fmt::format("format '{}' ({}.format): nibble reads pack-quantized", fmt_g, where);
      auto w = g.find("weights");
      if (w == g.end() || !w->is_object()) bad(origin, fmt::format("{}.weights missing", where));
      o.scheme.bits = get_int(*w, {"num_bits"}, 4, origin);
      const std::string type = get_str(*w, {"type"}, "int", origin);
      if (type != "int") unsupported = fmt::format("weights type '{}' ({}.weights.type): nibble runs integer weights", type, where);
      o.scheme.symmetric = get_bool(*w, {"symmetric"}, true, origin);
      const std::string strategy = get_str(*w, {"strategy"}, "group", origin);
      if (strategy == "group") o.scheme.group_size = normalize_group(get_int(*w, {"group_size"}, 128, origin));
      else if (strategy == "channel") o.scheme.group_size = -1;
      else unsupported = fmt::format("strategy '{}' ({}.weights.strategy): nibble runs group and channel", strategy, where);
      const std::string actorder = get_str(*w, {"actorder"}, "", origin);
      o.scheme.act_order = actorder == "group";
      if (!actorder.empty() && actorder != "group" && actorder != "weight" && actorder != "static")
        unsupported = fmt::format("actorder '{}' ({}.weights.actorder)", actorder, where);
      if (auto ia = g.find("input_activations"); ia != g.end() && !ia->is_null())
        unsupported = fmt::format("{}.input_activations is set (activations quantized): nibble runs 16-bit activations", where);
      if (!unsupported.empty()) {
        o.scheme.kind = LayerScheme::Kind::unsupported;
        o.scheme.reason = unsupported;
      }
      auto targets = get_list(g, "targets", origin);
      if (targets.empty()) bad(origin, fmt::format("{}.targets is empty", where));
      for (const auto& t : targets) {
        Override ot = o;
        ot.pattern = t;
        c.targets_.push_back(ot);
      }
    }
    c.summary_ = "compressed-tensors pack-quantized";
    if (!c.targets_.empty()) c.summary_ += ", " + scheme_summary(c.targets_.front().scheme);
    c.base_ = s;
    c.has_base_ = true;
    if (c.unsupported_.empty()) return c;
  } else if (method == "auto-round" || method == "auto_round" || method == "intel/auto-round") {
    s.format = Format::autoround;
    c.format_ = Format::autoround;
    s.bits = get_int(q, {"bits"}, 4, origin);
    s.group_size = normalize_group(get_int(q, {"group_size"}, 128, origin));
    s.symmetric = get_bool(q, {"sym"}, true, origin);
    s.act_order = get_bool(q, {"desc_act"}, false, origin);
    const std::string data_type = get_str(q, {"data_type"}, "int", origin);
    if (data_type != "int")
      c.unsupported_ = fmt::format("data_type '{}' (quantization_config.data_type): nibble runs integer weights", data_type);
    const std::string pf = get_str(q, {"packing_format"}, "auto_round:auto_gptq", origin);
    if (pf == "auto_round:auto_gptq" || pf == "auto_gptq") s.packing = Packing::gptq_v1;
    else if (pf == "auto_round:gptqmodel" || pf == "auto_round") s.packing = Packing::gptq_v2;
    else if (pf == "auto_round:auto_awq" || pf == "auto_awq") s.packing = Packing::awq_gemm;
    else c.unsupported_ = fmt::format("packing_format '{}' (quantization_config.packing_format)", pf);
    c.block_prefixes_ = get_list(q, "block_name_to_quantize", origin);
    if (auto ec = q.find("extra_config"); ec != q.end() && ec->is_object()) {
      for (const auto& [key, val] : ec->items()) {
        if (!val.is_object()) continue;
        Override o;
        o.pattern = key;
        o.regex_search = true;
        o.origin = fmt::format("quantization_config.extra_config[\"{}\"]", key);
        o.scheme = s;
        o.scheme.bits = get_int(val, {"bits"}, s.bits, origin);
        o.scheme.group_size = normalize_group(get_int(val, {"group_size"}, s.group_size, origin));
        o.scheme.symmetric = get_bool(val, {"sym"}, s.symmetric, origin);
        const std::string odt = get_str(val, {"data_type"}, data_type, origin);
        o.skip = o.scheme.bits >= 16;
        if (!o.skip && odt != "int") {
          o.scheme.kind = LayerScheme::Kind::unsupported;
          o.scheme.reason = fmt::format("data_type '{}' ({}.data_type)", odt, o.origin);
        }
        c.overrides_.push_back(o);
      }
    }
  } else {
    throw Error(Errc::unsupported,
                fmt::format("{}: quant_method '{}' (quantization_config.quant_method) is not one nibble reads "
                            "(gptq, awq, compressed-tensors, auto-round)", origin, method));
  }
  if (s.bits != 4 && c.unsupported_.empty())
    c.unsupported_ = fmt::format("{}-bit weights (quantization_config.bits): nibble runs 4-bit weights", s.bits);
  c.base_ = s;
  c.has_base_ = true;
  c.summary_ = fmt::format("{}, {}, {}", method, packing_name(s.packing), scheme_summary(s));
  return c;
}

LayerScheme QuantConfig::scheme_for(const std::string& name) const {
  LayerScheme un;
  un.kind = LayerScheme::Kind::unquantized;
  if (!has_base_) {
    un.reason = "the model has no quantization_config";
    return un;
  }
  if (!unsupported_.empty()) {
    LayerScheme s = base_;
    s.kind = LayerScheme::Kind::unsupported;
    s.reason = unsupported_;
    return s;
  }
  for (const auto& m : not_converted_)
    if (name.find(m) != std::string::npos) {
      un.reason = fmt::format("matches '{}' in quantization_config.modules_to_not_convert", m);
      return un;
    }
  for (const auto& m : ignore_)
    if (m == name || (m.starts_with("re:") && name_matches(m, name))) {
      un.reason = fmt::format("matches '{}' in quantization_config.ignore", m);
      return un;
    }
  if (base_.format == Format::compressed_tensors) {
    for (const auto& t : targets_) {
      const bool class_target = t.pattern == "Linear" || t.pattern.ends_with(".Linear") || t.pattern == "LinearBase";
      if (class_target || t.pattern == name || (t.pattern.starts_with("re:") && name_matches(t.pattern, name))) {
        if (class_target && is_lm_head(name)) continue;  // lm_head is only quantized when named
        LayerScheme ts = t.scheme;
        if (ts.kind == LayerScheme::Kind::quantized && ts.bits != 4) {
          ts.kind = LayerScheme::Kind::unsupported;
          ts.reason = fmt::format("{}-bit weights ({}.weights.num_bits): nibble runs 4-bit weights", ts.bits, t.origin);
        }
        return ts;
      }
    }
    un.reason = "matches no target of quantization_config.config_groups";
    return un;
  }
  if (is_lm_head(name) && !quantize_lm_head_) {
    un.reason = "lm_head is not quantized (quantization_config.lm_head is false)";
    return un;
  }
  if (!block_prefixes_.empty()) {
    bool inside = false;
    for (const auto& b : block_prefixes_) inside |= name.starts_with(b + ".") || name == b;
    if (!inside) {
      un.reason = fmt::format("outside quantization_config.block_name_to_quantize ({})", fmt::join(block_prefixes_, ", "));
      return un;
    }
  }
  LayerScheme s = base_;
  for (const auto& o : overrides_) {
    if (!search_match(o.pattern, name)) continue;
    if (o.skip) {
      un.reason = fmt::format("{} leaves it unquantized", o.origin);
      return un;
    }
    s = o.scheme;
    if (s.bits != 4 && s.kind == LayerScheme::Kind::quantized) {
      s.kind = LayerScheme::Kind::unsupported;
      s.reason = fmt::format("{}-bit weights ({}.bits): nibble runs 4-bit weights", s.bits, o.origin);
    }
  }
  return s;
}

}  // namespace nibble
