// Fuzz target: the safetensors header parser and tensor views. Any input must either be refused
// with nibble::Error or give views whose every byte can be read.
#include <cstddef>
#include <cstdint>

#include "nibble/error.h"
#include "nibble/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = nibble::SafetensorsFile::parse(data, size, nullptr, "fuzz");
    uint64_t sum = 0;
    for (const auto& ti : f->tensors()) {
      try {
        nibble::Tensor t = f->get(ti.name);
        const auto* b = static_cast<const uint8_t*>(t.data());
        for (std::size_t i = 0; i < t.nbytes(); ++i) sum += b[i];  // ASan flags any byte outside the input
      } catch (const nibble::Error&) {
      }
    }
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const nibble::Error&) {
  }
  return 0;
}
