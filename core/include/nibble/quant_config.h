// quantization_config: what config.json says about how each layer is quantized. The formats that
// read it are units of core/src/formats/ (docs/formats.md); this is the result they share.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "nibble/spec.h"

namespace nibble {

/// The on-disk tensor layout of a quantized layer (the packing, not the tool that made it).
/// b = bits; "along K/N" = codes packed as a little-endian bit stream in that direction.
enum class Packing {
  gptq_v1,             ///< qweight [K*b/32, N] along K, qzeros [K/G, N*b/32] along N storing z - 1, scales, g_idx
  gptq_v2,             ///< as v1, qzeros storing z
  awq_gemm,            ///< 4-bit: qweight [K, N/8] interleaved along N, qzeros [K/G, N/8] interleaved, scales
  compressed_tensors,  ///< weight_packed [N, K*b/32] along K, weight_scale [N, K/G], weight_zero_point [N*b/32, K/G]
};
const char* packing_name(Packing p) noexcept;

/// How one layer is stored.
struct LayerScheme {
  enum class Kind { quantized, unquantized, unsupported };
  Kind kind = Kind::unquantized;
  std::string reason;          ///< why unquantized / unsupported, naming the config key or tensor
  std::string reason_tensor;   ///< the full name of the tensor the reason is about, or "" (lint's findings)
  Format format = Format::unknown;  ///< the tool family, for reports
  Packing packing = Packing::gptq_v1;
  int bits = 4;                ///< 2, 3, 4 or 8 where quantized
  int group_size = 128;        ///< -1 = per channel
  bool symmetric = true;
  bool act_order = false;      ///< the config promises a g_idx (desc_act / actorder: group)
  std::string origin = "quantization_config";  ///< the config key this layer's scheme comes from
};

class QuantConfig {
 public:
  /// Parses config.json text. A missing quantization_config gives an unquantized model. Errors
  /// (Errc::format / Errc::unsupported) name the config key.
  static QuantConfig parse(const std::string& config_json_text, const std::string& origin);

  /// The scheme of the linear layer `name` (e.g. "model.layers.0.mlp.down_proj").
  LayerScheme scheme_for(const std::string& name) const;

  Format format() const noexcept { return rules_.format; }
  /// One line: "gptq, gptq (v1 zeros), 4-bit, G128, symmetric".
  const std::string& summary() const noexcept { return rules_.summary; }
  /// The dtype config.json declares (torch_dtype / dtype), f16 if absent.
  DType model_dtype() const noexcept { return model_dtype_; }

  /// How a rule's pattern meets a layer name, as the format's own loaders match it. The format
  /// units (core/src/formats) choose it; scheme_for only applies it.
  enum class Match {
    exact,      ///< the name is the pattern (AutoRound keys without regex characters, plain targets)
    search,     ///< the regex matches somewhere in the name (Python's re.search: AutoRound regex keys)
    prefix,     ///< the regex matches at the start of the name (re.match: GPTQModel dynamic, "re:" entries)
    substring,  ///< the pattern occurs in the name (AWQ modules_to_not_convert)
    every,      ///< every layer but lm_head (compressed-tensors class targets: "Linear")
  };
  struct Override {             ///< a per-layer rule (skips, extra_config, dynamic, config_groups targets)
    std::string pattern;        ///< exact name, regex or substring, as `match` reads it
    Match match = Match::exact;
    bool skip = false;          ///< leaves the layer unquantized
    bool sets_bits = false;     ///< the rule gives the width itself (not only group size or symmetry)
    LayerScheme scheme;
    std::string origin;         ///< what the rule is in the config, for reasons ("'visual' in quantization_config.ignore")
  };

  /// What a format unit reads from a quantization_config (core/src/formats/unit.h): rules in
  /// format-neutral terms, applied by scheme_for in this order.
  struct Rules {
    Format format = Format::unknown;
    std::string summary = "not quantized";
    LayerScheme base;                         ///< the default of quantized layers
    bool has_base = false;
    std::string unsupported;                  ///< set when the whole config is one nibble does not run
    /// 1. Layers left unquantized by name (AWQ modules_to_not_convert, compressed-tensors ignore):
    /// the first match, its origin the reason.
    std::vector<Override> skips;
    /// 2. Where set, layers are quantized only through these (compressed-tensors config_groups
    /// targets): the first that matches by name, else the first class-wide one (Match::every).
    std::vector<Override> targets;
    bool by_targets = false;
    std::string targets_origin;               ///< the reason where none matches
    /// 3. lm_head is quantized only where the config says so (or an override reaching past the
    /// scope rules names it); the reason otherwise.
    bool quantize_lm_head = false;
    std::string lm_head_reason = "lm_head is not quantized: the config does not quantize it";
    /// 4. Where set, only layers inside these blocks are quantized (AutoRound block_name_to_quantize).
    std::vector<std::string> block_prefixes;
    std::string blocks_origin;
    /// 5. Per-layer replacements of base, in the config's order: the first that matches decides (a
    /// skip included), after any whose pattern equals the name where exact_first.
    std::vector<Override> overrides;
    bool exact_first = false;                 ///< AutoRound: a key equal to the name beats every regex
    /// AutoRound (vLLM's get_layer_config): an override whose key equals the name, or a matching
    /// one that sets bits, decides before rules 3 and 4 (lm_head and layers outside the blocks).
    bool overrides_past_scope = false;
  };

 private:
  Rules rules_;
  DType model_dtype_ = DType::f16;
  /// The overrides by exact pattern (the first of each) and the others in order, so that a
  /// model of many layers and many per-layer keys (an MoE's extra_config) costs one lookup and
  /// the few patterns per layer, not every key.
  std::unordered_map<std::string, std::size_t> exact_;
  std::vector<std::size_t> patterned_;
};

}  // namespace nibble
