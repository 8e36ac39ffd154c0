// Checkpoint: opening model directories (single file or sharded), finding layers and deriving
// each quantized layer's spec once, and loading one layer at a time into the canonical form.
#include "nibble/checkpoint.h"

#include <fmt/format.h>

#include <set>

#include "formats/unit.h"
#include "input.h"
#include "nibble/error.h"

namespace fs = std::filesystem;

namespace nibble {

namespace {

constexpr std::size_t kConfigLimit = 64u << 20, kIndexLimit = 256u << 20;

// Every tensor suffix some packing reads, and which packings mark a layer with which tensor.
const std::set<std::string>& packing_suffixes() {
  static const std::set<std::string> all = [] {
    std::set<std::string> s;
    for (const auto* f : detail::format_units())
      for (const auto* p : f->packings) s.insert(p->suffixes.begin(), p->suffixes.end());
    return s;
  }();
  return all;
}

const std::set<std::string>& primary_suffixes() {
  static const std::set<std::string> all = [] {
    std::set<std::string> s;
    for (const auto* f : detail::format_units())
      for (const auto* p : f->packings) s.insert(p->primary);
    return s;
  }();
  return all;
}

std::string join_suffixes(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, ", ")); }

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(uint8_t(a[i])) && std::isdigit(uint8_t(b[j]))) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(uint8_t(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(uint8_t(b[j2]))) ++j2;
      const std::string_view na(a.data() + i, i2 - i), nb(b.data() + j, j2 - j);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = i2, j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& origin) {
  const nlohmann::json j = detail::parse_json(text, origin);
  auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (!j.is_object() || wm == j.end() || !wm->is_object())
    throw Error(Errc::format, fmt::format("{}: expected an object with a 'weight_map' object", origin));
  std::map<std::string, std::string> out;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string())
      throw Error(Errc::format, fmt::format("{}: weight_map['{}'] is not a file name, found {}", origin,
                                            detail::printable(tensor), detail::printable_json(file)));
    const std::string fname = file.get<std::string>();
    if (fname.empty() || fname.find('/') != std::string::npos || fname.find('\\') != std::string::npos || fname == "." ||
        fname == ".." || fname.find('\0') != std::string::npos)
      throw Error(Errc::format, fmt::format("{}: weight_map['{}'] = '{}' is not a plain file name in the model directory",
                                            origin, detail::printable(tensor), detail::printable(fname)));
    out[tensor] = fname;
  }
  return out;
}

std::shared_ptr<Checkpoint> Checkpoint::open(const fs::path& dir) {
  auto c = std::shared_ptr<Checkpoint>(new Checkpoint);
  c->dir_ = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw Error(Errc::not_found, fmt::format("{}: not a directory{}", detail::printable(dir.string()),
                                             fs::exists(dir, ec) ? "" : " (it does not exist)"));
  const fs::path config = dir / "config.json";
  if (!fs::exists(config, ec))
    throw Error(Errc::not_found, fmt::format("{}: no config.json (it says how the layers are quantized)",
                                             detail::printable(dir.string())));
  c->config_ = QuantConfig::parse(detail::read_regular_file(config, kConfigLimit, "config.json"), config.string());

  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    std::map<std::string, std::size_t> shard_of_file;
    for (const auto& [tensor, fname] :
         parse_safetensors_index(detail::read_regular_file(index, kIndexLimit, "safetensors index"), index.string())) {
      auto it = shard_of_file.find(fname);
      if (it == shard_of_file.end()) {
        it = shard_of_file.emplace(fname, c->files_.size()).first;
        c->files_.push_back(SafetensorsFile::open(dir / fname));
      }
      if (!c->files_[it->second]->find(tensor))
        throw Error(Errc::format, fmt::format("{}: weight_map says '{}' is in {}, which has no such tensor", index.string(),
                                              detail::printable(tensor), detail::printable(fname)));
      c->where_[tensor] = it->second;
    }
    // A tensor a shard holds but the index does not name would never be found: say so.
    for (std::size_t f = 0; f < c->files_.size(); ++f)
      for (const auto& t : c->files_[f]->tensors())
        if (!c->where_.count(t.name))
          c->warnings_.push_back(fmt::format("tensor '{}' is in {} but not in model.safetensors.index.json: never read",
                                             detail::printable(t.name), detail::printable(c->files_[f]->origin())));
  } else if (fs::exists(single, ec)) {
    c->files_.push_back(SafetensorsFile::open(single));
    for (const auto& t : c->files_[0]->tensors()) c->where_[t.name] = 0;
  } else {
    throw Error(Errc::not_found, fmt::format("{}: no model.safetensors or model.safetensors.index.json", detail::printable(dir.string())));
  }

  // Group the tensors by layer prefix (everything before the last '.').
  std::map<std::string, std::vector<std::string>> by_layer;
  for (const auto& [name, idx] : c->where_) {
    const auto dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == name.size()) {
      c->warnings_.push_back(fmt::format("tensor '{}' has no layer prefix (<layer>.<tensor>): not part of any layer",
                                         detail::printable(name)));
      continue;
    }
    by_layer[name.substr(0, dot)].push_back(name.substr(dot + 1));
  }
  const auto& known = packing_suffixes();
  const auto& primaries = primary_suffixes();
  for (const auto& [name, suffixes] : by_layer) {
    std::vector<std::string> packed_parts, stray;
    bool has_primary = false, has_weight = false;
    for (const auto& s : suffixes) {
      has_primary |= primaries.count(s) > 0;
      has_weight |= s == "weight";
      if (known.count(s)) packed_parts.push_back(s);
    }
    LayerEntry e;
    e.name = name;
    if (has_primary) {
      e.scheme = c->config_.scheme_for(name);
      if (e.scheme.kind == LayerScheme::Kind::unquantized) {
        e.scheme.kind = LayerScheme::Kind::unsupported;
        e.scheme.reason = fmt::format("has packed tensors ({}), but the config leaves it unquantized ({})",
                                      join_suffixes(packed_parts), e.scheme.reason);
      } else {
        const detail::PackingUnit& unit = detail::packing_unit(e.scheme.packing);
        if (!std::count(suffixes.begin(), suffixes.end(), unit.primary)) {
          e.scheme.kind = LayerScheme::Kind::unsupported;
          e.scheme.reason = fmt::format("stored with tensors {}, but the config's packing ({}) marks a layer by '{}'",
                                        join_suffixes(packed_parts), packing_name(e.scheme.packing), unit.primary);
        }
        for (const auto& s : suffixes)
          if (s != "bias" && !std::count(unit.suffixes.begin(), unit.suffixes.end(), s))
            stray.push_back(s);
      }
      if (e.scheme.kind == LayerScheme::Kind::quantized) {
        try {
          e.spec = describe_layer(name, e.scheme, c->source_for(name), c->config_.model_dtype());
          e.k = e.spec.k;
          e.n = e.spec.n;
        } catch (const Error& err) {
          e.scheme.kind = LayerScheme::Kind::unsupported;
          e.scheme.reason = err.what();
          if (const auto* te = dynamic_cast<const TensorError*>(&err)) e.scheme.reason_tensor = te->tensor();
        }
      }
      for (const auto& s : stray)
        c->warnings_.push_back(fmt::format("layer '{}': tensor '{}.{}' is not part of its {} packing: not read",
                                           detail::printable(name), detail::printable(name), detail::printable(s),
                                           packing_name(e.scheme.packing)));
    } else if (!packed_parts.empty()) {
      // Scales, zero points or an index without the packed weight they belong to.
      e.scheme = c->config_.scheme_for(name);
      e.scheme.kind = LayerScheme::Kind::unsupported;
      e.scheme.reason = fmt::format("has tensors {} but no {}: its packed weight is missing from the checkpoint",
                                    join_suffixes(packed_parts), fmt::format("{}", fmt::join(primaries, " or ")));
      if (has_weight)
        if (const TensorInfo* w = c->tensor_info(name + ".weight"))
          e.scheme.reason += fmt::format(" (its 'weight' is {} {})", detail::printable(w->dtype_name, 16), shape_str(w->shape));
    } else if (has_weight) {
      const TensorInfo* w = c->tensor_info(name + ".weight");
      if (!w || w->shape.size() != 2 || !is_float(w->dtype)) continue;  // norms, embeddings of other ranks
      e.scheme = c->config_.scheme_for(name);
      if (e.scheme.kind != LayerScheme::Kind::unquantized) {
        e.scheme.kind = LayerScheme::Kind::unquantized;
        e.scheme.reason = "stored as a 16-bit weight (no packed tensors)";
      }
      e.n = w->shape[0];
      e.k = w->shape[1];
    } else {
      // Not a linear layer (rotary tables, buffers): only a non-float tensor deserves a word.
      for (const auto& s : suffixes)
        if (const TensorInfo* t = c->tensor_info(name + "." + s); t && !is_float(t->dtype))
          c->warnings_.push_back(fmt::format("tensor '{}.{}' ({} {}) is not part of any layer nibble reads",
                                             detail::printable(name), detail::printable(s),
                                             detail::printable(t->dtype_name, 16), shape_str(t->shape)));
      continue;
    }
    c->layers_.push_back(std::move(e));
  }
  // Sorted through indices: an entry is large, a move of it costs more than a comparison.
  std::vector<std::size_t> order(c->layers_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return natural_less(c->layers_[a].name, c->layers_[b].name); });
  std::vector<LayerEntry> sorted;
  sorted.reserve(order.size());
  for (std::size_t i : order) sorted.push_back(std::move(c->layers_[i]));
  c->layers_ = std::move(sorted);
  c->layer_index_.reserve(c->layers_.size());
  for (std::size_t i = 0; i < c->layers_.size(); ++i) c->layer_index_.emplace(c->layers_[i].name, i);
  c->lookup_steps_.store(0);
  return c;
}

const LayerEntry* Checkpoint::find_layer(const std::string& name) const {
  lookup_steps_.fetch_add(1, std::memory_order_relaxed);
  auto it = layer_index_.find(name);
  return it == layer_index_.end() ? nullptr : &layers_[it->second];
}

const TensorInfo* Checkpoint::tensor_info(const std::string& name) const {
  lookup_steps_.fetch_add(1, std::memory_order_relaxed);
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second]->find(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  lookup_steps_.fetch_add(1, std::memory_order_relaxed);
  auto it = where_.find(name);
  return it == where_.end() ? Tensor() : files_[it->second]->get(name);
}

TensorSource Checkpoint::source_for(const std::string& layer) const {
  TensorSource s;
  s.info = [this, layer](const std::string& suffix) { return tensor_info(layer + "." + suffix); };
  s.get = [this, layer](const std::string& suffix) { return tensor(layer + "." + suffix); };
  return s;
}

LinearSpec Checkpoint::spec_of(const LayerEntry& e, std::optional<DType> act_dtype) const {
  if (e.scheme.kind != LayerScheme::Kind::quantized)
    throw Error(Errc::unsupported, fmt::format("layer '{}': {}: {}", detail::printable(e.name),
                                               e.scheme.kind == LayerScheme::Kind::unquantized ? "not quantized" : "unsupported",
                                               e.scheme.reason));
  LinearSpec s = e.spec;
  s.act_dtype = act_dtype.value_or(config_.model_dtype());
  if (s.act_dtype != DType::f16 && s.act_dtype != DType::bf16 && s.act_dtype != DType::f32)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': activation dtype {} (expected f16, bf16 or f32)",
                                                    detail::printable(e.name), dtype_name(s.act_dtype)));
  return s;
}

CanonicalLinear Checkpoint::load(const std::string& layer, std::optional<DType> act_dtype) const {
  const LayerEntry* e = find_layer(layer);
  if (!e) throw Error(Errc::not_found, fmt::format("{}: no layer '{}'", detail::printable(dir_.string()), detail::printable(layer)));
  return canonicalize(e->scheme, source_for(layer), spec_of(*e, act_dtype));
}

std::vector<LintFinding> Checkpoint::lint(const LayerEntry& e) const {
  if (e.scheme.kind == LayerScheme::Kind::unquantized) return {};
  if (e.scheme.kind == LayerScheme::Kind::unsupported) return {{e.name, e.scheme.reason_tensor, e.scheme.reason}};
  return lint_layer(e.name, e.scheme, source_for(e.name), config_.model_dtype());
}

}  // namespace nibble
