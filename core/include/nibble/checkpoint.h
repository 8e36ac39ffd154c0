// Checkpoint: a model directory (config.json + safetensors, single or sharded), its layers and
// how each is stored, and the canonical form of any quantized layer, loaded one at a time.
#pragma once

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nibble/canonical.h"
#include "nibble/formats.h"
#include "nibble/quant_config.h"
#include "nibble/safetensors.h"

namespace nibble {

struct LayerEntry {
  std::string name;    ///< e.g. "model.layers.0.mlp.down_proj"
  LayerScheme scheme;  ///< quantized, unquantized (16-bit weight) or unsupported, with the reason
  int64_t k = 0;       ///< in_features (0 where the tensors do not say)
  int64_t n = 0;       ///< out_features
  /// For a quantized layer: its spec, derived once from the tensor headers when the checkpoint
  /// opened (describe_layer), in the model dtype. A layer whose headers contradict its scheme is
  /// `unsupported` with the reason instead, so that selecting (explain) and loading (run) agree.
  LinearSpec spec;
};

class Checkpoint {
 public:
  /// Opens DIR: config.json, then model.safetensors or model.safetensors.index.json (shards).
  /// Only regular files are read, each up to a size limit.
  static std::shared_ptr<Checkpoint> open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const noexcept { return dir_; }
  const QuantConfig& config() const noexcept { return config_; }
  /// Every linear layer found (in natural name order): quantized ones by their packed tensors,
  /// unquantized ones by a 2-D 16-bit `.weight`, and layers whose packed weight is missing (as
  /// unsupported, naming the tensors that are there).
  const std::vector<LayerEntry>& layers() const noexcept { return layers_; }
  /// The layer of this name, or null (one hash lookup).
  const LayerEntry* find_layer(const std::string& name) const;
  /// Tensors the checkpoint holds that no layer reads and that are not plain 16-bit tensors
  /// (a qzeros without its layer's qweight, a tensor another packing would use, a name with no
  /// layer prefix), each with why.
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }

  /// The spec of a quantized layer (act_dtype: the model dtype unless given): the one spec that
  /// selection decides on and load() produces. Throws Errc::unsupported for other layers.
  LinearSpec spec_of(const LayerEntry& layer, std::optional<DType> act_dtype = std::nullopt) const;
  /// The canonical form of a quantized layer, with exactly spec_of()'s spec.
  CanonicalLinear load(const std::string& layer, std::optional<DType> act_dtype = std::nullopt) const;
  /// What the layer's tensors say about themselves (nibble lint): see lint_layer().
  std::vector<LintFinding> lint(const LayerEntry& layer) const;

  /// Any tensor by full name (empty if absent), and its header entry (null if absent).
  Tensor tensor(const std::string& name) const;
  const TensorInfo* tensor_info(const std::string& name) const;
  /// Number of safetensors files (1 unless sharded).
  std::size_t num_files() const noexcept { return files_.size(); }
  /// Entries examined by layer and tensor lookups since open (the layer count bounds what one
  /// pass over every layer may cost: lookups are never scans).
  uint64_t lookup_steps() const noexcept { return lookup_steps_.load(std::memory_order_relaxed); }

 private:
  TensorSource source_for(const std::string& layer) const;

  std::filesystem::path dir_;
  QuantConfig config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::size_t> where_;  // tensor name -> index in files_
  std::vector<LayerEntry> layers_;
  std::unordered_map<std::string, std::size_t> layer_index_;
  std::vector<std::string> warnings_;
  mutable std::atomic<uint64_t> lookup_steps_{0};
};

/// Parses model.safetensors.index.json: tensor name -> shard file name. File names must be plain
/// names inside the model directory (no '/', no '..'). Throws Errc::format naming `origin`.
std::map<std::string, std::string> parse_safetensors_index(const std::string& text, const std::string& origin);

/// "a.2.b" < "a.10.b": numbers inside names compare by value.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace nibble
