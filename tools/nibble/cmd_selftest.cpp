// nibble selftest: random layers of every scheme through the selected backend, checked against
// the reference kernel. A quick way to see that a backend computes the right thing on this machine.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace nibble::cli {

int cmd_selftest(const CommonOptions& o, const std::string& dtype_s, uint64_t seed) {
  auto reg = open_registry();
  Policy policy = make_policy(o);
  auto dtype = parse_dtype(dtype_s);
  if (!dtype || !is_float(*dtype) || *dtype == DType::f64)
    throw Error(Errc::invalid_argument, fmt::format("--dtype: expected f16, bf16 or f32, found '{}'", dtype_s));
  struct Case { WeightType wt; int g; bool act_order, bias; int64_t k, n, m; };
  const Case cases[] = {
      {WeightType::uint4b8, 128, false, false, 512, 256, 1},
      {WeightType::uint4, 64, false, true, 320, 200, 3},
      {WeightType::uint4b8, 128, true, false, 384, 136, 17},
      {WeightType::uint4, 32, true, true, 256, 72, 5},
      {WeightType::uint4b8, -1, false, false, 200, 96, 64},
  };
  nlohmann::json out = nlohmann::json::array();
  int failures = 0;
  if (!o.json) fmt::print("{:<44} {:<12} {:>10} {:>8}  {}\n", "layer", "backend", "max|err|", "err/tol", "result");
  int idx = 0;
  for (const Case& c : cases) {
    LinearSpec s;
    s.name = fmt::format("selftest.{}", idx++);
    s.k = c.k; s.n = c.n; s.group_size = c.g; s.weight_type = c.wt; s.act_dtype = *dtype;
    s.scale_dtype = *dtype == DType::f32 ? DType::f16 : *dtype;
    s.act_order = c.act_order; s.has_bias = c.bias;
    Selection sel = reg->select(s, policy);
    std::string label = fmt::format("{} M={}", s.summary(), c.m);
    if (!sel) {
      ++failures;
      if (!o.json) fmt::print("{:<44} {:<12} {:>10} {:>8}  no backend\n{}", label, "-", "-", "-", sel.trace());
      out.push_back({{"layer", label}, {"ok", false}, {"error", "no backend"}, {"trace", sel.trace()}});
      continue;
    }
    CanonicalLinear w = random_canonical(s, seed + uint64_t(idx));
    Tensor x = random_activations(c.m, c.k, *dtype, seed + 100 + uint64_t(idx));
    auto prepared = sel.backend->prepare(w);
    Tensor y = prepared->apply(x);
    Comparison cmp = compare_to_reference(y, reference_linear(w, x), reference_magnitude(w, x), *dtype);
    failures += cmp.ok ? 0 : 1;
    if (!o.json)
      fmt::print("{:<44} {:<12} {:>10.3g} {:>8.3f}  {}\n", label, sel.backend->name(), cmp.max_abs_err,
                 cmp.max_rel_to_tol, cmp.ok ? "ok" : "MISMATCH");
    out.push_back({{"layer", label}, {"backend", sel.backend->name()}, {"ok", cmp.ok},
                   {"max_abs_err", cmp.max_abs_err}, {"err_over_tolerance", cmp.max_rel_to_tol}});
  }
  if (o.json) fmt::print("{}\n", out.dump(2));
  else fmt::print("{}\n", failures ? fmt::format("{} case(s) FAILED", failures) : std::string("all cases match the reference"));
  return failures ? 1 : 0;
}

}  // namespace nibble::cli
