// Policy: which backends may run which layers, from a TOML file (NIBBLE_CONFIG), the environment
// (NIBBLE_BACKEND) and the API. See docs/policy.md for the file format.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace nibble {

/// Rules that apply to one layer (or to every layer, for the top level).
struct PolicyRules {
  std::vector<std::string> prefer;  ///< tried first, in this order
  std::vector<std::string> deny;    ///< never used
  std::optional<std::string> pin;   ///< this backend first (and only it when strict)
  std::optional<bool> strict;       ///< no fallback past the pinned / preferred backends
};

/// A per-layer override: rules for layers whose name matches `pattern` (a glob with * and ?, or a
/// regular expression after a "re:" prefix, matched against the whole name).
struct LayerOverride {
  std::string pattern;
  PolicyRules rules;
};

struct Policy {
  PolicyRules global;
  std::vector<LayerOverride> layers;  ///< later entries win over earlier ones
  std::string source;                 ///< where it came from, for traces ("NIBBLE_CONFIG=...")

  /// The rules in force for `layer`: the global ones, then every matching override on top, in
  /// order: a non-empty `prefer` replaces the list so far, `deny` entries are added, and `pin` and
  /// `strict` replace the value so far when set.
  PolicyRules rules_for(const std::string& layer) const;

  /// Parses a policy TOML document; `origin` names it in error messages.
  static Policy parse_toml(const std::string& text, const std::string& origin);
  static Policy load_file(const std::filesystem::path& path);
  /// NIBBLE_CONFIG (a TOML file) if set, then NIBBLE_BACKEND (a strict pin) on top.
  static Policy from_environment();
  /// Adds a strict pin on top (what `--backend B` and NIBBLE_BACKEND mean).
  Policy& pin_strict(const std::string& backend);
};

/// True if `name` matches a glob (* ?) or a "re:" regular expression, over the whole name.
bool name_matches(const std::string& pattern, const std::string& name);

}  // namespace nibble
