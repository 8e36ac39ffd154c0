// nibble: the command line of the nibble W4A16 framework.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench.h"
#include "cli.h"
#include "nibble/quantize.h"



int main(int argc, char** argv) {
  using namespace nibble::cli;
  CLI::App app{"nibble: 2/3/4/8-bit-weight linear layers of quantized LLM checkpoints on CPU, NVIDIA and AMD hardware"};
  // A group size is -1 (per channel) or positive; 0 and other negatives mean nothing.
  const CLI::Validator group_size_check(
      [](const std::string& v) {
        try {
          const long long g = std::stoll(v);
          return g == -1 || g > 0 ? std::string() : "expected -1 (per channel) or a positive group size, found " + v;
        } catch (const std::exception&) {
          return "expected an integer, found " + v;
        }
      },
      "-1|G>0");
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

  ModelOptions model;
  auto add_model = [&](CLI::App* sub) {
    sub->add_option("--model", model.model, "Checkpoint directory (config.json + safetensors)")->required();
    sub->add_option("--dtype", model.dtype, "Activation dtype f16, bf16 or f32 (default: the model's)");
    sub->add_option("--layer", model.layer, "Only layers matching this glob or re: pattern");
  };
  auto* explain = app.add_subcommand("explain", "Per layer: how it is stored, every backend's verdict, and the winner");
  add_common(explain, true);
  add_model(explain);

  auto* run = app.add_subcommand("run", "Run every quantized layer through the selected backend: per-layer backend, time and bandwidth");
  add_common(run, true);
  add_model(run);
  run->add_option("--batch", model.batch, "Rows M of the activations")->capture_default_str()->check(CLI::PositiveNumber);
  run->add_option("--iters", model.iters, "Timed repetitions per layer (the median is shown)")->capture_default_str()->check(CLI::PositiveNumber);
  run->add_flag("--check", model.check, "Also compare every layer's output with the reference kernel");

  auto* verify = app.add_subcommand("verify", "Compare a checkpoint with reference tensors (<layer>.codes, .weight, .x, .y); without --reference, lint it");
  add_common(verify, true);
  add_model(verify);
  verify->add_option("--reference", model.reference, "Reference safetensors file");

  auto* lint = app.add_subcommand("lint", "What a checkpoint's tensors say about themselves, without a reference: zero-point conventions, orientations, corrupted words, scales, code ranges");
  add_common(lint, false);
  add_model(lint);

  QuantizeCommand qc;
  auto* quantize = app.add_subcommand("quantize", "Write a quantized checkpoint (round to nearest) from a 16-bit model or random weights");
  add_common(quantize, false);
  quantize->add_option("--out", qc.out, "Output directory")->required();
  quantize->add_option("--from", qc.from, "A 16-bit Hugging Face model directory");
  quantize->add_option("--preset", qc.preset, "Random weights with these shapes: tiny, llama3-8b, llama3-70b, llama3-8b-fused, llama3-70b-fused");
  quantize->add_option("--blocks", qc.blocks, "Transformer blocks of the preset (default: the model's own)")->check(CLI::PositiveNumber);
  quantize->add_option("--bits", qc.bits, "Weight bits: 2, 3, 4 or 8 (as the format allows)")->capture_default_str()->check(CLI::IsMember({2, 3, 4, 8}));
  quantize->add_option("--format", qc.format, fmt::format("{}", fmt::join(nibble::output_format_names(), ", ")))->capture_default_str();
  quantize->add_option("--group", qc.group, "Group size (-1: per channel)")->capture_default_str()->check(group_size_check);
  quantize->add_flag("--asym", qc.asym, "Asymmetric (zero points); default symmetric");
  quantize->add_flag("--act-order", qc.act_order, "Act order (g_idx)");
  quantize->add_option("--dtype", qc.dtype, "Model dtype f16 or bf16")->capture_default_str();
  quantize->add_option("--seed", qc.seed, "Seed of random weights")->capture_default_str();
  quantize->add_option("--shard-mb", qc.shard_mb, "Shard the safetensors into files of at most this many MiB")->check(CLI::PositiveNumber);

  BenchOptions bo;
  auto* bench = app.add_subcommand("bench", "Kernel timings against the roofline and the dense baseline, measured in the same run");
  bench->add_option("--backend", bo.backends, "Backends to measure, comma-separated (default: the registry's choice)");
  bench->add_option("--config", common.config, "Policy TOML file (else NIBBLE_CONFIG)");
  bench->add_option("--shapes", bo.shapes, "Presets (llama3-8b, llama3-70b) or KxN, comma-separated")->capture_default_str();
  bench->add_option("--m", bo.m_list, "Values of M, comma-separated")->capture_default_str();
  bench->add_option("--g", bo.group, "Group size (-1: per channel)")->capture_default_str()->check(group_size_check);
  bench->add_option("--bits", bo.bits, "Weight bits: 2, 3, 4 or 8")->capture_default_str()->check(CLI::IsMember({2, 3, 4, 8}));
  bench->add_option("--dtype", bo.dtype, "Activation dtype (default: bf16 on CPUs, f16 on GPUs)");
  bench->add_flag("--asym", bo.asym, "Asymmetric weights (zero points); default uint4b8");
  bench->add_option("--iters", bo.iters, "Timed repetitions per point (default: adaptive)")->check(CLI::PositiveNumber);
  bench->add_option("--budget", bo.budget_s, "Seconds of timing per point when adaptive")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--rotate-mb", bo.rotate_mb, "Rotate weight copies totalling at least this many MiB")->capture_default_str()->check(CLI::PositiveNumber);
  bench->add_option("--json", bo.json_path, "Write the results as JSON to this file");
  bench->add_option("--svg", bo.svg_path, "Write a plot (% of roofline vs M) to this file");
  bench->add_option("--from-json", bo.from_json, "Draw --svg from a saved --json instead of measuring");
  bench->add_flag("--no-dense", bo.no_dense, "Skip the dense baseline");
  bench->add_option("--threads", bo.threads,
                    "Thread counts to run each shape with, comma-separated (the backend's num_threads option; the "
                    "bandwidth, peak and dense baseline are measured again for each)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*plugins) return cmd_plugins(common);
    if (*selftest) return cmd_selftest(common, dtype, seed);
    if (*explain) return cmd_explain(common, model);
    if (*run) return cmd_run(common, model);
    if (*verify) return cmd_verify(common, model);
    if (*lint) return cmd_lint(common, model);
    if (*quantize) return cmd_quantize(common, qc);
    if (*bench) {
      for (int i = 0; i < argc; ++i) bo.command_line += (i ? " " : "") + std::string(i == 0 ? "nibble" : argv[i]);
      return cmd_bench(common, bo);
    }
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
