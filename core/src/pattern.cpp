#include "pattern.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <memory>
#include <unordered_map>

#include "nibble/error.h"

namespace nibble::detail {

namespace {

// Compiled patterns, per thread (RE2 objects are thread-safe, the map is not), bounded.
const RE2& compiled(const std::string& pattern) {
  thread_local std::unordered_map<std::string, std::unique_ptr<RE2>> cache;
  auto it = cache.find(pattern);
  if (it != cache.end()) return *it->second;
  if (cache.size() > 512) cache.clear();
  RE2::Options o;
  o.set_log_errors(false);
  o.set_max_mem(8 << 20);  // bounds the memory a pattern's automaton may take
  auto re = std::make_unique<RE2>(pattern, o);
  return *cache.emplace(pattern, std::move(re)).first->second;
}

}  // namespace

std::string regex_error(const std::string& pattern) {
  const RE2& re = compiled(pattern);
  return re.ok() ? std::string() : re.error();
}

bool regex_full_match(const std::string& pattern, const std::string& text) {
  const RE2& re = compiled(pattern);
  if (!re.ok()) throw Error(Errc::format, fmt::format("invalid pattern '{}': {}", pattern, re.error()));
  return RE2::FullMatch(text, re);
}

bool regex_search(const std::string& pattern, const std::string& text) {
  const RE2& re = compiled(pattern);
  return re.ok() && RE2::PartialMatch(text, re);
}

bool regex_prefix_match(const std::string& pattern, const std::string& text) {
  const RE2& re = compiled(pattern);
  return re.ok() && re.Match(text, 0, text.size(), RE2::ANCHOR_START, nullptr, 0);
}

}  // namespace nibble::detail
