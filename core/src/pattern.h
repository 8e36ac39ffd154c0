// Regular expressions for names in configs and policies, with RE2: matching takes time linear in
// the name whatever the pattern, so a hostile `re:` pattern cannot hang the host (std::regex
// backtracks exponentially on patterns like "(a*)*b"; the policy fuzzer found one).
#pragma once

#include <string>

namespace nibble::detail {

/// True if the whole of `text` matches `pattern`. Throws Errc::format for an invalid pattern.
bool regex_full_match(const std::string& pattern, const std::string& text);
/// True if `pattern` matches somewhere in `text`; false for an invalid pattern.
bool regex_search(const std::string& pattern, const std::string& text);
/// True if `pattern` matches a prefix of `text` (Python's re.match); false for an invalid pattern.
bool regex_prefix_match(const std::string& pattern, const std::string& text);
/// Empty if `pattern` compiles, else RE2's reason.
std::string regex_error(const std::string& pattern);

}  // namespace nibble::detail
