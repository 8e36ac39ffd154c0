// Checkpoint: a model directory (config.json + safetensors, single or sharded), its layers and
// how each is stored, and the canonical form of any quantized layer, loaded one at a time.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nibble/canonical.h"
#include "nibble/quant_config.h"
#include "nibble/safetensors.h"

namespace nibble {

struct LayerEntry {
  std::string name;    ///< e.g. "model.layers.0.mlp.down_proj"
  LayerScheme scheme;  ///< quantized, unquantized (16-bit weight) or unsupported, with the reason
  int64_t k = 0;       ///< in_features
  int64_t n = 0;       ///< out_features
};

class Checkpoint {
 public:
  /// Opens DIR: config.json, then model.safetensors or model.safetensors.index.json (shards).
  static std::shared_ptr<Checkpoint> open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const noexcept { return dir_; }
  const QuantConfig& config() const noexcept { return config_; }
  /// Every linear layer found (in natural name order): quantized ones by their packed tensors,
  /// unquantized ones by a 2-D 16-bit `.weight`.
  const std::vector<LayerEntry>& layers() const noexcept { return layers_; }
  const LayerEntry* find_layer(const std::string& name) const;

  /// The canonical form of a quantized layer (act_dtype: the model dtype unless given).
  CanonicalLinear load(const std::string& layer, std::optional<DType> act_dtype = std::nullopt) const;

  /// The spec of a quantized layer from the tensor headers alone (no data is read): what
  /// selection needs before anything is loaded.
  LinearSpec spec_of(const LayerEntry& layer, std::optional<DType> act_dtype = std::nullopt) const;

  /// Any tensor by full name (empty if absent), and its header entry (null if absent).
  Tensor tensor(const std::string& name) const;
  const TensorInfo* tensor_info(const std::string& name) const;
  /// Number of safetensors files (1 unless sharded).
  std::size_t num_files() const noexcept { return files_.size(); }

 private:
  std::filesystem::path dir_;
  QuantConfig config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::size_t> where_;  // tensor name -> index in files_
  std::vector<LayerEntry> layers_;
};

/// Parses model.safetensors.index.json: tensor name -> shard file name. File names must be plain
/// names inside the model directory (no '/', no '..'). Throws Errc::format naming `origin`.
std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& origin);

/// "a.2.b" < "a.10.b": numbers inside names compare by value.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace nibble
