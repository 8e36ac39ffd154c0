// What the registry's three parts (discovery, backend wrappers, selection) share: the message
// buffer handed to plugins and the mapping of plugin statuses to nibble errors.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "nibble/error.h"
#include "nibble/plugin_abi.h"

namespace nibble::detail {

constexpr std::size_t kMsgCap = 2048;

/// The host-side buffer of a `char* msg, size_t msg_cap` pair.
struct Msg {
  char buf[kMsgCap] = {0};
  operator char*() noexcept { return buf; }
  std::string str(const char* fallback) const {
    std::string s(buf, strnlen(buf, kMsgCap));
    return s.empty() ? std::string(fallback) : s;
  }
};

/// "ok", "unsupported", "no device", ... for a plugin status (unknown values say so).
const char* status_name(int32_t status) noexcept;

/// The error code of a failed plugin call: each status its own code, so a host can tell "this
/// backend cannot" from "no device" from "out of memory"; an internal or unknown status is a
/// plugin fault.
Errc errc_of_status(int32_t status) noexcept;

/// A string from a plugin, bounded (a plugin may hand over anything).
inline std::string safe_str(const char* s, const char* fallback = "") {
  return s ? std::string(s, strnlen(s, 512)) : std::string(fallback);
}

}  // namespace nibble::detail
