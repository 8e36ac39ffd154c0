// nibble: the command line of the nibble W4A16 framework.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli.h"

namespace nibble::cli {

std::shared_ptr<Registry> open_registry() { return Registry::discover(); }

Policy make_policy(const CommonOptions& o) {
  Policy p;
  if (!o.config.empty()) {
    p = Policy::load_file(o.config);
    p.source = fmt::format("--config {}", o.config);
  } else {
    p = Policy::from_environment();
  }
  if (!o.backend.empty()) {
    p.pin_strict(o.backend);
    p.source = p.source.empty() ? fmt::format("--backend {}", o.backend)
                                : fmt::format("{} with --backend {}", p.source, o.backend);
  } else if (o.config.empty()) {
    // from_environment() already applied NIBBLE_BACKEND
  } else if (const char* b = std::getenv("NIBBLE_BACKEND"); b && *b) {
    p.pin_strict(b);
    p.source += fmt::format(" with NIBBLE_BACKEND={}", b);
  }
  return p;
}

}  // namespace nibble::cli

int main(int argc, char** argv) {
  using namespace nibble::cli;
  CLI::App app{"nibble: W4A16 linear layers of quantized LLM checkpoints on CPU, NVIDIA and AMD hardware"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("nibble ") + nibble::version());

  CommonOptions common;
  auto add_common = [&](CLI::App* sub, bool selection) {
    sub->add_flag("--json", common.json, "Machine-readable JSON on stdout");
    if (selection) {
      sub->add_option("--backend", common.backend, "Run only this backend (a strict pin; also NIBBLE_BACKEND)");
      sub->add_option("--config", common.config, "Policy TOML file (else NIBBLE_CONFIG)");
    }
  };

  auto* plugins = app.add_subcommand("plugins", "List the plugins found, their capabilities and probe results, and every file skipped with why");
  add_common(plugins, false);

  std::string dtype = "bf16";
  uint64_t seed = 1;
  auto* selftest = app.add_subcommand("selftest", "Run random layers of every scheme through the selected backend and compare with the reference kernel");
  add_common(selftest, true);
  selftest->add_option("--dtype", dtype, "Activation dtype: f16, bf16 or f32")->capture_default_str();
  selftest->add_option("--seed", seed, "Random seed")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*plugins) return cmd_plugins(common);
    if (*selftest) return cmd_selftest(common, dtype, seed);
  } catch (const nibble::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nibble: {}: {}\n", nibble::errc_name(e.code()), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "nibble: error: {}\n", e.what());
    return 2;
  }
  return 0;
}
