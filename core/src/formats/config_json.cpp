// Reading quantization_config keys: typed getters whose errors name the file and the key, and the
// checks every format's config shares (group sizes, patterns, bit widths).
#include <fmt/format.h>

#include "../input.h"
#include "../pattern.h"
#include "unit.h"

namespace nibble::detail {

using json = nlohmann::ordered_json;

void config_error(const std::string& origin, const std::string& what) {
  throw Error(Errc::format, fmt::format("{}: {}", origin, what));
}

int get_int(const json& q, std::initializer_list<const char*> keys, int fallback, const std::string& origin,
            const std::string& where, int lo, int hi) {
  for (const char* k : keys) {
    auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_number_integer())
      config_error(origin, fmt::format("{}.{}: expected an integer, found {}", where, k, printable_json(*it)));
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi)
      config_error(origin, fmt::format("{}.{}: expected an integer in [{}, {}], found {}", where, k, lo, hi, v));
    return int(v);
  }
  return fallback;
}

bool get_bool(const json& q, std::initializer_list<const char*> keys, bool fallback, const std::string& origin,
              const std::string& where) {
  for (const char* k : keys) {
    auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_boolean()) config_error(origin, fmt::format("{}.{}: expected true or false, found {}", where, k, printable_json(*it)));
    return it->get<bool>();
  }
  return fallback;
}

std::string get_str(const json& q, std::initializer_list<const char*> keys, const std::string& fallback,
                    const std::string& origin, const std::string& where) {
  for (const char* k : keys) {
    auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_string()) config_error(origin, fmt::format("{}.{}: expected a string, found {}", where, k, printable_json(*it)));
    return it->get<std::string>();
  }
  return fallback;
}

std::vector<std::string> get_list(const json& q, const char* key, const std::string& origin, const std::string& where) {
  std::vector<std::string> out;
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) return out;
  if (it->is_string()) {  // AutoRound writes block_name_to_quantize as "a,b"
    const std::string s = it->get<std::string>();
    std::size_t start = 0;
    while (start <= s.size()) {
      std::size_t end = s.find(',', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) out.push_back(s.substr(start, end - start));
      start = end + 1;
    }
    return out;
  }
  if (!it->is_array()) config_error(origin, fmt::format("{}.{}: expected a list of strings, found {}", where, key, printable_json(*it)));
  for (const auto& v : *it) {
    if (!v.is_string())
      config_error(origin, fmt::format("{}.{}: expected only strings, found {}", where, key, printable_json(v)));
    out.push_back(v.get<std::string>());
  }
  return out;
}

int get_group_size(const json& q, std::initializer_list<const char*> keys, int fallback, const std::string& origin,
                   const std::string& where) {
  const int g = get_int(q, keys, fallback, origin, where, -(1 << 20), 1 << 20);
  if (g == -1 || g > 0) return g;
  std::string key;
  for (const char* k : keys)
    if (q.contains(k) && !q.at(k).is_null()) {
      key = k;
      break;
    }
  config_error(origin, fmt::format("{}.{}: expected -1 (per channel) or a positive group size, found {}", where, key, g));
}

void check_pattern(const std::string& regex, const std::string& origin, const std::string& key) {
  if (const std::string why = regex_error(regex); !why.empty())
    config_error(origin, fmt::format("{}: invalid regular expression '{}': {}", key, printable(regex), why));
}

std::string bits_reason(int bits, std::initializer_list<int> widths, const std::string& key, const char* format) {
  for (int w : widths)
    if (w == bits) return {};
  return fmt::format("{}-bit weights ({}): nibble reads {} at {} bits", bits, key, format, fmt::join(widths, ", "));
}

}  // namespace nibble::detail
