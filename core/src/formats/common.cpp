// What every format shares: checked tensor access, the spec's common parts, g_idx, the canonical
// codes, and the public entry points (describe_layer, canonicalize, pack_layer, lint_layer), which
// dispatch to the packing's unit.
#include <cmath>
#include <cstring>

#include "../input.h"
#include "unit.h"

namespace nibble {

namespace detail {

namespace {

std::string dtypes_str(std::initializer_list<DType> dtypes) {
  std::string names;
  for (DType d : dtypes) names += (names.empty() ? "" : "|") + std::string(dtype_name(d));
  return names;
}

std::string found_dtype(const TensorInfo& t) {
  return t.dtype == DType::invalid ? printable(t.dtype_name, 16) : std::string(dtype_name(t.dtype));
}

}  // namespace

void LayerTensors::fail(const std::string& suffix, const std::string& what, Errc code) const {
  throw TensorError(code, fmt::format("layer '{}': tensor '{}': {}", printable(layer), printable(name(suffix)), what),
                    name(suffix));
}

void LayerTensors::check(const std::string& suffix, const TensorInfo& t, std::initializer_list<DType> dtypes,
                         const Shape& shape, const std::string& note) const {
  bool ok = false;
  for (DType d : dtypes) ok |= t.dtype == d;
  if (!ok)
    fail(suffix, fmt::format("expected dtype {}, found {} {}", dtypes_str(dtypes), found_dtype(t), shape_str(t.shape)));
  if (!shape.empty() && t.shape != shape)
    fail(suffix, fmt::format("expected shape {}{}, found {}", shape_str(shape), note.empty() ? "" : " (" + note + ")",
                             shape_str(t.shape)));
}

const TensorInfo& LayerTensors::need(const std::string& suffix, std::initializer_list<DType> dtypes, const Shape& shape,
                                     const std::string& note) const {
  const TensorInfo* t = header(suffix);
  if (!t) fail(suffix, "missing from the checkpoint");
  check(suffix, *t, dtypes, shape, note);
  return *t;
}

const TensorInfo* LayerTensors::maybe(const std::string& suffix, std::initializer_list<DType> dtypes, const Shape& shape,
                                      const std::string& note) const {
  const TensorInfo* t = header(suffix);
  if (t) check(suffix, *t, dtypes, shape, note);
  return t;
}

void LayerTensors::need_rank(const std::string& suffix, const TensorInfo& t, std::size_t rank, const char* layout) const {
  if (t.shape.size() != rank)
    fail(suffix, fmt::format("expected rank {} {}, found {}", rank, layout, shape_str(t.shape)));
}

Tensor LayerTensors::data(const std::string& suffix) const {
  Tensor t = source.get(suffix);
  if (t.empty()) fail(suffix, "missing from the checkpoint");
  return t;
}

void need_bits(const LayerTensors& t, const LayerScheme& s, std::initializer_list<int> widths, const char* packing) {
  for (int w : widths)
    if (w == s.bits) return;
  throw Error(Errc::unsupported, fmt::format("layer '{}': {}-bit weights ({}): nibble reads the {} packing at {} bits",
                                             printable(t.layer), s.bits, s.origin, packing, fmt::join(widths, ", ")));
}

LinearSpec base_spec(const LayerTensors& t, const LayerScheme& scheme, int64_t k, int64_t n) {
  LinearSpec s;
  s.name = t.layer;
  s.k = k;
  s.n = n;
  s.bits = scheme.bits;
  s.group_size = scheme.group_size;
  s.format = scheme.format;
  s.weight_type = weight_type_of(scheme.bits, scheme.symmetric);
  if (k <= 0 || n <= 0 || k > (int64_t(1) << 31) || n > (int64_t(1) << 31))
    throw Error(Errc::format, fmt::format("layer '{}': expected K and N in [1, 2^31], found K = {}, N = {}",
                                          printable(t.layer), k, n));
  return s;
}

bool act_order_from(const LayerTensors& t, const LayerScheme& scheme, const LinearSpec& s, const char* suffix) {
  const TensorInfo* h = t.maybe(suffix, {DType::i32}, {s.k}, "K");
  if (!h) {
    if (scheme.act_order) t.fail(suffix, "missing, but the config promises act order (desc_act / actorder: group)");
    return false;
  }
  Tensor g = t.data(suffix);
  const int32_t* v = g.data_as<int32_t>();
  const int64_t G = s.effective_group(), ng = s.num_groups();
  bool trivial = true;
  for (int64_t k = 0; k < s.k; ++k) {
    if (v[k] < 0 || v[k] >= ng) t.fail(suffix, fmt::format("expected values in [0, {}), found {} at row {}", ng, v[k], k));
    trivial &= v[k] == k / G;
  }
  return !trivial;
}

Tensor canonical_g_idx(const LayerTensors& t, const LinearSpec& s, const char* suffix) {
  return s.act_order ? t.data(suffix) : Tensor();
}

Tensor canonical_codes(Tensor words, int64_t k, int bits) {
  words = words.as_dtype(DType::u32);
  const int64_t rows = words.dim(0), n = words.dim(1), used = k * bits - (rows - 1) * 32;
  if (used >= 32) return words;
  const uint32_t keep = (1u << used) - 1u;
  const uint32_t* last = words.data_as<uint32_t>() + (rows - 1) * n;
  bool clean = true;
  for (int64_t c = 0; c < n && clean; ++c) clean = (last[c] & ~keep) == 0;
  if (clean) return words;
  Tensor out = words.clone();
  uint32_t* l = out.mutable_data_as<uint32_t>() + (rows - 1) * n;
  for (int64_t c = 0; c < n; ++c) l[c] &= keep;
  return out;
}

}  // namespace detail

const char* packing_name(Packing p) noexcept {
  switch (p) {
    case Packing::gptq_v1: return "gptq (v1 zeros)";
    case Packing::gptq_v2: return "gptq_v2";
    case Packing::awq_gemm: return "awq gemm";
    case Packing::compressed_tensors: return "pack-quantized";
  }
  return "?";
}

TensorSource TensorSource::from_map(std::map<std::string, Tensor> tensors) {
  auto data = std::make_shared<std::map<std::string, Tensor>>(std::move(tensors));
  auto infos = std::make_shared<std::map<std::string, TensorInfo>>();
  for (const auto& [name, t] : *data) {
    TensorInfo i;
    i.name = name;
    i.dtype = t.dtype();
    i.dtype_name = safetensors_dtype_name(t.dtype());
    i.shape = t.shape();
    (*infos)[name] = std::move(i);
  }
  TensorSource s;
  s.info = [infos](const std::string& suffix) -> const TensorInfo* {
    auto it = infos->find(suffix);
    return it == infos->end() ? nullptr : &it->second;
  };
  s.get = [data](const std::string& suffix) {
    auto it = data->find(suffix);
    return it == data->end() ? Tensor() : it->second;
  };
  return s;
}

const char* primary_tensor_suffix(Packing p) noexcept { return detail::packing_unit(p).primary; }

const std::vector<std::string>& packing_tensor_suffixes(Packing p) { return detail::packing_unit(p).suffixes; }

namespace {

void need_quantized(const std::string& name, const LayerScheme& scheme) {
  if (scheme.kind != LayerScheme::Kind::quantized)
    throw Error(Errc::unsupported, fmt::format("layer '{}': not a quantized layer nibble runs: {}", detail::printable(name),
                                               scheme.reason));
}

void need_act_dtype(const std::string& name, DType act_dtype) {
  if (act_dtype != DType::f16 && act_dtype != DType::bf16 && act_dtype != DType::f32)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': activation dtype {} (expected f16, bf16 or f32)",
                                                    detail::printable(name), dtype_name(act_dtype)));
}

}  // namespace

LinearSpec describe_layer(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                          DType act_dtype) {
  need_quantized(name, scheme);
  need_act_dtype(name, act_dtype);
  detail::LayerTensors t{name, tensors};
  LinearSpec s = detail::packing_unit(scheme.packing).describe(t, scheme);
  s.act_dtype = act_dtype;
  s.has_bias = t.maybe("bias", {DType::f16, DType::bf16, DType::f32}, {s.n}, "N") != nullptr;
  return s;
}

CanonicalLinear canonicalize(const LayerScheme& scheme, const TensorSource& tensors, const LinearSpec& spec) {
  need_quantized(spec.name, scheme);
  detail::LayerTensors t{spec.name, tensors};
  CanonicalLinear w;
  w.spec = spec;
  detail::packing_unit(scheme.packing).read(t, scheme, w);
  if (spec.has_bias) w.bias = t.data("bias").to(spec.act_dtype);
  validate(w);
  return w;
}

CanonicalLinear canonicalize(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                             DType act_dtype) {
  return canonicalize(scheme, tensors, describe_layer(name, scheme, tensors, act_dtype));
}

std::vector<std::pair<std::string, Tensor>> pack_layer(const CanonicalLinear& w, Packing packing) {
  if (w.spec.parallel != Parallel::none)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': cannot write a tensor-parallel partition", w.spec.name));
  auto t = detail::packing_unit(packing).write(w, packing);
  if (!w.bias.empty()) t.emplace_back("bias", w.bias);
  return t;
}

std::vector<LintFinding> lint_layer(const std::string& name, const LayerScheme& scheme, const TensorSource& tensors,
                                    DType act_dtype) {
  std::vector<LintFinding> out;
  const auto add = [&](const std::string& tensor, const std::string& what) { out.push_back({name, tensor, what}); };
  // A refusal is a finding of the tensor it names (TensorError), else of the layer; true if none.
  const auto refused = [&](auto&& step) {
    try {
      step();
      return false;
    } catch (const TensorError& e) {
      add(e.tensor(), e.what());
    } catch (const Error& e) {
      add("", e.what());
    }
    return true;
  };
  detail::LayerTensors t{name, tensors};
  LinearSpec spec;
  if (refused([&] { spec = describe_layer(name, scheme, tensors, act_dtype); })) return out;
  const detail::PackingUnit& unit = detail::packing_unit(scheme.packing);  // describe_layer found it
  refused([&] {
    for (auto& f : unit.lint(t, scheme, spec)) add(f.tensor, f.what);
  });
  // Scales, as stored (describe checked their shape): zero ones zero their whole group; non-finite
  // ones poison every output, and the layer cannot load (canonicalize refuses it: not run again).
  // Positions are the tensor's own coordinates, whatever its orientation.
  bool loads = true;
  refused([&] {
    const Tensor sc = t.data(unit.scales);
    const int64_t ns = sc.numel(), cols = sc.ndim() == 2 ? sc.dim(1) : std::max<int64_t>(1, ns);
    int64_t zero = 0, bad = 0, first_bad = -1;
    for (int64_t i = 0; i < ns; ++i) {
      const double v = sc.at(std::size_t(i));
      zero += v == 0;
      if (!std::isfinite(v) && bad++ == 0) first_bad = i;
    }
    const std::string scales = t.name(unit.scales);
    if (bad)
      add(scales, fmt::format("{} non-finite scale(s) of {}, the first at [{}, {}] of {}: the layer cannot load", bad,
                              ns, first_bad / cols, first_bad % cols, shape_str(sc.shape())));
    loads = !bad;
    if (ns && zero == ns) add(scales, "every scale is zero: the layer's weights are all zero");
    else if (zero) add(scales, fmt::format("{} of {} scales are zero", zero, ns));
  });
  CanonicalLinear w;
  if (!loads || refused([&] { w = canonicalize(scheme, tensors, spec); })) return out;
  // Codes: a range that leaves half of the levels or more unused suggests another bit width.
  const int levels = 1 << spec.bits;
  std::vector<int64_t> hist(std::size_t(levels), 0);
  for (int64_t k = 0; k < spec.k; ++k)
    for (int64_t n = 0; n < spec.n; ++n) ++hist[w.code(k, n)];
  int lo = 0, hi = levels - 1;
  while (lo < levels && !hist[std::size_t(lo)]) ++lo;
  while (hi > 0 && !hist[std::size_t(hi)]) --hi;
  if (spec.k * spec.n >= 4 * levels && hi - lo + 1 <= levels / 2)
    add(t.name(unit.primary),
        fmt::format("the {}-bit codes use only {}..{} of 0..{}: quantized at another width, or packed wrongly?", spec.bits,
                    lo, hi, levels - 1));
  return out;
}

}  // namespace nibble
