// nibble::Error: the one exception type of the core. Its message names the layer, the tensor, what
// was expected and what was found, so that a user can act on it without a debugger.
#pragma once

#include <stdexcept>
#include <string>

namespace nibble {

enum class Errc {
  invalid_argument,  // a caller passed something malformed
  format,            // a checkpoint or config file is malformed or inconsistent
  unsupported,       // well-formed, but not something nibble (or the chosen backend) runs
  not_found,         // a file, tensor, layer or backend does not exist
  io,                // the operating system refused (open, mmap, read)
  plugin,            // a plugin failed or misbehaved
  no_backend,        // selection found no backend that fits
  device,            // a device call failed
  limit,             // an input exceeds a safety limit (sizes, counts)
};

const char* errc_name(Errc c) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

}  // namespace nibble
