// quantization_config: what config.json says about how each layer is quantized.
#pragma once

#include <string>
#include <vector>

#include "nibble/spec.h"

namespace nibble {

/// The on-disk tensor layout of a quantized layer (the packing, not the tool that made it).
enum class Packing {
  gptq_v1,             ///< qweight [K/8, N], qzeros [K/G, N/8] storing z - 1, scales, g_idx
  gptq_v2,             ///< as v1, qzeros storing z
  awq_gemm,            ///< qweight [K, N/8] interleaved, qzeros [K/G, N/8] interleaved, scales
  compressed_tensors,  ///< weight_packed [N, K/8], weight_scale [N, K/G], weight_zero_point [N/8, K/G]
};
const char* packing_name(Packing p) noexcept;

/// How one layer is stored.
struct LayerScheme {
  enum class Kind { quantized, unquantized, unsupported };
  Kind kind = Kind::unquantized;
  std::string reason;          ///< why unquantized / unsupported, naming the config key
  Format format = Format::unknown;  ///< the tool family, for reports
  Packing packing = Packing::gptq_v1;
  int bits = 4;
  int group_size = 128;        ///< -1 = per channel
  bool symmetric = true;
  bool act_order = false;      ///< the config promises a g_idx (desc_act / actorder: group)
};

class QuantConfig {
 public:
  /// Parses config.json text. A missing quantization_config gives an unquantized model. Errors
  /// (Errc::format / Errc::unsupported) name the config key.
  static QuantConfig parse(const std::string& config_json_text, const std::string& origin);

  /// The scheme of the linear layer `name` (e.g. "model.layers.0.mlp.down_proj").
  LayerScheme scheme_for(const std::string& name) const;

  Format format() const noexcept { return format_; }
  /// One line: "gptq v1, 4-bit, G128, symmetric, desc_act".
  const std::string& summary() const noexcept { return summary_; }
  /// The dtype config.json declares (torch_dtype / dtype), f16 if absent.
  DType model_dtype() const noexcept { return model_dtype_; }

  struct Override {             ///< a per-layer rule (extra_config, dynamic, config_groups)
    std::string pattern;        ///< exact name, glob, or "re:" regex
    bool regex_search = false;  ///< match anywhere in the name (AutoRound keys, GPTQModel dynamic)
    bool skip = false;          ///< leaves the layer unquantized
    LayerScheme scheme;
    std::string origin;         ///< the config key, for reasons
  };

 private:
  Format format_ = Format::unknown;
  std::string summary_ = "not quantized";
  DType model_dtype_ = DType::f16;
  LayerScheme base_;                      // the default for quantized layers
  bool has_base_ = false;
  std::vector<std::string> not_converted_;  // substrings (AWQ modules_to_not_convert)
  std::vector<std::string> ignore_;         // names or "re:" (compressed-tensors ignore)
  std::vector<std::string> block_prefixes_; // AutoRound block_name_to_quantize
  bool quantize_lm_head_ = false;
  std::vector<Override> overrides_;
  std::vector<Override> targets_;           // compressed-tensors config_groups, first match wins
  std::string unsupported_;                 // set when the whole config is unsupported
};

}  // namespace nibble
