// The objects behind the C API's opaque handles, and the guard that turns every exception into a
// nibble_host_error. Shared by nibble_c.cpp (handles, selection, preparing) and nibble_c_tensors.cpp
// (DLPack checks and apply).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "nibble/checkpoint.h"
#include "nibble/error.h"
#include "nibble/nibble_c.h"
#include "nibble/policy.h"
#include "nibble/registry.h"

struct nibble_host_selection {
  nibble::Selection selection;
  std::string trace;
};

struct nibble_host_error {
  int32_t status;
  std::string message;
  std::unique_ptr<nibble_host_selection> selection;  // where no backend could take the layer
};

struct nibble_host_policy {
  nibble::Policy policy;
};

struct nibble_host_registry {
  std::shared_ptr<nibble::Registry> registry;
  std::vector<std::string> capabilities;  // per backend, kept for the const char* handed out
  std::vector<std::string> remarks;
};

struct nibble_host_checkpoint {
  std::shared_ptr<nibble::Checkpoint> checkpoint;
};

struct nibble_host_linear {
  std::shared_ptr<nibble::PreparedLinear> prepared;
  DLDevice device;  // where x and y must live
};

namespace nibble::capi {

/// An error thrown inside the C API with the selection trace that explains it.
struct NoBackend : Error {
  NoBackend(std::string message, Selection s) : Error(Errc::no_backend, std::move(message)), selection(std::move(s)) {}
  Selection selection;
};

/// The error of an exception; never throws (out of memory gives a static error object).
nibble_host_error* error_of_current_exception() noexcept;

/// Runs f() and returns NULL, or the error of whatever it threw.
template <class F>
nibble_host_error* guarded(F&& f) noexcept {
  try {
    f();
    return nullptr;
  } catch (...) {
    return error_of_current_exception();
  }
}

/// Throws Errc::invalid_argument naming the function and the argument when p is NULL.
template <class T>
T& require(T* p, const char* function, const char* argument) {
  if (!p) throw Error(Errc::invalid_argument, std::string(function) + ": '" + argument + "' is NULL");
  return *p;
}

/// The minimal struct_size accepted for a struct of this API (the size of its first release).
template <class T>
constexpr uint32_t v1_size() noexcept {
  return uint32_t(sizeof(T));
}

// The options as the first release knew them: they ended at `stream`.
template <>
constexpr uint32_t v1_size<nibble_host_layer_options>() noexcept {
  return uint32_t(offsetof(nibble_host_layer_options, stream) + sizeof(void*));
}

/// Copies `value` into the caller's struct, at most out->struct_size bytes, and sets its
/// struct_size to the bytes written.
template <class T>
void write_sized(T* out, T value, const char* function, const char* argument) {
  T& dst = require(out, function, argument);
  if (dst.struct_size < v1_size<T>())
    throw Error(Errc::invalid_argument, std::string(function) + ": '" + argument + "'->struct_size is " +
                                            std::to_string(dst.struct_size) + ", expected at least " +
                                            std::to_string(v1_size<T>()) + " (set it to sizeof the struct)");
  const uint32_t n = std::min<uint32_t>(dst.struct_size, uint32_t(sizeof(T)));
  value.struct_size = n;
  std::memcpy(&dst, &value, n);
}

/// Reads the caller's struct (fields past its struct_size keep their defaults in `value`).
template <class T>
T read_sized(const T* in, T value, const char* function, const char* argument) {
  if (!in) return value;
  if (in->struct_size < v1_size<T>())
    throw Error(Errc::invalid_argument, std::string(function) + ": '" + argument + "'->struct_size is " +
                                            std::to_string(in->struct_size) + ", expected at least " +
                                            std::to_string(v1_size<T>()) + " (set it to sizeof the struct)");
  std::memcpy(&value, in, std::min<std::size_t>(in->struct_size, sizeof(T)));
  return value;
}

/// The DLPack device type of a backend's memory (0 if nibble knows none for its platform).
int32_t dlpack_device_of(const Backend& backend) noexcept;
/// "cpu", "cuda", "rocm", ... for a DLDeviceType.
std::string device_type_name(int32_t type);

}  // namespace nibble::capi
