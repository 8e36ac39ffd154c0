// Fuzz target: model.safetensors.index.json. File names that could leave the model directory must
// always be refused.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "nibble/checkpoint.h"
#include "nibble/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto map = nibble::parse_safetensors_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (const auto& [tensor, file] : map)
      if (file.empty() || file.find('/') != std::string::npos || file == "..") std::abort();  // would escape
  } catch (const nibble::Error&) {
  }
  return 0;
}
