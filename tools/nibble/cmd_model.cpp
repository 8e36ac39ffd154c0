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

json selection_json(const Selection& s) {
  json c = json::array();
  for (const auto& x : s.candidates) c.push_back({{"backend", x.backend}, {"verdict", verdict_name(x.verdict)}, {"reason", x.reason}});
  return {{"winner", s.backend ? json(s.backend->name()) : json(nullptr)}, {"candidates", c}, {"notes", s.notes}};
}

std::string scheme_str(const LayerScheme& s) {
  return fmt::format("{} {}-bit G{} {}{}", packing_name(s.packing), s.bits, s.group_size, s.symmetric ? "sym" : "asym",
                     s.act_order ? " act_order" : "");
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
  if (!o.json)
    fmt::print("model {}: {} ({} file{})\npolicy: {}\n\n", m.model, ckpt->config().summary(), ckpt->num_files(),
               ckpt->num_files() == 1 ? "" : "s", policy.source.empty() ? "default" : policy.source);
  for (const auto& e : ckpt->layers()) {
    if (!wanted(m, e.name)) continue;
    json l = {{"name", e.name}, {"k", e.k}, {"n", e.n}, {"status", kind_name(e.scheme.kind)}};
    if (e.scheme.kind != LayerScheme::Kind::quantized) {
      l["reason"] = e.scheme.reason;
      if (!o.json) fmt::print("{}  [{} x {}]  {}: {}\n", e.name, e.k, e.n, kind_name(e.scheme.kind), e.scheme.reason);
    } else {
      const LinearSpec spec = ckpt->spec_of(e, dtype);
      Selection sel = reg->select(spec, policy);
      no_backend += sel ? 0 : 1;
      l["scheme"] = scheme_str(e.scheme);
      l["spec"] = spec.summary();
      l["selection"] = selection_json(sel);
      if (!o.json)
        fmt::print("{}  [{} x {}]  {} ({})\n  -> {}\n{}", e.name, e.k, e.n, spec.summary(), scheme_str(e.scheme),
                   sel ? sel.backend->name() : std::string("NO BACKEND"), sel.trace());
    }
    out["layers"].push_back(l);
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
      out["layers"].push_back(l);
      continue;
    }
    try {
      CanonicalLinear w = ckpt->load(e.name, dtype);  // one layer in memory at a time
      Selection sel = reg->select(w.spec, policy);
      if (!sel) throw Error(Errc::no_backend, fmt::format("no backend can run it:\n{}", sel.trace()));
      auto prepared = sel.backend->prepare(w);
      Tensor x = random_activations(m.batch, w.spec.k, w.spec.act_dtype, 1234 + idx);
      Backend& b = *sel.backend;
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
    out["layers"].push_back(l);
  }
  out["total_time_us"] = total_us;
  out["failed"] = failed;
  if (o.json) fmt::print("{}\n", out.dump(2));
  else
    fmt::print("\n{} layer(s) ran in {:.1f} us ({:.1f} GB/s overall){}\n", ran, total_us,
               total_us > 0 ? total_bytes / total_us * 1e-3 : 0.0, failed ? fmt::format("; {} FAILED", failed) : "");
  return failed ? 1 : 0;
}

int cmd_verify(const CommonOptions& o, const ModelOptions& m) {
  auto ckpt = Checkpoint::open(m.model);
  auto ref = SafetensorsFile::open(m.reference);
  auto reg = open_registry();
  const Policy policy = make_policy(o);
  const DType act = parse_act_dtype(m.dtype).value_or(ckpt->config().model_dtype());
  std::set<std::string> layers;
  for (const auto& t : ref->tensors())
    if (t.name.ends_with(".codes")) layers.insert(t.name.substr(0, t.name.size() - 6));
  if (layers.empty()) throw Error(Errc::format, fmt::format("{}: no '<layer>.codes' tensors", m.reference));
  json out = {{"model", m.model}, {"reference", m.reference}, {"layers", json::array()}};
  int failed = 0;
  if (!o.json)
    fmt::print("{:<36} {:<11} {:>7} {:>12} {:>12} {:>9}  {}\n", "layer", "backend", "codes", "weight rel", "y err/tol",
               "y max err", "result");
  for (const auto& name : layers) {
    json l = {{"name", name}};
    bool ok = true;
    std::string backend = "-", why;
    double w_rel = 0, y_ratio = 0, y_err = 0;
    int64_t code_mismatch = -1;
    try {
      CanonicalLinear w = ckpt->load(name, act);
      const int64_t K = w.spec.k, N = w.spec.n;
      // codes: exactly the tool's stored codes (the reference is [N, K]).
      Tensor codes = ref->get(name + ".codes");
      if (codes.shape() != Shape{N, K}) throw Error(Errc::format, fmt::format("{}.codes: expected [{}, {}], found {}", name, N, K, shape_str(codes.shape())));
      code_mismatch = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) code_mismatch += w.code(k, n) != codes.data_as<uint8_t>()[n * K + k];
      // weight: the tool's own dequantization, to floating-point rounding.
      Tensor tw = ref->get(name + ".weight");
      if (tw.shape() != Shape{N, K}) throw Error(Errc::format, fmt::format("{}.weight: expected [{}, {}], found {}", name, N, K, shape_str(tw.shape())));
      int64_t w_bad = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const double want = tw.at(std::size_t(n * K + k)), got = w.weight(k, n);
          const double err = std::fabs(got - want), tol = 0x1p-10 * std::fabs(want) + 1e-9;
          w_rel = std::max(w_rel, err / (std::fabs(want) + 1e-30));
          w_bad += err > tol;
        }
      // y: x through the selected backend against the reference y.
      Tensor x = ref->get(name + ".x"), ty = ref->get(name + ".y");
      Selection sel = reg->select(w.spec, policy);
      if (!sel) throw Error(Errc::no_backend, fmt::format("no backend can run it:\n{}", sel.trace()));
      backend = sel.backend->name();
      Tensor y = sel.backend->prepare(w)->apply(x.to(act));
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
    out["layers"].push_back(l);
    if (!o.json)
      fmt::print("{:<36} {:<11} {:>7} {:>12.2e} {:>12.3f} {:>9.2e}  {}\n", name, backend,
                 code_mismatch < 0 ? std::string("-") : std::to_string(code_mismatch), w_rel, y_ratio, y_err,
                 ok ? std::string("ok") : "MISMATCH: " + why);
  }
  out["failed"] = failed;
  if (o.json) fmt::print("{}\n", out.dump(2));
  else fmt::print("{}\n", failed ? fmt::format("{} layer(s) FAILED", failed) : std::string("all layers match the reference"));
  return failed ? 1 : 0;
}

}  // namespace nibble::cli
