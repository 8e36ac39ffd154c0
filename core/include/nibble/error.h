// nibble::Error: the one exception type of the core. Its message names the layer, the tensor, what
// was expected and what was found, so that a user can act on it without a debugger.
#pragma once

#include <stdexcept>
#include <string>

namespace nibble {

/// Append-only: the values are part of the C API (nibble_c.h's NIBBLE_HOST_ERR_* are Errc + 1).
enum class Errc {
  invalid_argument,    // a caller passed something malformed (also: a plugin said so of the call)
  format,              // a checkpoint or config file is malformed or inconsistent
  unsupported,         // well-formed, but not something nibble's core runs
  not_found,           // a file, tensor, layer or backend does not exist
  io,                  // the operating system refused (open, mmap, read)
  plugin,              // a plugin failed or misbehaved (an internal error, a broken promise)
  no_backend,          // selection found no backend that fits
  device,              // a device call failed (NIBBLE_ERR_DEVICE)
  limit,               // an input exceeds a safety limit (sizes, counts)
  plugin_unsupported,  // a plugin declined the call: it cannot do this (NIBBLE_ERR_UNSUPPORTED)
  no_device,           // the plugin's device or driver is missing (NIBBLE_ERR_NO_DEVICE)
  out_of_memory,       // host or device memory ran out (NIBBLE_ERR_OUT_OF_MEMORY)
  internal,            // an unexpected failure inside nibble itself (a bug: please report it)
};

const char* errc_name(Errc c) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string message) : std::runtime_error(std::move(message)), code_(code) {}
  Errc code() const noexcept { return code_; }

 private:
  Errc code_;
};

/// An Error about one tensor of a checkpoint, which it names in full ("model.layers.0.mlp.up_proj.
/// qzeros"), for callers that list findings by tensor (lint). The message names it too.
class TensorError : public Error {
 public:
  TensorError(Errc code, std::string message, std::string tensor)
      : Error(code, std::move(message)), tensor_(std::move(tensor)) {}
  const std::string& tensor() const noexcept { return tensor_; }

 private:
  std::string tensor_;
};

}  // namespace nibble
