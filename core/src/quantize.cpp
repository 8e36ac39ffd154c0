// Round-to-nearest quantization and the checkpoint writer behind `nibble quantize`.
#include "nibble/quantize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "nibble/checkpoint.h"
#include "nibble/error.h"
#include "nibble/formats.h"
#include "formats/unit.h"
#include "nibble/safetensors.h"
#include "random.h"

namespace fs = std::filesystem;

namespace nibble {

CanonicalLinear quantize_rtn(const std::string& name, const Tensor& weight, int group_size, bool symmetric,
                             bool act_order, DType scale_dtype, int min_zero, int bits) {
  if (weight.ndim() != 2 || !is_float(weight.dtype()))
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': expected a float weight [N, K], found {} {}", name,
                                                    dtype_name(weight.dtype()), shape_str(weight.shape())));
  const int64_t n = weight.dim(0), k = weight.dim(1);
  if (group_size != -1 && group_size <= 0)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': group size {} (expected -1 or > 0)", name, group_size));
  if (act_order && group_size == -1)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': act order needs groups (group size -1 has one)", name));
  CanonicalLinear w;
  LinearSpec& s = w.spec;
  s.name = name;
  s.k = k;
  s.n = n;
  s.group_size = group_size;
  s.weight_type = weight_type_of(bits, symmetric);
  s.bits = bits;
  const double maxq = double((1 << bits) - 1);
  s.scale_dtype = scale_dtype;
  s.act_dtype = scale_dtype == DType::f32 ? DType::f32 : scale_dtype;
  s.act_order = act_order;
  const int64_t G = s.effective_group(), groups = s.num_groups();

  // Row order: identity, or by descending column energy for act order.
  std::vector<int64_t> order(static_cast<std::size_t>(k));
  std::iota(order.begin(), order.end(), 0);
  if (act_order) {
    std::vector<double> energy(static_cast<std::size_t>(k), 0.0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const double v = weight.at(std::size_t(r * k + c));
        energy[std::size_t(c)] += v * v;
      }
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return energy[std::size_t(a)] > energy[std::size_t(b)]; });
    w.g_idx = Tensor::zeros(DType::i32, {k});
    for (int64_t i = 0; i < k; ++i) w.g_idx.mutable_data_as<int32_t>()[order[std::size_t(i)]] = int32_t(i / G);
  }
  Tensor codes = Tensor::zeros(DType::u8, {k, n});
  uint8_t* cd = codes.mutable_data_as<uint8_t>();
  w.scales = Tensor::zeros(scale_dtype, {groups, n});
  if (!symmetric) w.zeros = Tensor::zeros(DType::u8, {groups, n});
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t i0 = g * G, i1 = std::min(k, i0 + G);
    for (int64_t r = 0; r < n; ++r) {
      double lo = 0, hi = 0;  // the range always includes 0, as GPTQ's quantizer does
      for (int64_t i = i0; i < i1; ++i) {
        const double v = weight.at(std::size_t(r * k + order[std::size_t(i)]));
        lo = std::min(lo, v), hi = std::max(hi, v);
      }
      double scale, zero;
      if (symmetric) {
        double amax = std::max(-lo, hi);
        if (amax == 0) amax = 1;
        scale = 2 * amax / maxq;
        zero = double(1 << (bits - 1));
      } else {
        if (lo == 0 && hi == 0) lo = -1, hi = 1;
        scale = (hi - lo) / maxq;
        zero = std::clamp(std::round(-lo / scale), double(min_zero), maxq);
      }
      store_float(w.scales.mutable_data(), scale_dtype, std::size_t(g * n + r), scale);
      scale = w.scales.at(std::size_t(g * n + r));  // the rounded scale the kernels will use
      if (scale == 0) scale = 1e-30;
      if (!symmetric) w.zeros.mutable_data_as<uint8_t>()[g * n + r] = uint8_t(zero);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t c = order[std::size_t(i)];
        const double q = std::clamp(std::round(weight.at(std::size_t(r * k + c)) / scale) + zero, 0.0, maxq);
        cd[c * n + r] = uint8_t(q);
      }
    }
  }
  w.qweight = pack_codes_k(codes, bits);
  validate(w);
  return w;
}

namespace {

// The writer variant of an output format (the format units' list).
const detail::WriterVariant& writer(const std::string& name) {
  for (const auto* f : detail::format_units())
    for (const auto& v : f->writers)
      if (v.name == name) return v;
  throw Error(Errc::invalid_argument, fmt::format("unknown format '{}' (known: {})", name, fmt::join(output_format_names(), ", ")));
}

nlohmann::ordered_json quantization_config(const QuantizeOptions& o, const OutputFormat& f) {
  const detail::WriterVariant& v = writer(f.name);
  return v.config(o, v);
}

// Writes tensors into one file or into shards of at most max_shard_bytes, then the index.
class ModelWriter {
 public:
  ModelWriter(fs::path dir, uint64_t max_shard_bytes) : dir_(std::move(dir)), max_(max_shard_bytes) {}
  void add(const std::string& name, const Tensor& t) {
    if (!cur_ || (max_ && cur_->data_bytes() > 0 && cur_->data_bytes() + t.nbytes() > max_)) next();
    cur_->add(name, t);
    owner_[name] = shards_.size() - 1;
  }
  void finish() {
    if (!cur_) next();
    cur_->finish();
    cur_.reset();
    if (!max_) {
      fs::rename(shards_[0], dir_ / "model.safetensors");
      return;
    }
    nlohmann::ordered_json map;
    std::vector<std::string> final_names;
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      final_names.push_back(fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards_.size()));
      fs::rename(shards_[i], dir_ / final_names.back());
    }
    for (const auto& [name, idx] : owner_) map[name] = final_names[idx];
    std::ofstream(dir_ / "model.safetensors.index.json") << nlohmann::ordered_json{{"metadata", nlohmann::ordered_json::object()}, {"weight_map", map}}.dump(2);
  }

 private:
  void next() {
    if (cur_) cur_->finish();
    shards_.push_back(dir_ / fmt::format(".shard-{}.safetensors", shards_.size()));
    cur_ = std::make_unique<SafetensorsWriter>(shards_.back());
  }
  fs::path dir_;
  uint64_t max_;
  std::unique_ptr<SafetensorsWriter> cur_;
  std::vector<fs::path> shards_;
  std::map<std::string, std::size_t> owner_;
};

void write_quantized_layer(ModelWriter& out, const CanonicalLinear& w, const OutputFormat& f) {
  for (const auto& [suffix, t] : pack_layer(w, f.packing)) out.add(w.spec.name + "." + suffix, t);
}

Tensor random_weight(int64_t n, int64_t k, DType dtype, uint64_t seed) {
  detail::Rng rng(seed);
  Tensor t = Tensor::zeros(dtype, {n, k});
  // Roughly normal (sum of three uniforms), std 0.02, with a few larger values as LLM weights have.
  for (int64_t i = 0; i < n * k; ++i) {
    double v = (rng.uniform(-1, 1) + rng.uniform(-1, 1) + rng.uniform(-1, 1)) * 0.02;
    if (rng.below(512) == 0) v *= 4;
    store_float(t.mutable_data(), dtype, std::size_t(i), v);
  }
  return t;
}

void prepare_out_dir(const fs::path& out) {
  fs::create_directories(out);
  for (const char* f : {"model.safetensors", "model.safetensors.index.json"}) fs::remove(out / f);
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().filename().string().starts_with("model-") && e.path().extension() == ".safetensors") fs::remove(e.path());
}

void check_options(const QuantizeOptions& o, const OutputFormat& f) {
  const detail::PackingUnit& unit = detail::packing_unit(f.packing);
  if (o.act_order && !unit.act_order)
    throw Error(Errc::unsupported, fmt::format("format {} has no act order (its packing stores no g_idx)", f.name));
  const std::vector<int>& widths = unit.widths;
  if (std::find(widths.begin(), widths.end(), o.bits) == widths.end())
    throw Error(Errc::unsupported, fmt::format("--bits {}: format {} is written at {} bits", o.bits, f.name, fmt::join(widths, ", ")));
  if (o.group_size != -1 && o.group_size <= 0)
    throw Error(Errc::invalid_argument, fmt::format("group size {} (expected -1 or a positive number)", o.group_size));
  if (o.dtype != DType::f16 && o.dtype != DType::bf16)
    throw Error(Errc::invalid_argument, fmt::format("model dtype {} (expected f16 or bf16)", dtype_name(o.dtype)));
}

}  // namespace

OutputFormat output_format(const std::string& name) {
  const detail::WriterVariant& v = writer(name);
  return {v.name, v.packing};
}

std::vector<std::string> output_format_names() {
  std::vector<std::string> names;
  for (const auto* f : detail::format_units())
    for (const auto& v : f->writers) names.push_back(v.name);
  return names;
}

std::vector<std::string> preset_names() { return {"tiny", "llama3-8b", "llama3-70b", "llama3-8b-fused", "llama3-70b-fused"}; }

std::vector<PresetLayer> preset_layers(const std::string& preset, int num_blocks) {
  struct Dims { int64_t hidden, kv, inter; int blocks; bool fused; };
  Dims d{};
  if (preset == "tiny") d = {512, 128, 1024, 2, false};
  else if (preset == "llama3-8b") d = {4096, 1024, 14336, 32, false};
  else if (preset == "llama3-70b") d = {8192, 1024, 28672, 80, false};
  else if (preset == "llama3-8b-fused") d = {4096, 1024, 14336, 32, true};
  else if (preset == "llama3-70b-fused") d = {8192, 1024, 28672, 80, true};
  else throw Error(Errc::invalid_argument, fmt::format("unknown shape preset '{}' (known: {})", preset, fmt::join(preset_names(), ", ")));
  const int blocks = num_blocks > 0 ? num_blocks : d.blocks;
  std::vector<PresetLayer> out;
  for (int b = 0; b < blocks; ++b) {
    const std::string p = fmt::format("model.layers.{}.", b);
    if (d.fused) {
      out.push_back({p + "self_attn.qkv_proj", d.hidden, d.hidden + 2 * d.kv});
      out.push_back({p + "self_attn.o_proj", d.hidden, d.hidden});
      out.push_back({p + "mlp.gate_up_proj", d.hidden, 2 * d.inter});
      out.push_back({p + "mlp.down_proj", d.inter, d.hidden});
    } else {
      out.push_back({p + "self_attn.q_proj", d.hidden, d.hidden});
      out.push_back({p + "self_attn.k_proj", d.hidden, d.kv});
      out.push_back({p + "self_attn.v_proj", d.hidden, d.kv});
      out.push_back({p + "self_attn.o_proj", d.hidden, d.hidden});
      out.push_back({p + "mlp.gate_proj", d.hidden, d.inter});
      out.push_back({p + "mlp.up_proj", d.hidden, d.inter});
      out.push_back({p + "mlp.down_proj", d.inter, d.hidden});
    }
  }
  return out;
}

void write_random_model(const fs::path& out, const std::string& preset, int num_blocks, const QuantizeOptions& o,
                        const Progress& progress) {
  const OutputFormat f = output_format(o.format);
  check_options(o, f);
  const auto layers = preset_layers(preset, num_blocks);
  prepare_out_dir(out);
  ModelWriter writer(out, o.max_shard_bytes);
  const int min_zero = detail::packing_unit(f.packing).min_zero;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    if (progress) progress(i, layers.size(), l.name);
    Tensor wt = random_weight(l.n, l.k, o.dtype, o.seed * 1000003 + i);
    write_quantized_layer(writer, quantize_rtn(l.name, wt, o.group_size, o.symmetric, o.act_order, o.dtype, min_zero, o.bits), f);
  }
  // An unquantized lm_head, as real checkpoints have.
  const int64_t hidden = layers.empty() ? 64 : layers.front().k;
  writer.add("lm_head.weight", random_weight(256, hidden, o.dtype, o.seed + 7));
  writer.finish();
  if (progress) progress(layers.size(), layers.size(), "");
  nlohmann::ordered_json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                                   {"torch_dtype", o.dtype == DType::bf16 ? "bfloat16" : "float16"},
                                   {"hidden_size", hidden}, {"num_hidden_layers", layers.empty() ? 0 : num_blocks},
                                   {"nibble_preset", preset}, {"quantization_config", quantization_config(o, f)}};
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
}

void quantize_model_dir(const fs::path& in, const fs::path& out, const QuantizeOptions& o, const Progress& progress) {
  const OutputFormat f = output_format(o.format);
  check_options(o, f);
  if (fs::exists(out) && fs::equivalent(in, out))
    throw Error(Errc::invalid_argument, "the output directory must differ from the input");
  auto src = Checkpoint::open(in);
  if (src->config().format() != Format::unknown)
    throw Error(Errc::invalid_argument, fmt::format("{} is already quantized ({})", in.string(), src->config().summary()));
  std::ifstream cfg_in(in / "config.json");
  nlohmann::ordered_json config = nlohmann::ordered_json::parse(cfg_in);
  // Every tensor name of the input, in natural order.
  std::vector<std::string> names;
  std::ifstream idx(in / "model.safetensors.index.json");
  if (idx) {
    auto j = nlohmann::json::parse(idx);
    for (const auto& [name, file] : j.at("weight_map").items()) names.push_back(name);
  } else {
    auto file = SafetensorsFile::open(in / "model.safetensors");  // kept alive across the loop
    for (const auto& t : file->tensors()) names.push_back(t.name);
  }
  std::sort(names.begin(), names.end(), natural_less);
  prepare_out_dir(out);
  ModelWriter writer(out, o.max_shard_bytes);
  const int min_zero = detail::packing_unit(f.packing).min_zero;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    Tensor t = src->tensor(name);
    const bool linear = name.starts_with("model.layers.") && name.ends_with(".weight") && t.ndim() == 2 &&
                        is_float(t.dtype()) && name.find("embed") == std::string::npos;
    if (!linear) {
      writer.add(name, t);
      continue;
    }
    const std::string layer = name.substr(0, name.size() - 7);
    if (progress) progress(i, names.size(), layer);
    CanonicalLinear w = quantize_rtn(layer, t, o.group_size, o.symmetric, o.act_order, o.dtype, min_zero, o.bits);
    Tensor bias = src->tensor(layer + ".bias");
    if (!bias.empty()) {
      w.spec.has_bias = true;
      w.bias = bias.to(o.dtype);
    }
    for (const auto& [suffix, packed] : pack_layer(w, f.packing)) {
      if (suffix == "bias") continue;  // copied with the other tensors
      writer.add(layer + "." + suffix, packed);
    }
  }
  writer.finish();
  if (progress) progress(names.size(), names.size(), "");
  config["quantization_config"] = quantization_config(o, f);
  std::ofstream(out / "config.json") << config.dump(2) << "\n";
}

}  // namespace nibble
