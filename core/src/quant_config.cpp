// config.json -> QuantConfig: the format unit of its quant_method reads the quantization_config
// into rules (core/src/formats/), and scheme_for applies them to one layer name.
#include "nibble/quant_config.h"

#include <fmt/format.h>

#include "formats/unit.h"
#include "input.h"
#include "nibble/error.h"
#include "pattern.h"

namespace nibble {

using json = nlohmann::ordered_json;  // per-layer rules apply in file order

namespace {

// A rule's pattern against a layer name, as its format's loaders match it (the units chose the
// match and checked the patterns when the config was read).
bool rule_matches(const QuantConfig::Override& o, const std::string& name) {
  switch (o.match) {
    case QuantConfig::Match::exact: return o.pattern == name;
    case QuantConfig::Match::search: return detail::regex_search(o.pattern, name);
    case QuantConfig::Match::prefix: return detail::regex_prefix_match(o.pattern, name);
    case QuantConfig::Match::substring: return name.find(o.pattern) != std::string::npos;
    case QuantConfig::Match::every: return !(name == "lm_head" || name.ends_with(".lm_head"));
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
  for (std::size_t i = 0; i < c.rules_.overrides.size(); ++i) {
    const Override& o = c.rules_.overrides[i];
    if (o.match == Match::exact) c.exact_.emplace(o.pattern, i);
    else c.patterned_.push_back(i);
  }
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
  for (const auto& o : r.skips)
    if (rule_matches(o, name)) {
      un.reason = "matches " + o.origin;
      return un;
    }
  if (r.by_targets) {
    // By name first, in order; then class-wide (compressed-tensors' find_matched_target).
    for (bool every : {false, true})
      for (const auto& t : r.targets)
        if ((t.match == Match::every) == every && rule_matches(t, name)) return t.scheme;
    un.reason = r.targets_origin;
    return un;
  }
  // The override that decides, if any: a key equal to the name first where exact_first, else the
  // first in order that matches (an exact one by its index, the patterned ones in order).
  const QuantConfig::Override* hit = nullptr;
  bool exact = false;
  std::size_t first = r.overrides.size();
  if (auto it = exact_.find(name); it != exact_.end()) first = it->second;
  if (r.exact_first && first < r.overrides.size()) {
    hit = &r.overrides[first], exact = true;
  } else {
    for (std::size_t i : patterned_) {
      if (i > first) break;
      if (rule_matches(r.overrides[i], name)) {
        first = i;
        break;
      }
    }
    if (first < r.overrides.size()) hit = &r.overrides[first], exact = r.overrides[first].match == Match::exact;
  }
  const auto decided = [&](const QuantConfig::Override& o) {
    if (!o.skip) return o.scheme;
    un.reason = fmt::format("{} leaves it unquantized", o.origin);
    return un;
  };
  // Where the overrides reach past the scope rules, an exact key, or a matching one that sets the
  // width, decides for lm_head and layers outside the blocks too.
  if (hit && r.overrides_past_scope && (exact || hit->sets_bits)) return decided(*hit);
  if (is_lm_head(name) && !r.quantize_lm_head) {
    un.reason = r.lm_head_reason;
    return un;
  }
  if (!r.block_prefixes.empty()) {
    bool inside = false;
    for (const auto& b : r.block_prefixes) inside |= name.starts_with(b + ".") || name == b;
    if (!inside) {
      un.reason = fmt::format("outside {} ({})", r.blocks_origin,
                              detail::printable(fmt::format("{}", fmt::join(r.block_prefixes, ", "))));
      return un;
    }
  }
  return hit ? decided(*hit) : r.base;
}

}  // namespace nibble
