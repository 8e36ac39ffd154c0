// Policy: parsing the TOML file and resolving the rules that apply to one layer.
#include "nibble/policy.h"

#include <fmt/format.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

#include "nibble/error.h"
#include "input.h"
#include "pattern.h"

namespace nibble {

namespace {

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw Error(Errc::format, fmt::format("policy {}: {}", origin, what));
}

std::vector<std::string> string_list(const toml::node& node, const std::string& origin, const std::string& key) {
  std::vector<std::string> out;
  const toml::array* arr = node.as_array();
  if (!arr) {
    if (auto s = node.value<std::string>()) return {*s};
    bad(origin, fmt::format("'{}' must be a list of backend names", key));
  }
  for (const auto& el : *arr) {
    auto s = el.value<std::string>();
    if (!s) bad(origin, fmt::format("'{}' must hold only strings (backend names)", key));
    out.push_back(*s);
  }
  return out;
}

PolicyRules parse_rules(const toml::table& t, const std::string& origin, const std::string& where,
                        bool allow_match) {
  PolicyRules r;
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (key == "prefer") r.prefer = string_list(v, origin, where + key);
    else if (key == "deny") r.deny = string_list(v, origin, where + key);
    else if (key == "pin") {
      auto s = v.value<std::string>();
      if (!s) bad(origin, fmt::format("'{}pin' must be a backend name (string)", where));
      r.pin = *s;
    } else if (key == "strict") {
      auto b = v.value<bool>();
      if (!b) bad(origin, fmt::format("'{}strict' must be true or false", where));
      r.strict = *b;
    } else if (allow_match && key == "match") {
      continue;
    } else if (!allow_match && key == "layer") {
      continue;
    } else {
      bad(origin, fmt::format("unknown key '{}{}' (expected prefer, deny, pin, strict{})", where, detail::printable(key),
                              allow_match ? ", match" : ", [[layer]]"));
    }
  }
  return r;
}

std::string glob_to_regex(const std::string& glob) {
  std::string re;
  for (char c : glob) {
    if (c == '*') re += ".*";
    else if (c == '?') re += '.';
    else if (std::string("\\^$.|+()[]{}").find(c) != std::string::npos) { re += '\\'; re += c; }
    else re += c;
  }
  return re;
}

}  // namespace

bool name_matches(const std::string& pattern, const std::string& name) {
  if (pattern.rfind("re:", 0) == 0) return detail::regex_full_match(pattern.substr(3), name);
  return detail::regex_full_match(glob_to_regex(pattern), name);
}

PolicyRules Policy::rules_for(const std::string& layer) const {
  PolicyRules r = global;
  for (const auto& o : layers) {
    if (!name_matches(o.pattern, layer)) continue;
    if (!o.rules.prefer.empty()) r.prefer = o.rules.prefer;
    r.deny.insert(r.deny.end(), o.rules.deny.begin(), o.rules.deny.end());
    if (o.rules.pin) r.pin = o.rules.pin;
    if (o.rules.strict) r.strict = o.rules.strict;
  }
  return r;
}

Policy Policy::parse_toml(const std::string& text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    bad(origin, fmt::format("TOML syntax error at line {}, column {}: {}", e.source().begin.line,
                            e.source().begin.column, e.description()));
  }
  Policy p;
  p.source = origin;
  p.global = parse_rules(root, origin, "", false);
  if (const toml::node* layers = root.get("layer")) {
    const toml::array* arr = layers->as_array();
    if (!arr) bad(origin, "'layer' must be an array of tables ([[layer]])");
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::table* t = (*arr)[i].as_table();
      if (!t) bad(origin, fmt::format("layer[{}] must be a table", i));
      auto match = (*t)["match"].value<std::string>();
      if (!match || match->empty())
        bad(origin, fmt::format("layer[{}] needs 'match' (a glob or \"re:\" pattern of layer names)", i));
      // Reject a broken regex now, naming the file and the key, not at selection time.
      if (match->starts_with("re:"))
        if (const std::string why = detail::regex_error(match->substr(3)); !why.empty())
          bad(origin, fmt::format("layer[{}].match: invalid regular expression '{}': {}", i, detail::printable(*match), why));
      p.layers.push_back({*match, parse_rules(*t, origin, fmt::format("layer[{}].", i), true)});
    }
  }
  return p;
}

Policy Policy::load_file(const std::filesystem::path& path) {
  return parse_toml(detail::read_regular_file(path, 1u << 20, "policy"), path.string());
}

Policy Policy::from_environment() {
  Policy p;
  if (const char* cfg = std::getenv("NIBBLE_CONFIG"); cfg && *cfg) {
    p = load_file(cfg);
    p.source = fmt::format("NIBBLE_CONFIG={}", cfg);
  }
  if (const char* b = std::getenv("NIBBLE_BACKEND"); b && *b) {
    p.pin_strict(b);
    p.source = p.source.empty() ? fmt::format("NIBBLE_BACKEND={}", b)
                                : fmt::format("{} with NIBBLE_BACKEND={}", p.source, b);
  }
  return p;
}

Policy& Policy::pin_strict(const std::string& backend) {
  global.pin = backend;
  global.strict = true;
  // A strict pin overrides every per-layer pin too.
  for (auto& o : layers) o.rules.pin.reset(), o.rules.strict.reset();
  return *this;
}

}  // namespace nibble
