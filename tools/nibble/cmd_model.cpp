// nibble explain / run / verify: a checkpoint's layers through the registry's choice of backend.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "cli.h"
#include "nibble/checkpoint.h"
#include "nibble/safetensors.h"

namespace nibble::cli {

namespace {

using json = nlohmann::ordered_json;

const char* kind_name(LayerScheme::Kind k) {
  switch (k) {
    case LayerScheme::Kind::quantized: return "quantized";
    case LayerScheme::Kind::unquantized: return "unquantized";
    case LayerScheme::Kind::unsupported: return "unsupported";
  }
  return "?";
}

bool wanted(const ModelOptions& m, const std::string& name) { return m.layer.empty() || name_matches(m.layer, name); }

// --layer: a pattern that does not compile, or that no layer matches, is an error (a filter that
// silently selects nothing would read as a clean run).
void check_layer_filter(const ModelOptions& m, const Checkpoint& c) {
  if (m.layer.empty()) return;
  try {
    name_matches(m.layer, "");
  } catch (const Error& e) {
    throw Error(Errc::invalid_argument, fmt::format("--layer '{}': {}", m.layer, e.what()));
  }
  for (const auto& l : c.layers())
    if (wanted(m, l.name)) return;
  throw Error(Errc::invalid_argument, fmt::format("--layer '{}' matches no layer of {} ({} layers)", m.layer, m.model,
                                                  c.layers().size()));
}

// The checkpoint's warnings (tensors no layer reads), on stderr or into the JSON.
void report_warnings(const Checkpoint& c, bool as_json, json& out) {
  out["warnings"] = c.warnings();
  if (!as_json)
    for (const auto& w : c.warnings()) fmt::print(stderr, "warning: {}\n", w);
}

json selection_json(const Selection& s) {
  json c = json::array();
  for (const auto& x : s.candidates) c.push_back({{"backend", x.backend}, {"verdict", verdict_name(x.verdict)}, {"reason", x.reason}});
  return {{"winner", s.backend ? json(s.backend->name()) : json(nullptr)}, {"candidates", c}, {"notes", s.notes}};
}

std::string scheme_str(const LayerScheme& s) {
  return fmt::format("{} {}-bit G{} {}{}", packing_name(s.packing), s.bits, s.group_size, s.symmetric ? "sym" : "asym",
                     s.act_order ? " act_order" : "");
}

// The layer's spec for selection, as the checkpoint derived it.
json spec_json(const LinearSpec& s) {
  return {{"bits", s.bits}, {"weight_type", weight_type_name(s.weight_type)}, {"group_size", s.group_size},
          {"act_order", s.act_order}, {"act_dtype", std::string(dtype_name(s.act_dtype))},
          {"scale_dtype", std::string(dtype_name(s.scale_dtype))}, {"bias", s.has_bias}};
}

}  // namespace

int cmd_explain(const CommonOptions& o, const ModelOptions& m) {
  auto ckpt = Checkpoint::open(m.model);
  auto reg = open_registry();
  const Policy policy = make_policy(o);
  const auto dtype = parse_act_dtype(m.dtype);
  json out = {{"model", m.model}, {"quantization", ckpt->config().summary()}, {"files", ckpt->num_files()},
              {"policy", policy.source.empty() ? "default" : policy.source}, {"layers", json::array()}};
  int no_backend = 0;
  check_layer_filter(m, *ckpt);
  report_warnings(*ckpt, o.json, out);
  if (!o.json)
    fmt::print("model {}: {} ({} file{})\npolicy: {}\n\n", m.model, ckpt->config().summary(), ckpt->num_files(),
               ckpt->num_files() == 1 ? "" : "s", policy.source.empty() ? "default" : policy.source);
  for (const auto& e : ckpt->layers()) {
    if (!wanted(m, e.name)) continue;
    if (e.scheme.kind != LayerScheme::Kind::quantized) {
      if (o.json)
        out["layers"].push_back({{"name", e.name}, {"k", e.k}, {"n", e.n}, {"status", kind_name(e.scheme.kind)},
                                 {"reason", e.scheme.reason}});
      else
        fmt::print("{}  [{} x {}]  {}: {}\n", e.name, e.k, e.n, kind_name(e.scheme.kind), e.scheme.reason);
      continue;
    }
    const LinearSpec spec = ckpt->spec_of(e, dtype);
    Selection sel = reg->select(spec, policy);
    no_backend += sel ? 0 : 1;
    if (o.json)
      out["layers"].push_back({{"name", e.name}, {"k", e.k}, {"n", e.n}, {"status", kind_name(e.scheme.kind)},
                               {"scheme", scheme_str(e.scheme)}, {"bits", spec.bits}, {"spec", spec.summary()},
                               {"spec_fields", spec_json(spec)}, {"selection", selection_json(sel)}});
    else
      fmt::print("{}  [{} x {}]  {} ({})\n  -> {}\n{}", e.name, e.k, e.n, spec.summary(), scheme_str(e.scheme),
                 sel ? sel.backend->name() : std::string("NO BACKEND"), sel.trace());
  }
  if (o.json) fmt::print("{}\n", out.dump(2));
  return no_backend ? 1 : 0;
}

int cmd_run(const CommonOptions& o, const ModelOptions& m) {
  if (m.batch < 1) throw Error(Errc::invalid_argument, fmt::format("--batch: expected >= 1, found {}", m.batch));
  auto ckpt = Checkpoint::open(m.model);
  auto reg = open_registry();
  const Policy policy = make_policy(o);
  const auto dtype = parse_act_dtype(m.dtype);
  json out = {{"model", m.model}, {"quantization", ckpt->config().summary()}, {"batch", m.batch}, {"layers", json::array()}};
  int failed = 0, ran = 0;
  check_layer_filter(m, *ckpt);
  report_warnings(*ckpt, o.json, out);
  double total_us = 0, total_bytes = 0;
  if (!o.json) {
    fmt::print("model {}: {}\nbatch M = {}\n\n", m.model, ckpt->config().summary(), m.batch);
    fmt::print("{:<40} {:>6} {:>6}  {:<11} {:<16} {:>10} {:>8}{}\n", "layer", "K", "N", "backend", "kernel", "time us",
               "GB/s", m.check ? "  check" : "");
  }
  std::size_t idx = 0;
  for (const auto& e : ckpt->layers()) {
    ++idx;
    if (!wanted(m, e.name)) continue;
    json l = {{"name", e.name}, {"k", e.k}, {"n", e.n}, {"status", kind_name(e.scheme.kind)}};
    if (e.scheme.kind != LayerScheme::Kind::quantized) {
      l["reason"] = e.scheme.reason;
      if (e.scheme.kind == LayerScheme::Kind::unsupported) ++failed;
      if (!o.json) fmt::print("{:<40} {:>6} {:>6}  {}: {}\n", e.name, e.k, e.n, kind_name(e.scheme.kind), e.scheme.reason);
      out["layers"].push_back(std::move(l));
      continue;
    }
    try {
      CanonicalLinear w = ckpt->load(e.name, dtype);  // one layer in memory at a time
      // The first candidate whose process_weights succeeds (a failure is in the trace).
      PreparedSelection ps = reg->select_and_prepare(w, policy);
      if (!ps) throw Error(Errc::no_backend, fmt::format("no backend can run it:\n{}", ps.selection.trace()));
      auto prepared = ps.prepared;
      Tensor x = random_activations(m.batch, w.spec.k, w.spec.act_dtype, 1234 + idx);
      Backend& b = prepared->backend();
      DeviceBuffer dx = b.alloc(x.nbytes()), dy = b.alloc(std::size_t(m.batch * w.spec.n) * dtype_size(w.spec.act_dtype));
      dx.upload(x.data(), x.nbytes());
      const double us = time_apply(*prepared, dx.get(), dy.get(), m.batch, m.iters);
      const double bytes = layer_bytes(w.spec, m.batch);
      total_us += us;
      total_bytes += bytes;
      ++ran;
      l["backend"] = b.name();
      l["kernel"] = prepared->kernel_name(m.batch);
      l["time_us"] = us;
      l["gb_per_s"] = bytes / us * 1e-3;
      std::string check;
      if (m.check) {
        Tensor y = Tensor::zeros(w.spec.act_dtype, {m.batch, w.spec.n});
        dy.download(y.mutable_data(), y.nbytes());
        Comparison c = compare_to_reference(y, reference_linear(w, x), reference_magnitude(w, x), w.spec.act_dtype);
        check = c.ok ? "  ok" : fmt::format("  MISMATCH ({} elements, {:.1f}x tolerance)", c.failures, c.max_rel_to_tol);
        l["check"] = c.ok;
        if (!c.ok) ++failed;
      }
      if (!o.json)
        fmt::print("{:<40} {:>6} {:>6}  {:<11} {:<16} {:>10.1f} {:>8.1f}{}\n", e.name, e.k, e.n, b.name(),
                   prepared->kernel_name(m.batch), us, bytes / us * 1e-3, check);
    } catch (const Error& err) {
      ++failed;
      l["error"] = err.what();
      if (!o.json) fmt::print("{:<40} {:>6} {:>6}  ERROR: {}\n", e.name, e.k, e.n, err.what());
    }
    out["layers"].push_back(std::move(l));
  }
  out["total_time_us"] = total_us;
  out["failed"] = failed;
  if (o.json) fmt::print("{}\n", out.dump(2));
  else
    fmt::print("\n{} layer(s) ran in {:.1f} us ({:.1f} GB/s overall){}\n", ran, total_us,
               total_us > 0 ? total_bytes / total_us * 1e-3 : 0.0, failed ? fmt::format("; {} FAILED", failed) : "");
  return failed ? 1 : 0;
}

// The first non-finite element of a reference tensor, as "NaN at [r, c]", or "".
std::string non_finite(const Tensor& t) {
  const int64_t cols = t.ndim() == 2 ? t.dim(1) : t.numel();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (const double v = t.at(std::size_t(i)); !std::isfinite(v))
      return fmt::format("{} at [{}, {}]", std::isnan(v) ? "NaN" : "Inf", i / cols, i % cols);
  return {};
}

int cmd_verify(const CommonOptions& o, const ModelOptions& m) {
  if (m.reference.empty()) return cmd_lint(o, m);
  auto ckpt = Checkpoint::open(m.model);
  check_layer_filter(m, *ckpt);
  auto ref = SafetensorsFile::open(m.reference);
  auto reg = open_registry();
  const Policy policy = make_policy(o);
  const DType act = parse_act_dtype(m.dtype).value_or(ckpt->config().model_dtype());
  // What is checked: every layer the reference has and every quantized layer of the model (both
  // within --layer). A layer on one side only is a failure, never a silent pass.
  std::set<std::string> in_ref, names;
  for (const auto& t : ref->tensors())
    if (t.name.ends_with(".codes")) in_ref.insert(t.name.substr(0, t.name.size() - 6));
  for (const auto& n : in_ref)
    if (wanted(m, n)) names.insert(n);
  for (const auto& e : ckpt->layers())
    if (e.scheme.kind != LayerScheme::Kind::unquantized && wanted(m, e.name)) names.insert(e.name);
  if (names.empty())
    throw Error(Errc::not_found, fmt::format("nothing to verify: {} has no '<layer>.codes' tensors{} and the model no "
                                             "quantized layers", m.reference, m.layer.empty() ? "" : " matching --layer"));
  json out = {{"model", m.model}, {"reference", m.reference}, {"layers", json::array()}};
  report_warnings(*ckpt, o.json, out);
  int failed = 0;
  if (!o.json)
    fmt::print("{:<36} {:<11} {:>7} {:>12} {:>12} {:>9}  {}\n", "layer", "backend", "codes", "weight rel", "y err/tol",
               "y max err", "result");
  for (const auto& name : names) {
    json l = {{"name", name}};
    bool ok = true;
    std::string backend = "-", why;
    double w_rel = 0, y_ratio = 0, y_err = 0;
    int64_t code_mismatch = -1;
    try {
      const LayerEntry* e = ckpt->find_layer(name);
      if (!e) throw Error(Errc::not_found, fmt::format("in {} but not a layer of the model", m.reference));
      if (e->scheme.kind == LayerScheme::Kind::unquantized)
        throw Error(Errc::not_found, fmt::format("in {} but not quantized in the model ({})", m.reference, e->scheme.reason));
      if (!in_ref.count(name))
        throw Error(Errc::not_found, fmt::format("no reference tensors ('{}.codes', .weight, .x, .y) in {}: not checked", name,
                                                 m.reference));
      const auto need = [&](const char* suffix) {
        const std::string t = name + "." + suffix;
        if (!ref->find(t)) throw Error(Errc::not_found, fmt::format("{}: no tensor '{}'", m.reference, t));
        return ref->get(t);
      };
      Tensor codes = need("codes"), tw = need("weight"), x = need("x"), ty = need("y");
      for (const auto& [suffix, t] : {std::pair{"weight", &tw}, std::pair{"x", &x}, std::pair{"y", &ty}})
        if (!is_float(t->dtype()))
          throw Error(Errc::format, fmt::format("{}.{}: expected a float tensor, found {}", name, suffix, dtype_name(t->dtype())));
        else if (const std::string nf = non_finite(*t); !nf.empty())
          throw Error(Errc::format, fmt::format("{}.{}: the reference holds {}: nothing can match it", name, suffix, nf));
      CanonicalLinear w = ckpt->load(name, act);
      const int64_t K = w.spec.k, N = w.spec.n;
      // codes: exactly the tool's stored codes (the reference is [N, K]).
      if (codes.dtype() != DType::u8 || codes.shape() != Shape{N, K})
        throw Error(Errc::format, fmt::format("{}.codes: expected u8 [{}, {}], found {} {}", name, N, K,
                                              dtype_name(codes.dtype()), shape_str(codes.shape())));
      code_mismatch = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) code_mismatch += w.code(k, n) != codes.data_as<uint8_t>()[n * K + k];
      // weight: the tool's own dequantization, to floating-point rounding.
      if (tw.shape() != Shape{N, K})
        throw Error(Errc::format, fmt::format("{}.weight: expected [{}, {}], found {}", name, N, K, shape_str(tw.shape())));
      int64_t w_bad = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const double want = tw.at(std::size_t(n * K + k)), got = w.weight(k, n);
          const double err = std::fabs(got - want), tol = 0x1p-10 * std::fabs(want) + 1e-9;
          w_rel = std::max(w_rel, err / (std::fabs(want) + 1e-30));
          w_bad += err > tol;
        }
      // y: x through the selected backend against the reference y.
      if (x.ndim() != 2 || x.dim(1) != K)
        throw Error(Errc::format, fmt::format("{}.x: expected [M, {}], found {}", name, K, shape_str(x.shape())));
      if (ty.shape() != Shape{x.dim(0), N})
        throw Error(Errc::format, fmt::format("{}.y: expected [{}, {}], found {}", name, x.dim(0), N, shape_str(ty.shape())));
      PreparedSelection ps = reg->select_and_prepare(w, policy);
      if (!ps) throw Error(Errc::no_backend, fmt::format("no backend can run it:\n{}", ps.selection.trace()));
      backend = ps.prepared->backend().name();
      l["kernel"] = ps.prepared->kernel_name(x.dim(0));
      Tensor y = ps.prepared->apply(x.to(act));
      Comparison c = compare_to_reference(y, ty, reference_magnitude(w, x), act);
      y_ratio = c.max_rel_to_tol;
      y_err = c.max_abs_err;
      ok = code_mismatch == 0 && w_bad == 0 && c.ok;
      if (!ok)
        why = fmt::format("{} code(s) differ, {} weight(s) off, {} y element(s) out of tolerance", code_mismatch, w_bad, c.failures);
    } catch (const Error& e) {
      ok = false;
      why = e.what();
    }
    failed += ok ? 0 : 1;
    l["backend"] = backend;
    l["codes_mismatched"] = code_mismatch;
    l["weight_max_rel_err"] = w_rel;
    l["y_max_err_over_tolerance"] = y_ratio;
    l["y_max_abs_err"] = y_err;
    l["ok"] = ok;
    if (!why.empty()) l["error"] = why;
    out["layers"].push_back(std::move(l));
    if (!o.json)
      fmt::print("{:<36} {:<11} {:>7} {:>12.2e} {:>12.3f} {:>9.2e}  {}\n", name, backend,
                 code_mismatch < 0 ? std::string("-") : std::to_string(code_mismatch), w_rel, y_ratio, y_err,
                 ok ? std::string("ok") : "MISMATCH: " + why);
  }
  out["checked"] = names.size();
  out["failed"] = failed;
  if (o.json) fmt::print("{}\n", out.dump(2));
  else
    fmt::print("{}\n", failed ? fmt::format("{} of {} layer(s) FAILED", failed, names.size())
                              : fmt::format("all {} layer(s) match the reference", names.size()));
  return failed ? 1 : 0;
}

int cmd_lint(const CommonOptions& o, const ModelOptions& m) {
  auto ckpt = Checkpoint::open(m.model);
  check_layer_filter(m, *ckpt);
  json out = {{"model", m.model}, {"quantization", ckpt->config().summary()}, {"findings", json::array()}};
  report_warnings(*ckpt, true, out);  // printed below with the findings
  int64_t findings = 0, layers = 0;
  const auto add = [&](const std::string& layer, const std::string& tensor, const std::string& what) {
    ++findings;
    out["findings"].push_back({{"layer", layer}, {"tensor", tensor}, {"what", what}});
    if (!o.json) fmt::print("{}{}: {}\n", layer.empty() ? "" : layer, tensor.empty() ? "" : " [" + tensor + "]", what);
  };
  for (const auto& w : ckpt->warnings()) add("", "", w);
  for (const auto& e : ckpt->layers()) {
    if (e.scheme.kind == LayerScheme::Kind::unquantized || !wanted(m, e.name)) continue;
    ++layers;
    for (const auto& f : ckpt->lint(e)) add(f.layer, f.tensor, f.what);
  }
  out["layers_checked"] = layers;
  out["count"] = findings;
  if (o.json) fmt::print("{}\n", out.dump(2));
  else fmt::print("{} quantized layer(s) checked, {} finding(s)\n", layers, findings);
  return findings ? 1 : 0;
}

}  // namespace nibble::cli
