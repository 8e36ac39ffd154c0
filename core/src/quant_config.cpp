// config.json -> QuantConfig: the format unit of its quant_method reads the quantization_config
// into rules (core/src/formats/), and scheme_for applies them to one layer name.
#include "nibble/quant_config.h"

#include <fmt/format.h>

#include "formats/unit.h"
#include "input.h"
#include "nibble/error.h"
#include "nibble/policy.h"
#include "pattern.h"

namespace nibble {

using json = nlohmann::ordered_json;  // per-layer rules apply in file order

namespace {

// An AutoRound extra_config or GPTQModel dynamic key against a layer name, as the format's loaders
// match it (the patterns were checked when the config was read).
bool override_matches(const QuantConfig::Override& o, const std::string& name) {
  switch (o.match) {
    case QuantConfig::Match::exact: return o.pattern == name;
    case QuantConfig::Match::search: return detail::regex_search(o.pattern, name);
    case QuantConfig::Match::prefix: return detail::regex_prefix_match(o.pattern, name);
  }
  return false;
}

bool is_lm_head(const std::string& name) { return name == "lm_head" || name.ends_with(".lm_head"); }

}  // namespace

QuantConfig QuantConfig::parse(const std::string& text, const std::string& origin) {
  const json root = detail::parse_json_ordered(text, origin);
  if (!root.is_object()) throw Error(Errc::format, fmt::format("{}: expected a JSON object", origin));
  QuantConfig c;
  const std::string dt = detail::get_str(root, {"torch_dtype", "dtype"}, "float16", origin, "config");
  if (auto d = parse_dtype(dt); d && (*d == DType::f16 || *d == DType::bf16 || *d == DType::f32)) c.model_dtype_ = *d;

  auto qit = root.find("quantization_config");
  if (qit == root.end() || qit->is_null()) return c;
  const json& q = *qit;
  if (!q.is_object())
    throw Error(Errc::format, fmt::format("{}: quantization_config: expected an object, found {}", origin, detail::printable_json(q)));
  const std::string method = detail::get_str(q, {"quant_method"}, "", origin);
  if (method.empty()) throw Error(Errc::format, fmt::format("{}: quantization_config: missing 'quant_method'", origin));
  const detail::FormatUnit* unit = detail::format_for_method(method);
  if (!unit) {
    std::string known;
    for (const auto* f : detail::format_units()) known += (known.empty() ? "" : ", ") + std::string(f->name);
    throw Error(Errc::unsupported, fmt::format("{}: quant_method '{}' (quantization_config.quant_method) is not one nibble "
                                               "reads ({})", origin, detail::printable(method), known));
  }
  unit->parse_config(q, origin, c.rules_);
  return c;
}

LayerScheme QuantConfig::scheme_for(const std::string& name) const {
  const Rules& r = rules_;
  LayerScheme un;
  un.kind = LayerScheme::Kind::unquantized;
  if (!r.has_base) {
    un.reason = "the model has no quantization_config";
    return un;
  }
  if (!r.unsupported.empty()) {
    LayerScheme s = r.base;
    s.kind = LayerScheme::Kind::unsupported;
    s.reason = r.unsupported;
    return s;
  }
  for (const auto& m : r.not_converted)
    if (name.find(m) != std::string::npos) {
      un.reason = fmt::format("matches '{}' in quantization_config.modules_to_not_convert", detail::printable(m));
      return un;
    }
  for (const auto& m : r.ignore)
    if (m == name || (m.starts_with("re:") && name_matches(m, name))) {
      un.reason = fmt::format("matches '{}' in quantization_config.ignore", detail::printable(m));
      return un;
    }
  if (r.by_targets) {
    for (const auto& t : r.targets) {
      const bool class_target = t.pattern == "Linear" || t.pattern.ends_with(".Linear") || t.pattern == "LinearBase";
      if (class_target || t.pattern == name || (t.pattern.starts_with("re:") && name_matches(t.pattern, name))) {
        if (class_target && is_lm_head(name)) continue;  // lm_head is only quantized when named
        return t.scheme;
      }
    }
    un.reason = "matches no target of quantization_config.config_groups";
    return un;
  }
  if (is_lm_head(name) && !r.quantize_lm_head) {
    un.reason = "lm_head is not quantized (quantization_config.lm_head is false)";
    return un;
  }
  if (!r.block_prefixes.empty()) {
    bool inside = false;
    for (const auto& b : r.block_prefixes) inside |= name.starts_with(b + ".") || name == b;
    if (!inside) {
      un.reason = fmt::format("outside quantization_config.block_name_to_quantize ({})",
                              detail::printable(fmt::format("{}", fmt::join(r.block_prefixes, ", "))));
      return un;
    }
  }
  const QuantConfig::Override* hit = nullptr;
  if (r.exact_first)
    for (const auto& o : r.overrides)
      if (o.pattern == name) {
        hit = &o;
        break;
      }
  for (const auto& o : r.overrides)
    if (!hit && override_matches(o, name)) hit = &o;
  if (!hit) return r.base;
  if (hit->skip) {
    un.reason = fmt::format("{} leaves it unquantized", hit->origin);
    return un;
  }
  return hit->scheme;
}

}  // namespace nibble
