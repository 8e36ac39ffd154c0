// Checkpoint: opening model directories (single file or sharded), finding layers, and loading one
// layer at a time into the canonical form.
#include "nibble/checkpoint.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "nibble/error.h"
#include "nibble/formats.h"

namespace fs = std::filesystem;

namespace nibble {

namespace {

std::string read_text(const fs::path& p, std::size_t limit) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(Errc::io, fmt::format("{}: cannot open", p.string()));
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  if (s.size() > limit) throw Error(Errc::limit, fmt::format("{}: larger than {} bytes", p.string(), limit));
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(uint8_t(a[i])) && std::isdigit(uint8_t(b[j]))) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(uint8_t(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(uint8_t(b[j2]))) ++j2;
      const std::string na = a.substr(i, i2 - i), nb = b.substr(j, j2 - j);
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
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::format, fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  auto wm = j.is_object() ? j.find("weight_map") : j.end();
  if (!j.is_object() || wm == j.end() || !wm->is_object())
    throw Error(Errc::format, fmt::format("{}: expected an object with a 'weight_map' object", origin));
  std::map<std::string, std::string> out;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) throw Error(Errc::format, fmt::format("{}: weight_map['{}'] is not a file name", origin, tensor));
    const std::string fname = file.get<std::string>();
    if (fname.empty() || fname.find('/') != std::string::npos || fname.find('\\') != std::string::npos || fname == "." ||
        fname == ".." || fname.find('\0') != std::string::npos)
      throw Error(Errc::format, fmt::format("{}: weight_map['{}'] = '{}' is not a plain file name in the model directory",
                                            origin, tensor, fname));
    out[tensor] = fname;
  }
  return out;
}

std::shared_ptr<Checkpoint> Checkpoint::open(const fs::path& dir) {
  auto c = std::shared_ptr<Checkpoint>(new Checkpoint);
  c->dir_ = dir;
  if (!fs::is_directory(dir)) throw Error(Errc::not_found, fmt::format("{}: not a directory", dir.string()));
  const fs::path config = dir / "config.json";
  if (!fs::exists(config))
    throw Error(Errc::not_found, fmt::format("{}: no config.json (it says how the layers are quantized)", dir.string()));
  c->config_ = QuantConfig::parse(read_text(config, 64u << 20), config.string());

  const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) {
    std::map<std::string, std::size_t> shard_of_file;
    for (const auto& [tensor, fname] : parse_safetensors_index(read_text(index, 256u << 20), index.string())) {
      auto it = shard_of_file.find(fname);
      if (it == shard_of_file.end()) {
        it = shard_of_file.emplace(fname, c->files_.size()).first;
        c->files_.push_back(SafetensorsFile::open(dir / fname));
      }
      if (!c->files_[it->second]->find(tensor))
        throw Error(Errc::format, fmt::format("{}: weight_map says '{}' is in {}, which has no such tensor", index.string(),
                                              tensor, fname));
      c->where_[tensor] = it->second;
    }
  } else if (fs::exists(single)) {
    c->files_.push_back(SafetensorsFile::open(single));
    for (const auto& t : c->files_[0]->tensors()) c->where_[t.name] = 0;
  } else {
    throw Error(Errc::not_found, fmt::format("{}: no model.safetensors or model.safetensors.index.json", dir.string()));
  }

  // Find layers: packed tensors mark quantized layers, 2-D float `.weight` tensors unquantized ones.
  std::set<std::string> packed, dense;
  for (const auto& [name, idx] : c->where_) {
    for (const char* suffix : {".qweight", ".weight_packed"})
      if (ends_with(name, suffix)) packed.insert(name.substr(0, name.size() - std::strlen(suffix)));
    if (ends_with(name, ".weight")) {
      const TensorInfo* ti = c->files_[idx]->find(name);
      if (ti->shape.size() == 2 && is_float(ti->dtype)) dense.insert(name.substr(0, name.size() - 7));
    }
  }
  for (const auto& name : packed) {
    LayerEntry e;
    e.name = name;
    e.scheme = c->config_.scheme_for(name);
    const bool ct = c->tensor_info(name + ".weight_packed") != nullptr;
    if (e.scheme.kind == LayerScheme::Kind::unquantized) {
      e.scheme.kind = LayerScheme::Kind::unsupported;
      e.scheme.reason = fmt::format("has packed tensors, but the config leaves it unquantized ({})", e.scheme.reason);
    } else if (e.scheme.kind == LayerScheme::Kind::quantized &&
               ct != (e.scheme.packing == Packing::compressed_tensors)) {
      e.scheme.kind = LayerScheme::Kind::unsupported;
      e.scheme.reason = fmt::format("stored with '{}' tensors, but the config's packing ({}) expects '{}'",
                                    ct ? "weight_packed" : "qweight", packing_name(e.scheme.packing),
                                    primary_tensor_suffix(e.scheme.packing));
    }
    // Shapes for listings, from the headers alone.
    if (const TensorInfo* q = c->tensor_info(name + ".qweight"); q && q->shape.size() == 2) {
      const bool awq = e.scheme.packing == Packing::awq_gemm;
      e.k = awq ? q->shape[0] : q->shape[0] * 8;
      e.n = awq ? q->shape[1] * 8 : q->shape[1];
      if (const TensorInfo* g = c->tensor_info(name + ".g_idx"); g && g->shape.size() == 1 && !awq) e.k = g->shape[0];
    } else if (const TensorInfo* p = c->tensor_info(name + ".weight_packed"); p && p->shape.size() == 2) {
      e.n = p->shape[0];
      e.k = p->shape[1] * 8;
      Tensor ws = c->tensor(name + ".weight_shape");
      if (ws.dtype() == DType::i32 && ws.numel() == 2) e.n = ws.data_as<int32_t>()[0], e.k = ws.data_as<int32_t>()[1];
    }
    c->layers_.push_back(std::move(e));
  }
  for (const auto& name : dense) {
    if (packed.count(name)) continue;
    LayerEntry e;
    e.name = name;
    e.scheme = c->config_.scheme_for(name);
    if (e.scheme.kind != LayerScheme::Kind::unquantized) {
      e.scheme.kind = LayerScheme::Kind::unquantized;
      e.scheme.reason = "stored as a 16-bit weight (no packed tensors)";
    }
    const TensorInfo* w = c->tensor_info(name + ".weight");
    e.n = w->shape[0];
    e.k = w->shape[1];
    c->layers_.push_back(std::move(e));
  }
  std::sort(c->layers_.begin(), c->layers_.end(), [](const auto& a, const auto& b) { return natural_less(a.name, b.name); });
  return c;
}

const LayerEntry* Checkpoint::find_layer(const std::string& name) const {
  for (const auto& l : layers_)
    if (l.name == name) return &l;
  return nullptr;
}

const TensorInfo* Checkpoint::tensor_info(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second]->find(name);
}

Tensor Checkpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? Tensor() : files_[it->second]->get(name);
}

LinearSpec Checkpoint::spec_of(const LayerEntry& e, std::optional<DType> act_dtype) const {
  LinearSpec s;
  s.name = e.name;
  s.k = e.k;
  s.n = e.n;
  s.bits = e.scheme.bits;
  s.group_size = e.scheme.group_size;
  s.weight_type = e.scheme.symmetric ? WeightType::uint4b8 : WeightType::uint4;
  s.act_dtype = act_dtype.value_or(config_.model_dtype());
  s.act_order = e.scheme.act_order;
  s.format = e.scheme.format;
  const TensorInfo* sc = tensor_info(e.name + (e.scheme.packing == Packing::compressed_tensors ? ".weight_scale" : ".scales"));
  s.scale_dtype = sc && is_float(sc->dtype) ? sc->dtype : DType::f16;
  s.has_bias = tensor_info(e.name + ".bias") != nullptr;
  return s;
}

CanonicalLinear Checkpoint::load(const std::string& layer, std::optional<DType> act_dtype) const {
  const LayerEntry* e = find_layer(layer);
  if (!e) throw Error(Errc::not_found, fmt::format("{}: no layer '{}'", dir_.string(), layer));
  if (e->scheme.kind != LayerScheme::Kind::quantized)
    throw Error(Errc::unsupported, fmt::format("layer '{}': {}: {}", layer,
                                               e->scheme.kind == LayerScheme::Kind::unquantized ? "not quantized" : "unsupported",
                                               e->scheme.reason));
  return canonicalize(layer, e->scheme, [&](const std::string& suffix) { return tensor(layer + "." + suffix); },
                      act_dtype.value_or(config_.model_dtype()));
}

}  // namespace nibble
