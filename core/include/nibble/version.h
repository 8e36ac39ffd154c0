#pragma once

namespace nibble {
/// The version of the nibble core library, e.g. "0.1.0".
const char* version() noexcept;
}  // namespace nibble
