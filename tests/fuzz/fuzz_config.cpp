// Fuzz target: config.json quantization_config, and per-layer schemes of typical layer names.
#include <cstdint>
#include <string>

#include "nibble/error.h"
#include "nibble/quant_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto c = nibble::QuantConfig::parse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.31.mlp.down_proj", "lm_head", "x"})
      (void)c.scheme_for(name);
  } catch (const nibble::Error&) {
  }
  return 0;
}
