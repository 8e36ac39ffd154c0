// bench_amx: where the AMX form's time goes, on one core of a CPU with AMX (issue 15). For each
// shape and M it times gemm_amx with parts left out (amx_diag.h: no tdpbf16ps, no tile loads, no
// dequantization, no segment ends, the tile work alone), rounds of the variants in turn, on one
// thread, weights prepared as the plugin prepares them (in cache after the first call: this is
// the compute side, the streaming side is `nibble bench`'s). Before timing, --check compares the
// full kernel with the core's reference on small layers (both activation dtypes, symmetric and
// asymmetric weights, M across the row-block cases) and exits 1 on a mismatch; --emulated runs
// that check on the tile emulation (amx_emulation.h) instead, on any CPU with AVX-512 VBMI.
//
//   bench_amx [--shapes 4096x4096,8192x10240] [--m 16,32,64,256] [--dtype bf16|f16]
//             [--budget SECONDS per point] [--check] [--emulated]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "amx_diag.h"
#include "amx_emulation.h"
#include "cpu_weights.h"
#include "kernel_choice.h"
#include "kernels.h"
#include "nibble/canonical.h"
#include "nibble/reference.h"

using namespace nibble;

namespace {

// One prepared call of the AMX form: the layer's weights as the plugin holds them, x gathered into
// the tile layout, y; `a` points into these buffers.
struct Call {
  cpu::CpuWeights cw;
  std::vector<float> xp, xs, y;
  cpu::FusedArgs a{};

  Call(const CanonicalLinear& w, const Tensor& x) {
    const nibble_linear_spec s = w.spec.to_abi();
    cw = cpu::prepare_cpu_weights(s, w.to_abi());
    const int64_t m = x.dim(0), steps = cpu::amx_tile_steps(cw), ldy = cpu::fused_y_stride(cw);
    cpu::XLayout l;
    l.form = w.spec.act_dtype == DType::f16 ? cpu::XForm::kBf16x2 : cpu::XForm::kBf16;
    l.rb = std::min<int64_t>(16, m);
    l.tile_steps = steps;
    xp.assign(size_t(cpu::x_buffer_words(cw, l, m)), 0.0f);
    xs.assign(size_t((m + l.rb - 1) / l.rb * cw.segments() * 2 * l.rb), 0.0f);
    y.assign(size_t(m * ldy), 0.0f);
    cpu::gather_x(cw, x.data(), s.act_dtype, l, m, xp.data(), xs.data(), cpu::TeamMember(nullptr, 0, 1));
    a = cpu::FusedArgs{&cw, xp.data(), xs.data(), m, l.rb,          y.data(),
                       ldy, false,     l.form,    0, cw.segments(), steps};
    a.prefetch = cpu::stream_prefetch();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  Tensor output(int64_t n) const {
    const int64_t m = a.m;
    Tensor out = Tensor::zeros(DType::f32, {m, n});
    float* o = out.mutable_data_as<float>();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) o[r * n + c] = y[size_t(r * a.ldy + c)];
    return out;
  }
};

LinearSpec spec_of(int64_t k, int64_t n, DType dt, WeightType wt, int g) {
  LinearSpec s;
  s.name = fmt::format("bench_amx.{}x{}.{}.{}.g{}", k, n, dtype_name(dt), weight_type_name(wt), g);
  s.k = k;
  s.n = n;
  s.group_size = g;
  s.weight_type = wt;
  s.act_dtype = dt;
  s.scale_dtype = dt;
  return s;
}

// The full kernel against the reference on small layers: the failures, printed.
int check(bool emulated) {
  int failures = 0, cases = 0;
  for (DType dt : {DType::bf16, DType::f16})
    for (WeightType wt : {WeightType::uint4b8, WeightType::uint4})
      for (int g : {128, -1})
        for (auto [k, n] : {std::pair<int64_t, int64_t>{512, 192}, {264, 72}})
          for (int64_t m : {16, 17, 33, 64}) {
            const LinearSpec s = spec_of(k, n, dt, wt, g);
            const CanonicalLinear w = random_canonical(s, uint64_t(cases) * 7919 + 3);
            const Tensor x = random_activations(m, k, dt, uint64_t(cases) + 11);
            Call c(w, x);
            if (emulated)
              cpu::amx::gemm_emulated(c.a, 0, c.cw.tiles);
            else
              cpu::amx::gemm_amx_diag(cpu::amx::Diag::full, c.a, 0, c.cw.tiles);
            const Comparison r =
                compare_to_reference(c.output(n), reference_linear(w, x), reference_magnitude(w, x), dt);
            ++cases;
            if (!r.ok) {
              ++failures;
              fmt::print(
                  "check FAILED: {} M={}: {} elements out of tolerance, worst [{}, {}] got {} want {}\n",
                  s.name, m, r.failures, r.worst_m, r.worst_n, r.worst_got, r.worst_want);
            }
          }
  fmt::print("check ({}): {} cases, {} failed\n", emulated ? "emulated tiles" : "AMX", cases, failures);
  return failures;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A positive number of a list option, or an error naming the option and what it found.
int64_t positive(const char* option, const std::string& v) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || n <= 0 || n > (int64_t(1) << 20))
    throw std::invalid_argument(
        fmt::format("{}: expected a positive integer up to 2^20, found '{}'", option, v));
  return n;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = std::min(s.find(',', b), s.size());
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_amx: where the AMX form's time goes, on one core"};
  std::string shapes = "4096x4096,8192x10240", ms = "16,32,64,256", dtype = "bf16";
  double budget = 0.3;
  bool want_check = false, emulated = false;
  app.add_option("--shapes", shapes, "KxN list");
  app.add_option("--m", ms, "M list");
  app.add_option("--dtype", dtype, "activation dtype")->check(CLI::IsMember({"bf16", "f16"}));
  app.add_option("--budget", budget, "seconds per point (all variants)")->check(CLI::Range(0.01, 60.0));
  app.add_flag("--check", want_check,
               "compare the full kernel with the reference first (exit 1 on a mismatch)");
  app.add_flag("--emulated", emulated, "only the check, on the tile emulation (no AMX needed)");
  CLI11_PARSE(app, argc, argv);
  // The lists, checked before anything runs (on any CPU).
  std::vector<std::pair<int64_t, int64_t>> layers;
  std::vector<int64_t> m_list;
  try {
    for (const std::string& sh : split(shapes)) {
      const size_t xpos = sh.find('x');
      if (xpos == std::string::npos)
        throw std::invalid_argument(fmt::format("--shapes: expected KxN, found '{}'", sh));
      layers.emplace_back(positive("--shapes K", sh.substr(0, xpos)),
                          positive("--shapes N", sh.substr(xpos + 1)));
    }
    for (const std::string& mstr : split(ms)) m_list.push_back(positive("--m", mstr));
    if (layers.empty() || m_list.empty())
      throw std::invalid_argument("--shapes and --m: expected at least one value each");
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_amx: {}\n", e.what());
    return 2;
  }

  if (emulated) {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx512vbmi")) {
      fmt::print("SKIP: this CPU lacks AVX-512 F/BW/VL/DQ/VBMI, which the AMX form's non-tile code uses\n");
      return 77;
    }
    return check(true) ? 1 : 0;
  }
  if (const char* why = cpu::amx_unavailable()) {
    fmt::print("SKIP: {}\n", why);
    return 77;
  }
  if (want_check && check(false)) return 1;

  try {
    const DType dt = dtype == "f16" ? DType::f16 : DType::bf16;
    fmt::print("{:>12} {:>5} {:>16} {:>11} {:>9} {:>8}\n", "shape", "M", "variant", "median us", "TFLOP/s",
               "x full");
    for (const auto& [k, n] : layers) {
      const std::string sh = fmt::format("{}x{}", k, n);
      const CanonicalLinear w = random_canonical(spec_of(k, n, dt, WeightType::uint4b8, 128), 1);
      for (const int64_t m : m_list) {
        const Tensor x = random_activations(m, k, dt, 2);
        Call c(w, x);
        // Rounds of the variants in turn, so that a change of the machine's state falls on all.
        constexpr int kRounds = 3;
        std::vector<std::vector<double>> times(std::size(cpu::amx::kDiags));
        const double share_us = budget * 1e6 / kRounds / double(std::size(cpu::amx::kDiags));
        for (size_t v = 0; v < std::size(cpu::amx::kDiags); ++v)  // warm-up
          cpu::amx::gemm_amx_diag(cpu::amx::kDiags[v], c.a, 0, c.cw.tiles);
        for (int r = 0; r < kRounds; ++r)
          for (size_t v = 0; v < std::size(cpu::amx::kDiags); ++v) {
            const double t0 = now_us();
            do {
              const double s = now_us();
              cpu::amx::gemm_amx_diag(cpu::amx::kDiags[v], c.a, 0, c.cw.tiles);
              times[v].push_back(now_us() - s);
            } while (now_us() - t0 < share_us);
          }
        double full = 0;
        for (size_t v = 0; v < times.size(); ++v) {
          std::vector<double>& t = times[v];
          std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
          const double med = t[t.size() / 2];
          if (v == 0) full = med;
          fmt::print("{:>12} {:>5} {:>16} {:>11.1f} {:>9.3f} {:>8.2f}\n", sh, m,
                     cpu::amx::diag_name(cpu::amx::kDiags[v]), med,
                     2.0 * double(m) * double(n) * double(k) / med * 1e-6, med / full);
        }
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_amx: {}\n", e.what());
    return 2;
  }
  return 0;
}
