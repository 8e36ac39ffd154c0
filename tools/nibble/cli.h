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

/// "f16" / "bf16" / "f32" -> DType; empty -> nullopt (the model's dtype). Throws for others.
std::optional<DType> parse_act_dtype(const std::string& s);

/// Refuses an output path that cannot be written (a directory, a missing or unwritable parent
/// directory), naming the option, before any work is done.
void check_output_file(const std::string& path, const char* option);
/// Writes `text` to `path` completely, or throws Errc::io naming the option and the reason.
void write_output_file(const std::string& path, const char* option, const std::string& text);

/// Bytes one apply() must move at least: packed weights (K*N*bits/8), scales, zero points, x and
/// y (PERF.md).
double layer_bytes(const LinearSpec& s, int64_t m);

/// Median time in microseconds of `iters` applies (after one warm-up), measured with the
/// backend's device timer where it has one, else the host clock around a synchronized call.
double time_apply(const PreparedLinear& p, const void* x, void* y, int64_t m, int iters);

int cmd_plugins(const CommonOptions& o);
int cmd_selftest(const CommonOptions& o, const std::string& dtype, uint64_t seed);

struct ModelOptions {
  std::string model;      ///< --model DIR
  std::string dtype;      ///< --dtype: activation dtype (default: the model's)
  int64_t batch = 1;      ///< --batch M (run)
  int iters = 5;          ///< --iters (run)
  bool check = false;     ///< --check (run): compare every layer with the reference kernel
  std::string reference;  ///< --reference FILE (verify; without it verify lints)
  std::string layer;      ///< --layer: only layers whose name matches this glob / re: pattern
};
int cmd_explain(const CommonOptions& o, const ModelOptions& m);
int cmd_run(const CommonOptions& o, const ModelOptions& m);
int cmd_verify(const CommonOptions& o, const ModelOptions& m);
int cmd_lint(const CommonOptions& o, const ModelOptions& m);

struct QuantizeCommand {
  std::string out, from, preset, format = "gptq", dtype = "f16";
  int blocks = 0, group = 128, bits = 4;
  bool asym = false, act_order = false;
  uint64_t seed = 1;
  double shard_mb = 0;
};
int cmd_quantize(const CommonOptions& o, const QuantizeCommand& q);

}  // namespace nibble::cli
