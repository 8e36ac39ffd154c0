// nibble bench: per shape and M, the kernel's median time, bandwidth, FLOP rate, % of the roofline
// and ratio to the plugin's dense baseline, all measured in one run; every kernel is checked
// against the reference first.
#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench.h"
#include "nibble/quantize.h"

namespace nibble::cli {

namespace {

using json = nlohmann::ordered_json;

struct Shape2 {
  std::string name;
  int64_t k, n;
};

// A whole decimal integer, or an error naming the option and the text.
int64_t parse_int(const std::string& text, const char* option) {
  std::size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw Error(Errc::invalid_argument, fmt::format("{}: expected an integer, found '{}'", option, text));
  return v;
}

// The non-empty items of a comma-separated list.
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<Shape2> parse_shapes(const std::string& spec) {
  std::vector<Shape2> out;
  for (const std::string& item : split_commas(spec)) {
    if (auto x = item.find('x'); x != std::string::npos && std::isdigit(uint8_t(item[0]))) {
      const int64_t k = parse_int(item.substr(0, x), "--shapes"), n = parse_int(item.substr(x + 1), "--shapes");
      if (k <= 0 || n <= 0) throw Error(Errc::invalid_argument, fmt::format("--shapes: bad shape '{}'", item));
      out.push_back({item, k, n});
      continue;
    }
    // A preset: its distinct (K, N) pairs, as in PERF.md.
    const auto names = preset_names();
    if (std::find(names.begin(), names.end(), item) == names.end())
      throw Error(Errc::invalid_argument,
                  fmt::format("--shapes: unknown preset '{}' (expected KxN or one of {})", item, fmt::join(names, ", ")));
    const std::string preset = item.ends_with("-fused") ? item : item + "-fused";
    for (const auto& l : preset_layers(preset, 1)) {
      const std::string name = fmt::format("{}x{}", l.k, l.n);
      if (std::none_of(out.begin(), out.end(), [&](const Shape2& s) { return s.name == name; }))
        out.push_back({name, l.k, l.n});
    }
  }
  return out;
}

std::vector<int64_t> parse_ms(const std::string& spec) {
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(spec)) {
    const int64_t m = parse_int(item, "--m");
    if (m < 1) throw Error(Errc::invalid_argument, fmt::format("--m: expected values >= 1, found {}", m));
    out.push_back(m);
  }
  return out;
}

std::vector<int> parse_threads(const std::string& spec) {
  std::vector<int> out;
  for (const std::string& item : split_commas(spec)) {
    const int64_t t = parse_int(item, "--threads");
    if (t < 1 || t > 4096) throw Error(Errc::invalid_argument, fmt::format("--threads: expected values 1..4096, found {}", t));
    out.push_back(int(t));
  }
  return out;
}

// The first line of `path`, or "".
std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// What a reader needs to compare CPU results between machines: the model, the CPUs this process
// may use, the instruction sets the kernels choose from, the last-level cache and NUMA nodes.
json host_cpu() {
  std::string model, flags;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && model.empty()) model = value;
    if (key == "flags" && flags.empty()) flags = value;
  }
#if defined(__x86_64__) || defined(__i386__)
  if (model.empty()) {  // the brand string, CPUID leaves 0x80000002-4
    unsigned r[12] = {};
    if (__get_cpuid(0x80000002, &r[0], &r[1], &r[2], &r[3]) && __get_cpuid(0x80000003, &r[4], &r[5], &r[6], &r[7]) &&
        __get_cpuid(0x80000004, &r[8], &r[9], &r[10], &r[11]))
      model.assign(reinterpret_cast<const char*>(r), sizeof r);
    model = model.substr(0, model.find('\0'));
  }
#endif
  json isa = json::array();
  std::istringstream fl(" " + flags + " ");
  const std::vector<std::string> wanted = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
                                           "avx512_fp16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8"};
  for (std::string f; fl >> f;)
    if (std::find(wanted.begin(), wanted.end(), f) != wanted.end()) isa.push_back(f);
  cpu_set_t set;
  int allowed = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
  int nodes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec))
    if (e.path().filename().string().rfind("node", 0) == 0 && std::isdigit(uint8_t(e.path().filename().string().back()))) ++nodes;
  std::string llc;
  for (int i = 0; i < 8; ++i) {
    const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
    if (first_line(dir + "level").empty()) break;
    if (first_line(dir + "type") != "Instruction") llc = fmt::format("L{} {}", first_line(dir + "level"), first_line(dir + "size"));
  }
  return {{"cpu_model", model}, {"cpus_online", sysconf(_SC_NPROCESSORS_ONLN)}, {"cpus_allowed", allowed}, {"isa", isa},
          {"last_level_cache", llc.empty() ? json(nullptr) : json(llc)}, {"numa_nodes", nodes}};
}

// A shape's points are timed again when the bandwidth readings just before and just after them
// differ by more than this factor (the machine changed state in between), at most this often.
constexpr double kBandwidthDrift = 1.15;
constexpr int kBandwidthRetries = 2;

// Times fn(i) (call i of a rotation) and returns the median microseconds of one call, or the
// fastest call with `best` (for ceilings: the best the machine showed, not a typical call).
template <class Fn>
double measure(Backend& b, Fn&& fn, int copies, int fixed_iters, double budget_s, bool best = false) {
  fn(0);  // warm-up
  b.sync();
  const auto t0 = std::chrono::steady_clock::now();
  fn(1 % copies);
  b.sync();
  const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int reps = fixed_iters > 0 ? fixed_iters : int(std::clamp(budget_s / std::max(first, 1e-7), 3.0, 200.0));
  std::vector<double> us;
  if (b.has_device_timer()) {
    // Device timers around a whole rotation (one batch of `copies` calls), reported per call.
    const int batch = std::max(1, copies);
    reps = std::max(3, reps / batch);
    for (int r = 0; r < reps; ++r) us.push_back(b.time_device([&](int32_t i) { fn(i); }, batch) * 1e3 / batch);
  } else {
    for (int r = 0; r < reps; ++r) {
      const auto s = std::chrono::steady_clock::now();
      fn(r % copies);
      b.sync();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count());
    }
  }
  if (best) return *std::min_element(us.begin(), us.end());
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

double measure_bandwidth(Backend& b) {
  const std::size_t bytes = std::size_t(1) << 30;
  try {
    if (auto bps = b.measure_bandwidth(bytes); bps && *bps > 0) return *bps;
  } catch (const Error&) {  // the plugin's own measurement failed: the copy below still measures
  }

  // Fallback: a device-to-device copy, counting bytes read and written.
  DeviceBuffer a = b.alloc(bytes), c = b.alloc(bytes);
  b.copy(c.get(), a.get(), bytes, NIBBLE_COPY_DEVICE_TO_DEVICE);
  b.sync();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    b.copy(c.get(), a.get(), bytes, NIBBLE_COPY_DEVICE_TO_DEVICE);
    b.sync();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * double(bytes) / best;
}

// A dense baseline for a [K, N] weight, or null with the reason.
std::shared_ptr<DenseLinear> make_dense(Backend& b, const LinearSpec& spec, const Tensor& weight_kn, std::string& why) {
  if (!b.has_dense()) {
    why = "the plugin has no dense baseline";
    return nullptr;
  }
  try {
    return b.dense(spec, weight_kn);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

// Checks a sample of y (a few rows, 64 columns spread over N) against the reference.
Comparison check_sample(const CanonicalLinear& w, const Tensor& x, const Tensor& y) {
  const int64_t m = x.dim(0), K = w.spec.k, N = w.spec.n;
  std::vector<int64_t> rows, cols;
  for (int64_t r = 0; r < std::min<int64_t>(m, 4); ++r) rows.push_back(r);
  if (m > 4) rows.push_back(m - 1);
  const int64_t nc = std::min<int64_t>(N, 64);
  for (int64_t c = 0; c < nc; ++c) cols.push_back(c * N / nc + (c * 7) % std::max<int64_t>(1, N / nc));
  Tensor got = Tensor::zeros(DType::f64, {int64_t(rows.size()), nc}), ref = got.clone(), mag = got.clone();
  for (std::size_t ci = 0; ci < cols.size(); ++ci) {
    const int64_t n = cols[ci];
    std::vector<double> wcol(static_cast<std::size_t>(K));
    for (int64_t k = 0; k < K; ++k) wcol[std::size_t(k)] = w.weight(k, n);
    for (std::size_t ri = 0; ri < rows.size(); ++ri) {
      const int64_t r = rows[ri];
      double acc = w.bias.empty() ? 0 : w.bias.at(std::size_t(n)), a = std::fabs(acc);
      for (int64_t k = 0; k < K; ++k) {
        const double t = x.at(std::size_t(r * K + k)) * wcol[std::size_t(k)];
        acc += t, a += std::fabs(t);
      }
      const std::size_t o = ri * std::size_t(nc) + ci;
      got.mutable_data_as<double>()[o] = y.at(std::size_t(r * N + n));
      ref.mutable_data_as<double>()[o] = acc;
      mag.mutable_data_as<double>()[o] = a;
    }
  }
  return compare_to_reference(got, ref, mag, w.spec.act_dtype);
}

// The points of a saved --json, for --from-json: every field the plot reads, checked.
std::vector<BenchPoint> saved_points(const std::string& path, int& bits, int& group, std::string& where) {
  constexpr std::uintmax_t kMaxBytes = 256ull << 20;
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw Error(Errc::invalid_argument, fmt::format("--from-json {}: expected a regular file (a saved --json)", path));
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(Errc::not_found, fmt::format("--from-json {}: {}", path, ec.message()));
  if (size > kMaxBytes) throw Error(Errc::limit, fmt::format("--from-json {}: {} bytes (at most {})", path, size, kMaxBytes));
  std::ifstream f(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::format, fmt::format("--from-json {}: not valid JSON: {}", path, e.what()));
  }
  const auto bad = [&](const std::string& what) {
    return Error(Errc::format, fmt::format("--from-json {}: {} (expected the JSON of nibble bench --json)", path, what));
  };
  if (!doc.is_object() || !doc.contains("results") || !doc["results"].is_array()) throw bad("no 'results' list");
  if (!doc.value("bits", nlohmann::json(4)).is_number_integer() || !doc.value("group_size", nlohmann::json(128)).is_number_integer())
    throw bad("'bits' or 'group_size' is not an integer");
  bits = doc.value("bits", 4);
  group = doc.value("group_size", 128);
  // Where it ran, for the title: the first backend's activations and device.
  if (auto b = doc.find("backends"); b != doc.end() && b->is_array() && !b->empty() && (*b)[0].is_object()) {
    const auto str = [&](const char* key) {
      const auto it = (*b)[0].find(key);
      return it != (*b)[0].end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    const std::string dt = str("dtype"), dev = str("device");
    where = dt + (dt.empty() || dev.empty() ? "" : ", ") + dev.substr(0, dev.find(','));
  }
  std::vector<BenchPoint> points;
  for (const auto& r : doc["results"]) {
    const auto num = [&](const char* key, bool required) -> double {
      const auto it = r.find(key);
      if (it == r.end() || it->is_null()) {
        if (required) throw bad(fmt::format("result {} has no '{}'", points.size(), key));
        return 0;
      }
      if (!it->is_number()) throw bad(fmt::format("result {}: '{}' is not a number", points.size(), key));
      return it->get<double>();
    };
    if (!r.is_object() || !r.contains("backend") || !r["backend"].is_string() || !r.contains("shape") ||
        !r["shape"].is_string())
      throw bad(fmt::format("result {} has no backend or shape", points.size()));
    BenchPoint p;
    p.backend = r["backend"].get<std::string>();
    p.shape = r["shape"].get<std::string>();
    p.m = int64_t(num("m", true));
    p.threads = int(num("threads", false));
    p.time_us = num("time_us", true);
    p.roofline_us = num("roofline_us", true);
    p.dense_us = num("dense_us", false);
    if (p.m < 1 || !(p.time_us > 0) || !(p.roofline_us > 0) || p.dense_us < 0)
      throw bad(fmt::format("result {}: m, time_us or roofline_us not positive", points.size()));
    points.push_back(p);
  }
  if (points.empty()) throw bad("no results");
  return points;
}

// One line per backend and thread count.
std::string plot(std::vector<BenchPoint> points, int bits, int group, const std::string& where = "") {
  for (auto& p : points)
    if (p.threads > 0) p.backend += fmt::format(" {}t", p.threads);
  return bench_svg(points, fmt::format("nibble bench, {}-bit, G={}{}: % of roofline vs M", bits, group,
                                       where.empty() ? "" : " (" + where + ")"));
}

}  // namespace

int cmd_bench(const CommonOptions& o, const BenchOptions& opt) {
  if (!opt.from_json.empty()) {
    if (opt.svg_path.empty()) throw Error(Errc::invalid_argument, "--from-json: give --svg, the plot to draw");
    check_output_file(opt.svg_path, "--svg");
    int bits = 4, group = 128;
    std::string where;
    const std::vector<BenchPoint> points = saved_points(opt.from_json, bits, group, where);
    write_output_file(opt.svg_path, "--svg", plot(points, bits, group, where));
    return 0;
  }
  // Where the results go is checked before an hour of timing, not after.
  if (!opt.json_path.empty()) check_output_file(opt.json_path, "--json");
  if (!opt.svg_path.empty()) check_output_file(opt.svg_path, "--svg");
  const WeightType weight_type = weight_type_of(opt.bits, !opt.asym);
  auto reg = open_registry();
  const auto shapes = parse_shapes(opt.shapes);
  const auto ms = parse_ms(opt.m_list);
  const bool tty = isatty(fileno(stderr));
  std::vector<std::shared_ptr<Backend>> backends;
  {
    const std::string list = opt.backends.empty() ? o.backend : opt.backends;
    if (list.empty()) {
      LinearSpec probe_spec;
      probe_spec.k = 4096; probe_spec.n = 4096; probe_spec.group_size = opt.group; probe_spec.act_dtype = DType::bf16;
      probe_spec.scale_dtype = DType::bf16;
      backends.push_back(reg->select_or_throw(probe_spec, make_policy(o)));
    }
    for (const std::string& name : split_commas(list)) {
      auto b = reg->find(name);
      if (!b) throw Error(Errc::no_backend, reg->missing_backend(name));
      if (!b->probe().available) throw Error(Errc::no_backend, fmt::format("backend '{}': {}", name, b->probe().message));
      backends.push_back(b);
    }
  }

  std::vector<BenchPoint> points;
  const std::vector<int> thread_counts = opt.threads.empty() ? std::vector<int>{0} : parse_threads(opt.threads);
  json out = {{"command", opt.command_line}, {"nibble", version()}, {"host", host_cpu()}, {"group_size", opt.group},
              {"bits", opt.bits}, {"weight_type", weight_type_name(weight_type)},
              {"backends", json::array()}, {"results", json::array()}};
  std::size_t total_points = backends.size() * shapes.size() * ms.size() * thread_counts.size(), done = 0;
  const auto start_time = std::chrono::steady_clock::now();

  for (const auto& bp : backends) {
    Backend& b = *bp;
    const bool cpu = b.platform() == "cpu";
    DType dtype = opt.dtype.empty() ? (cpu ? DType::bf16 : DType::f16) : *parse_act_dtype(opt.dtype);
    // The thread counts of --threads, in turn, through the backend's num_threads option (0: leave
    // the backend's default). Its value in the JSON: what was set, else NIBBLE_NUM_THREADS, else
    // null (the backend's default; a CPU plugin's probe message, "device", says how many).
    const auto use_threads = [&](int t) {
      if (t > 0) b.set_option("num_threads", std::to_string(t));
    };
    const auto threads_json = [&](int t) -> json {
      if (t > 0) return t;
      const char* env = std::getenv("NIBBLE_NUM_THREADS");
      return env && std::atoi(env) > 0 ? json(std::atoi(env)) : json(nullptr);
    };
    if (thread_counts.front() > 0 && !b.has_option_support())
      throw Error(Errc::unsupported, fmt::format("--threads: backend {} takes no options", b.name()));
    std::vector<double> peaks;
    for (int threads : thread_counts) {
      use_threads(threads);
      // Ceilings, measured now, on this machine: bandwidth and the dense 16-bit matmul rate.
      const double bw_start = measure_bandwidth(b);
      // F: the fastest dense matmul the plugin's vendor library runs here, in the activation dtype
      // or, where that is slower (bf16 without bf16 units), in f32.
      double peak = 0;
      std::string peak_note = "no dense baseline";
      if (!opt.no_dense) {
        const int64_t sq = cpu ? 4096 : 8192;
        std::vector<DType> kinds = {dtype};
        if (dtype != DType::f32 && cpu) kinds.push_back(DType::f32);
        for (DType pd : kinds) {
          LinearSpec s;
          s.name = "peak"; s.k = sq; s.n = sq; s.act_dtype = pd; s.scale_dtype = pd == DType::f32 ? DType::f16 : pd;
          Tensor wkn = Tensor::zeros(pd, {sq, sq});
          std::string why;
          auto d = make_dense(b, s, wkn, why);
          if (!d) {
            if (peak == 0) peak_note = why;
            continue;
          }
          DeviceBuffer dx = b.alloc(std::size_t(sq * sq) * dtype_size(pd)), dy = b.alloc(std::size_t(sq * sq) * dtype_size(pd));
          const double us = measure(b, [&](int) { d->apply_device(dx.get(), dy.get(), sq); }, 1, cpu ? 5 : 20, 1.0, true);
          const double f = 2.0 * double(sq) * double(sq) * double(sq) / (us * 1e-6);
          if (f > peak) {
            peak = f;
            peak_note = fmt::format("dense {} matmul {}^3", dtype_name(pd), sq);
          }
        }
      }
      peaks.push_back(peak);
      const std::string with = threads > 0 ? fmt::format(", {} threads", threads) : "";
      if (!o.json)
        fmt::print("backend {} ({}{}): bandwidth {:.1f} GB/s, peak {:.1f} GFLOP/s ({}), {} activations, G={}\n", b.name(),
                   b.probe().message, with, bw_start * 1e-9, peak * 1e-9, peak_note, dtype_name(dtype), opt.group);
      out["backends"].push_back({{"name", b.name()}, {"version", b.version()}, {"device", b.probe().message},
                                 {"threads", threads_json(threads)}, {"bandwidth_gbps", bw_start * 1e-9},
                                 {"peak_gflops", peak * 1e-9}, {"peak_from", peak_note},
                                 {"dtype", std::string(dtype_name(dtype))}});
    }
    if (!o.json)
      fmt::print("{:<12} {:>5} {:>3}  {:<18} {:>10} {:>8} {:>9} {:>9} {:>7} {:>10} {:>8}  {}\n", "shape", "M", "thr", "kernel",
                 "time us", "GB/s", "GFLOP/s", "t_min us", "%roof", "dense us", "x dense", "check");

    for (const auto& sh : shapes) {
      LinearSpec spec;
      spec.name = "bench." + sh.name;
      spec.k = sh.k; spec.n = sh.n; spec.group_size = opt.group;
      spec.weight_type = weight_type;
      spec.bits = opt.bits;
      spec.act_dtype = dtype;
      spec.scale_dtype = dtype == DType::f32 ? DType::f16 : dtype;
      if (auto why = b.check_capabilities(spec); !why.empty()) throw Error(Errc::unsupported, fmt::format("{}: {}: {}", b.name(), sh.name, why));
      if (auto why = b.can_implement(spec); !why.empty()) throw Error(Errc::unsupported, fmt::format("{}: {}: {}", b.name(), sh.name, why));
      CanonicalLinear w = random_canonical(spec, 42 + uint64_t(sh.k * 7 + sh.n));
      const double wbytes = layer_bytes(spec, 0);
      const int copies = int(std::clamp(std::ceil(opt.rotate_mb * 1048576.0 / wbytes), 1.0, 64.0));
      std::vector<std::shared_ptr<PreparedLinear>> prepared;
      for (int c = 0; c < copies; ++c) prepared.push_back(b.prepare(w));
      // Dense baseline weights: the same dequantized matrix in the activation dtype.
      std::vector<std::shared_ptr<DenseLinear>> dense;
      std::string dense_why;
      if (!opt.no_dense && b.has_dense()) {
        Tensor wkn = dequantize(w).to(dtype);
        const int dcopies = int(std::clamp(std::ceil(opt.rotate_mb * 1048576.0 / double(wkn.nbytes())), 1.0, 16.0));
        for (int c = 0; c < dcopies; ++c) {
          dense.push_back(make_dense(b, spec, wkn, dense_why));
          if (!dense.back()) { dense.clear(); break; }
        }
      }
      for (std::size_t ti = 0; ti < thread_counts.size(); ++ti) {
        const int threads = thread_counts[ti];
        const double peak = peaks[ti];
        use_threads(threads);
        // The bandwidth ceiling of this shape's points: the larger of two measurements, just before
        // and just after them (machines shared with other tenants move it by tens of percent within
        // a run; the larger reading never flatters the kernel). Where the two differ by more than
        // kBandwidthDrift the machine changed state while the points ran: they are timed again, up
        // to kBandwidthRetries times, and the last attempt is kept.
        double bw_before = 0, bw_after = 0;
        std::vector<BenchPoint> shape_points;
        std::vector<Comparison> checks;
        int retries = 0;
        for (;; ++retries) {
          bw_before = measure_bandwidth(b);
          shape_points.clear();
          checks.clear();
          for (int64_t m : ms) {
            Tensor x = random_activations(m, sh.k, dtype, 7 + uint64_t(m));
            DeviceBuffer dx = b.alloc(x.nbytes()), dy = b.alloc(std::size_t(m * sh.n) * dtype_size(dtype));
            dx.upload(x.data(), x.nbytes());
            // Correct first: the kernel this M selects is checked before it is timed.
            prepared[0]->apply_device(dx.get(), dy.get(), m);
            b.sync();
            Tensor y = Tensor::zeros(dtype, {m, sh.n});
            dy.download(y.mutable_data(), y.nbytes());
            const Comparison c = check_sample(w, x, y);
            BenchPoint p;
            p.backend = b.name(); p.shape = sh.name; p.k = sh.k; p.n = sh.n; p.m = m; p.threads = threads;
            p.kernel = prepared[0]->kernel_name(m);
            p.checked = true; p.check_ok = c.ok; p.check_err_over_tol = c.max_rel_to_tol;
            p.time_us = measure(b, [&](int i) { prepared[std::size_t(i) % prepared.size()]->apply_device(dx.get(), dy.get(), m); },
                                copies, opt.iters, opt.budget_s);
            if (!dense.empty())
              p.dense_us = measure(b, [&](int i) { dense[std::size_t(i) % dense.size()]->apply_device(dx.get(), dy.get(), m); },
                                   int(dense.size()), opt.iters, opt.budget_s);
            shape_points.push_back(p);
            checks.push_back(c);
            ++done;
            if (tty) {
              const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
              fmt::print(stderr, "\r\033[K[{}/{}] {:.0f} s  {} {} M={}", done, total_points, el, b.name(), sh.name, m);
            }
          }
          bw_after = measure_bandwidth(b);
          if (tty) fmt::print(stderr, "\r\033[K");
          const bool drifted = std::max(bw_before, bw_after) > kBandwidthDrift * std::min(bw_before, bw_after);
          if (!drifted || retries == kBandwidthRetries) break;
          if (!o.json)
            fmt::print("  {}: bandwidth {:.1f} GB/s before its points, {:.1f} after: timing them again\n", sh.name,
                       bw_before * 1e-9, bw_after * 1e-9);
          done -= shape_points.size();
        }
        const double bw = std::max(bw_before, bw_after);
        if (!o.json)
          fmt::print("  {}{}: bandwidth {:.1f} GB/s before its points, {:.1f} after\n", sh.name,
                     threads > 0 ? fmt::format(", {} threads", threads) : "", bw_before * 1e-9, bw_after * 1e-9);
        for (std::size_t i = 0; i < shape_points.size(); ++i) {
          BenchPoint& p = shape_points[i];
          const Comparison& c = checks[i];
          const int64_t m = p.m;
          const double bytes = layer_bytes(spec, m), flops = 2.0 * double(m) * double(sh.n) * double(sh.k);
          p.roofline_us = std::max(bytes / bw, peak > 0 ? flops / peak : 0.0) * 1e6;
          p.gbps = bytes / p.time_us * 1e-3;
          p.gflops = flops / p.time_us * 1e-3;
          points.push_back(p);
          if (!o.json) {
            fmt::print("{:<12} {:>5} {:>3}  {:<18} {:>10.1f} {:>8.1f} {:>9.1f} {:>9.1f} {:>6.1f}% {:>10} {:>8}  {}\n", sh.name, m,
                       threads > 0 ? std::to_string(threads) : "-", p.kernel, p.time_us, p.gbps, p.gflops, p.roofline_us, 100.0 * p.roofline_us / p.time_us,
                       p.dense_us > 0 ? fmt::format("{:.1f}", p.dense_us) : "-",
                       p.dense_us > 0 ? fmt::format("{:.2f}x", p.dense_us / p.time_us) : "-",
                       c.ok ? "ok" : fmt::format("MISMATCH ({:.1f}x tol)", c.max_rel_to_tol));
            std::fflush(stdout);
          }
          out["results"].push_back({{"backend", p.backend}, {"shape", p.shape}, {"k", p.k}, {"n", p.n}, {"m", p.m},
                                    {"kernel", p.kernel}, {"threads", threads_json(threads)}, {"time_us", p.time_us},
                                    {"gbps", p.gbps}, {"gflops", p.gflops},
                                    {"roofline_us", p.roofline_us}, {"pct_roofline", 100.0 * p.roofline_us / p.time_us},
                                    {"bandwidth_gbps", bw * 1e-9}, {"bandwidth_before_gbps", bw_before * 1e-9},
                                    {"bandwidth_after_gbps", bw_after * 1e-9}, {"bandwidth_retries", retries},
                                    {"dense_us", p.dense_us > 0 ? json(p.dense_us) : json(nullptr)},
                                    {"speedup_vs_dense", p.dense_us > 0 ? json(p.dense_us / p.time_us) : json(nullptr)},
                                    {"check_ok", c.ok}, {"check_err_over_tol", c.max_rel_to_tol}});
        }
      }
      if (!dense_why.empty() && !o.json) fmt::print("  (no dense baseline: {})\n", dense_why);
      // The JSON so far after every shape, so that a run stopped by a time limit keeps its shapes.
      if (!opt.json_path.empty()) {
        const std::string tmp = opt.json_path + ".part";
        write_output_file(tmp, "--json", out.dump(2) + "\n");
        std::filesystem::rename(tmp, opt.json_path);
      }
    }
  }
  if (tty) fmt::print(stderr, "\r\033[K");
  int bad = 0;
  for (const auto& p : points) bad += p.check_ok ? 0 : 1;
  if (!opt.json_path.empty()) write_output_file(opt.json_path, "--json", out.dump(2) + "\n");
  if (!opt.svg_path.empty()) write_output_file(opt.svg_path, "--svg", plot(points, opt.bits, opt.group));
  if (o.json) fmt::print("{}\n", out.dump(2));
  if (bad) fmt::print(stderr, "nibble bench: {} point(s) FAILED the correctness check\n", bad);
  return bad ? 1 : 0;
}

}  // namespace nibble::cli
