// nibble quantize: writes real checkpoints (config.json + safetensors) in every supported format.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <unistd.h>

#include "cli.h"
#include "nibble/quantize.h"

namespace nibble::cli {

int cmd_quantize(const CommonOptions&, const QuantizeCommand& q) {
  if (q.from.empty() == q.preset.empty())
    throw Error(Errc::invalid_argument, "give exactly one of --from DIR (a 16-bit model) or --preset NAME (random weights)");
  QuantizeOptions o;
  o.format = q.format;
  o.group_size = q.group;
  o.bits = q.bits;
  o.symmetric = !q.asym;
  o.act_order = q.act_order;
  auto dt = parse_dtype(q.dtype);
  if (!dt) throw Error(Errc::invalid_argument, fmt::format("--dtype: expected f16 or bf16, found '{}'", q.dtype));
  o.dtype = *dt;
  o.seed = q.seed;
  o.max_shard_bytes = uint64_t(q.shard_mb * 1048576.0);
  const auto t0 = std::chrono::steady_clock::now();
  const bool tty = isatty(fileno(stderr));
  Progress progress = [&](std::size_t done, std::size_t total, const std::string& layer) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (done == total) {
      fmt::print(stderr, "{}quantized {} layer(s) in {:.1f} s\n", tty ? "\r\033[K" : "", total, s);
    } else if (tty || done % 16 == 0) {
      fmt::print(stderr, "{}[{}/{}] {:.1f} s  {}{}", tty ? "\r\033[K" : "", done + 1, total, s, layer, tty ? "" : "\n");
    }
  };
  if (!q.preset.empty()) write_random_model(q.out, q.preset, q.blocks, o, progress);
  else quantize_model_dir(q.from, q.out, o, progress);
  fmt::print("wrote {} ({}, G{}, {}{})\n", q.out, o.format, o.group_size, o.symmetric ? "symmetric" : "asymmetric",
             o.act_order ? ", act order" : "");
  return 0;
}

}  // namespace nibble::cli
