// Round-to-nearest quantization and a writer of real checkpoints in every supported format, for
// demos, tests and benchmarks (`nibble quantize`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "nibble/canonical.h"
#include "nibble/quant_config.h"

namespace nibble {

/// Round-to-nearest quantization of one weight [N, K] (Hugging Face layout: out x in) to `bits`
/// (2, 3, 4 or 8) bits, maxq = 2^bits - 1. Symmetric: s = 2 max|w| / maxq, z = 2^(bits-1) (GPTQ's
/// rule). Asymmetric: the range [min(w, 0), max(w, 0)] is split in maxq steps, z = round(-min / s)
/// clamped to [min_zero, maxq] (min_zero = 1 for GPTQ v1, which cannot store 0). Act order: rows
/// are visited by descending column energy sum_n w^2 and the i-th row visited joins group i / G
/// (what GPTQ's desc_act writes). Scales are rounded to scale_dtype first and the codes computed
/// with the rounded scales.
CanonicalLinear quantize_rtn(const std::string& name, const Tensor& weight_nk, int group_size, bool symmetric,
                             bool act_order, DType scale_dtype, int min_zero = 0, int bits = 4);

/// A checkpoint format nibble can write, by its command-line name.
struct OutputFormat {
  std::string name;  ///< gptq, gptq_v2, awq, compressed-tensors, autoround, autoround-gptqmodel, autoround-awq
  Packing packing;
};
/// Throws Errc::invalid_argument listing the names for an unknown one.
OutputFormat output_format(const std::string& name);
std::vector<std::string> output_format_names();

struct QuantizeOptions {
  std::string format = "gptq";
  int bits = 4;                   ///< 2, 3, 4 or 8, as the format allows
  int group_size = 128;
  bool symmetric = true;
  bool act_order = false;
  DType dtype = DType::f16;       ///< model dtype: scales, unquantized tensors, random weights
  uint64_t seed = 1;              ///< random weights
  uint64_t max_shard_bytes = 0;   ///< > 0: shard the output (model-0000i-of-0000n.safetensors + index)
};

/// One linear layer of a named preset shape set.
struct PresetLayer {
  std::string name;
  int64_t k, n;
};
/// Layers of a preset: "tiny", "llama3-8b", "llama3-70b" (q/k/v/o/gate/up/down per block), or
/// "llama3-8b-fused", "llama3-70b-fused" (qkv, o, gate_up, down: the shapes of PERF.md).
/// num_blocks <= 0 takes the model's own count.
std::vector<PresetLayer> preset_layers(const std::string& preset, int num_blocks);
std::vector<std::string> preset_names();

using Progress = std::function<void(std::size_t done, std::size_t total, const std::string& layer)>;

/// Writes a quantized checkpoint of random weights with the preset's shapes into `out`.
void write_random_model(const std::filesystem::path& out, const std::string& preset, int num_blocks,
                        const QuantizeOptions& options, const Progress& progress = {});
/// Quantizes every 2-D 16/32-bit linear weight under "model.layers." of a Hugging Face model
/// directory (config.json + safetensors) and writes the checkpoint into `out`; every other tensor
/// (embeddings, norms, lm_head) is copied as it is.
void quantize_model_dir(const std::filesystem::path& in, const std::filesystem::path& out,
                        const QuantizeOptions& options, const Progress& progress = {});

}  // namespace nibble
