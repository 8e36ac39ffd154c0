// Fuzz target: the policy TOML file and per-layer rule resolution.
#include <cstdint>
#include <string>

#include "nibble/error.h"
#include "nibble/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto p = nibble::Policy::parse_toml(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const char* name : {"model.layers.0.self_attn.q_proj", "model.layers.7.mlp.down_proj", "lm_head"})
      (void)p.rules_for(name);
  } catch (const nibble::Error&) {
  }
  return 0;
}
