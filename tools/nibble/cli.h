// Shared pieces of the nibble command line: options common to every command, and helpers.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "nibble/nibble.h"

namespace nibble::cli {

struct CommonOptions {
  std::string backend;      ///< --backend B: a strict pin
  std::string config;       ///< --config F: policy TOML (else NIBBLE_CONFIG)
  bool json = false;        ///< --json: machine-readable output on stdout
};

/// Discovers plugins with the default search path (NIBBLE_PLUGIN_PATH, then the install dir).
std::shared_ptr<Registry> open_registry();
/// The policy of --config / NIBBLE_CONFIG, with --backend / NIBBLE_BACKEND as a strict pin on top.
Policy make_policy(const CommonOptions& o);

int cmd_plugins(const CommonOptions& o);
int cmd_selftest(const CommonOptions& o, const std::string& dtype, uint64_t seed);

}  // namespace nibble::cli
