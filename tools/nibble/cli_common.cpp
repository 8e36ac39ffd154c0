// Helpers shared by the commands: registry, policy, dtypes, byte counts, timing.
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli.h"

namespace nibble::cli {

std::shared_ptr<Registry> open_registry() { return Registry::discover(); }

Policy make_policy(const CommonOptions& o) {
  Policy p;
  if (!o.config.empty()) {
    p = Policy::load_file(o.config);
    p.source = fmt::format("--config {}", o.config);
    if (const char* b = std::getenv("NIBBLE_BACKEND"); b && *b && o.backend.empty()) {
      p.pin_strict(b);
      p.source += fmt::format(" with NIBBLE_BACKEND={}", b);
    }
  } else {
    p = Policy::from_environment();  // NIBBLE_CONFIG, then NIBBLE_BACKEND
  }
  if (!o.backend.empty()) {
    p.pin_strict(o.backend);
    p.source = p.source.empty() ? fmt::format("--backend {}", o.backend)
                                : fmt::format("{} with --backend {}", p.source, o.backend);
  }
  return p;
}

std::optional<DType> parse_act_dtype(const std::string& s) {
  if (s.empty()) return std::nullopt;
  auto d = parse_dtype(s);
  if (!d || (*d != DType::f16 && *d != DType::bf16 && *d != DType::f32))
    throw Error(Errc::invalid_argument, fmt::format("--dtype: expected f16, bf16 or f32, found '{}'", s));
  return d;
}

double layer_bytes(const LinearSpec& s, int64_t m) {
  const double groups = double(s.num_groups()), bits = double(s.bits);
  const double act = double(dtype_size(s.act_dtype));
  double b = double(s.k) * double(s.n) * bits / 8 + groups * double(s.n) * double(dtype_size(s.scale_dtype));
  if (!weight_type_symmetric(s.weight_type)) b += groups * double(s.n) * bits / 8;
  return b + act * double(m) * double(s.k + s.n);
}

void check_output_file(const std::string& path, const char* option) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec))
    throw Error(Errc::invalid_argument, fmt::format("{} {}: is a directory (expected a file to write)", option, path));
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (!fs::is_directory(dir, ec))
    throw Error(Errc::invalid_argument, fmt::format("{} {}: directory {} does not exist", option, path, dir.string()));
  if (::access(dir.c_str(), W_OK) != 0)
    throw Error(Errc::invalid_argument, fmt::format("{} {}: directory {} is not writable: {}", option, path, dir.string(),
                                                    std::strerror(errno)));
}

void write_output_file(const std::string& path, const char* option, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f << text;
  if (f) f.flush();
  if (!f) throw Error(Errc::io, fmt::format("{} {}: could not write the file: {}", option, path, std::strerror(errno)));
}

double time_apply(const PreparedLinear& p, const void* x, void* y, int64_t m, int iters) {
  Backend& b = p.backend();
  p.apply_device(x, y, m);  // warm-up (and first-call setup)
  b.sync();
  std::vector<double> us;
  for (int i = 0; i < std::max(1, iters); ++i) {
    if (b.has_device_timer()) {
      us.push_back(b.time_device([&](int32_t) { p.apply_device(x, y, m); }, 1) * 1e3);
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      p.apply_device(x, y, m);
      b.sync();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

}  // namespace nibble::cli
