// Selection: which backend runs a layer under a policy, every candidate's verdict, and the
// fallback past a backend whose process_weights fails.
#include <fmt/format.h>

#include <algorithm>

#include "nibble/error.h"
#include "nibble/registry.h"

namespace nibble {

const char* verdict_name(Verdict v) noexcept {
  switch (v) {
    case Verdict::selected: return "selected";
    case Verdict::viable: return "viable";
    case Verdict::denied: return "denied";
    case Verdict::not_considered: return "not considered";
    case Verdict::no_device: return "no device";
    case Verdict::unsupported: return "unsupported";
    case Verdict::cannot_implement: return "cannot implement";
    case Verdict::load_failed: return "load failed";
    case Verdict::prepare_failed: return "prepare failed";
  }
  return "?";
}

Selection Registry::select(const LinearSpec& spec, const Policy& policy) const {
  const PolicyRules rules = policy.rules_for(spec.name);
  const bool strict = rules.strict.value_or(false);
  Selection sel;
  sel.layer = spec.name;
  const std::string origin = policy.source.empty() ? std::string("policy") : policy.source;

  if (rules.pin && !find(*rules.pin))
    throw Error(Errc::no_backend, missing_backend(*rules.pin, "pinned by " + origin));
  for (const auto& p : rules.prefer)
    if (!find(p)) sel.notes.push_back(fmt::format("preferred backend '{}' does not exist", p));
  for (auto& r : search_remarks()) sel.notes.push_back(std::move(r));

  // Order: pin, then the prefer list, then priority (high first), then name.
  auto rank = [&](const Backend& b) -> std::pair<int, int> {
    if (rules.pin && b.name() == *rules.pin) return {0, 0};
    auto it = std::find(rules.prefer.begin(), rules.prefer.end(), b.name());
    if (it != rules.prefer.end()) return {1, int(it - rules.prefer.begin())};
    return {2, -b.priority()};
  };
  std::vector<std::shared_ptr<Backend>> order = backends_;
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    auto ra = rank(*a), rb = rank(*b);
    if (ra != rb) return ra < rb;
    return a->name() < b->name();
  });

  auto allowed_by_strict = [&](const Backend& b) {
    if (!strict) return true;
    if (rules.pin) return b.name() == *rules.pin;
    if (!rules.prefer.empty())
      return std::find(rules.prefer.begin(), rules.prefer.end(), b.name()) != rules.prefer.end();
    return true;
  };

  for (const auto& b : order) {
    Candidate c{b->name(), Verdict::viable, {}};
    if (std::find(rules.deny.begin(), rules.deny.end(), b->name()) != rules.deny.end()) {
      c.verdict = Verdict::denied;
      c.reason = fmt::format("denied by {}", origin);
    } else if (!allowed_by_strict(*b)) {
      c.verdict = Verdict::not_considered;
      c.reason = rules.pin ? fmt::format("strict pin to {} ({})", *rules.pin, origin)
                           : fmt::format("strict: only {} ({})", fmt::join(rules.prefer, ", "), origin);
    } else if (auto why = b->check_capabilities(spec); !why.empty()) {
      c.verdict = Verdict::unsupported;
      c.reason = why;
    } else if (const auto& pr = b->probe(); !pr.available) {
      c.verdict = Verdict::no_device;
      c.reason = pr.message;
    } else if (auto why2 = b->can_implement(spec); !why2.empty()) {
      c.verdict = Verdict::cannot_implement;
      c.reason = why2;
    } else if (!sel.backend) {
      c.verdict = Verdict::selected;
      c.reason = b->probe().message;
      sel.backend = b;
    } else {
      c.reason = fmt::format("could run it; {} came first", sel.backend->name());
    }
    sel.candidates.push_back(std::move(c));
  }
  for (const auto& s : skipped_)
    if (s.kind == SkippedFile::Kind::load_failed || s.kind == SkippedFile::Kind::refused)
      sel.candidates.push_back({s.path.filename().string(), Verdict::load_failed, s.reason});
  return sel;
}

std::shared_ptr<Backend> Registry::select_or_throw(const LinearSpec& spec, const Policy& policy) const {
  Selection sel = select(spec, policy);
  if (sel.backend) return sel.backend;
  throw Error(Errc::no_backend, fmt::format("no backend can run layer '{}' ({}):\n{}", spec.name,
                                            spec.summary(), sel.trace()));
}

PreparedSelection Registry::select_and_prepare(const CanonicalLinear& w, const Policy& policy, void* stream) const {
  validate(w);  // a malformed layer is the caller's error, not a reason to try another backend
  PreparedSelection out{nullptr, select(w.spec, policy)};
  Selection& sel = out.selection;
  sel.backend = nullptr;
  for (Candidate& c : sel.candidates) {
    if (c.verdict != Verdict::selected && c.verdict != Verdict::viable) continue;
    if (out.prepared) {
      c.verdict = Verdict::viable;
      c.reason = fmt::format("could run it; {} came first", sel.backend->name());
      continue;
    }
    const std::shared_ptr<Backend> b = find(c.backend);
    try {
      out.prepared = b->prepare_validated(w, stream);
      c.verdict = Verdict::selected;
      c.reason = b->probe().message;
      sel.backend = b;
    } catch (const Error& e) {
      c.verdict = Verdict::prepare_failed;
      c.reason = e.what();
    }
  }
  return out;
}

std::string Selection::trace() const {
  std::string s;
  for (const auto& n : notes) s += fmt::format("  note: {}\n", n);
  for (const auto& c : candidates)
    s += fmt::format("  {:<16} {:<16} {}\n", c.backend, verdict_name(c.verdict), c.reason);
  if (candidates.empty()) s += "  (no backends were found)\n";
  return s;
}

}  // namespace nibble
