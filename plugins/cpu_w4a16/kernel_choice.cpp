#include "kernel_choice.h"

#include <asm/prctl.h>
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "nibble/dtype.h"

namespace nibble::cpu {

namespace {

bool cpu_is_intel() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  char vendor[13];
  std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
  vendor[12] = 0;
  return std::strcmp(vendor, "GenuineIntel") == 0;
}

// printf into a std::string (the plugin does not link fmt).
std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* format, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
const char* avx512bf16_unavailable() {
  return has_avx512() && __builtin_cpu_supports("avx512bf16") ? nullptr : "this CPU lacks AVX-512 BF16";
}
const char* avx512_unavailable() { return has_avx512() ? nullptr : "this CPU lacks AVX-512 F/BW/VL/DQ"; }
const char* avx512vnni_unavailable() {
  return has_avx512() && __builtin_cpu_supports("avx512vnni") ? nullptr : "this CPU lacks AVX-512 VNNI";
}
const char* avx2_unavailable() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")
             ? nullptr
             : "this CPU lacks AVX2, FMA or F16C";
}
const char* always_available() { return nullptr; }

bool cpu_has_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u);
}

// The menu, in order of preference where calibrated times tie. Quantum, chunk and min_quanta:
// the one-tile forms are bandwidth-bound and hand out single tiles; the GEMM forms hand out whole
// column blocks (gemm-avx512bf16's 4 tiles of accumulators, the AMX form's pairs of tiles,
// gemm-avx2's single tiles) and prefer ranges of their cache blocking (32 tiles:
// kernel_gemm_impl.h's Blocking, the AMX form's column block); below min_quanta quanta (8 tiles)
// per member apply splits K as well.
// two_bit: the forms with a 2-bit kernel (all of them today). bytes: the forms that multiply an
// 8-bit layer's bytes as codes (XForm::kF32Bytes, kInt8Bytes) instead of its nibble rows:
// fused-avx512, fused-avx2 and dot-avx512vnni (dot-avx2's vpmaddubsw would saturate: 2 x 255 x
// 127 > 2^15; fused-portable and the GEMM forms read nibble rows).
// prior_from of gemm-avx2, 0 (calibrated only): on a Zen 3 it was faster than fused-avx2 from
// M = 3 on, from memory as in cache (docs/benchmarks.md, "gemm-avx2").
// prior_from of gemm-amx, 6: streaming from memory on the AMX Xeon host it was faster than
// fused-avx512 from M = 6 on every llama layer at 2, 4 and 16 threads, where the calibrations
// from cache put the crossover anywhere from 8 to 16, and tied at M = 4 (docs/benchmarks.md,
// "Kernel choice on each CPU" and "gemm-amx from M = 6").
// prior_from of the dot forms, 0 (calibrated only): new, not yet measured streaming from memory.
constexpr XKind kF32 = XKind::kF32, kBf16 = XKind::kBf16, kInt8 = XKind::kInt8;
const KernelForm kKernelForms[] = {
    {"fused-avx512bf16", fused_avx512bf16, true, false, kBf16, 8, false, false, 1, 1, 8, 1, avx512bf16_unavailable},
    {"gemm-amx", gemm_amx, true, false, kBf16, 16, true, true, 2, 8, 2, 6, amx_unavailable},
    {"gemm-avx512bf16", gemm_avx512bf16, true, false, kBf16, kGemmRows, false, true, 4, 32, 2, 32, avx512bf16_unavailable},
    {"fused-avx512", fused_avx512, true, true, kF32, 8, false, false, 1, 1, 8, 1, avx512_unavailable},
    {"dot-avx512vnni", dot_avx512vnni, true, true, kInt8, kDotRows, false, false, 1, 1, 8, 0, avx512vnni_unavailable},
    {"fused-avx2", fused_avx2, true, true, kF32, 3, false, false, 1, 1, 8, 1, avx2_unavailable},
    {"gemm-avx2", gemm_avx2, true, false, kF32, kGemmRowsAvx2, false, true, 1, 32, 8, 0, avx2_unavailable},
    {"dot-avx2", dot_avx2, true, false, kInt8, 1, false, false, 1, 1, 8, 0, avx2_unavailable},
    {"fused-portable", fused_portable, true, false, kF32, 1, false, false, 1, 1, 8, 1, always_available},
};

// NIBBLE_CPU_ISA's families: a one-tile form and its GEMM form, if any.
struct Family {
  const char* isa;
  const char* forms[2];
};
const Family kFamilies[] = {
    {"amx", {"fused-avx512bf16", "gemm-amx"}}, {"avx512bf16", {"fused-avx512bf16", "gemm-avx512bf16"}},
    {"avx512", {"fused-avx512", nullptr}},     {"avx512-amx", {"fused-avx512", "gemm-amx"}},
    {"avx2", {"fused-avx2", "gemm-avx2"}},     {"avx512vnni", {"dot-avx512vnni", nullptr}},
    {"avx512vnni-amx", {"dot-avx512vnni", "gemm-amx"}}, {"avx2-dot", {"dot-avx2", "gemm-avx2"}},
    {"portable", {"fused-portable", nullptr}},
};

// The calibration: each candidate on a layer of K x N (256 KiB of codes: in L2 on the CPUs this
// runs on; K as in the models, so that x takes the room in cache it takes there), at these M,
// best of kReps calls after one to warm up, the candidates taking turns so that a slow moment of
// a shared machine hits them alike. The largest M stands for every M above it.
constexpr int64_t kCalK = 4096, kCalN = 128, kCalG = 128;
// 6: gemm-amx's prior crossover; 3: where gemm-avx2 (6 rows) overtakes fused-avx2 (3 rows) on a
// Zen 3 (docs/benchmarks.md, "gemm-avx2"). Every CPU calibrates every M here; 3 costs little of
// the calibration's time.
constexpr int64_t kCalMs[] = {1, 2, 3, 4, 6, 8, 16, 32, 64};
constexpr int kReps = 4;

std::mutex g_report_mu;
std::string g_report;

uint32_t next_random(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return uint32_t(s >> 32);
}

// The calibration layer (uint4b8, bf16 scales around 1/64); for the plan of 8-bit layers a
// uint8b128 one of the same shape, prepared as nibble rows (512 KiB: in L2 on CPUs of 1 MiB or
// more of it, in L3 on a Zen 3, whose L2 is 512 KiB; the 4-bit layer is half that).
CpuWeights calibration_layer(int32_t act_dtype, bool bits8) {
  const int64_t n = kCalN;
  std::vector<uint32_t> q(size_t(kCalK / (bits8 ? 4 : 8) * n));
  std::vector<uint16_t> scales(size_t(kCalK / kCalG * n));
  uint64_t s = 1;
  for (auto& v : q) v = next_random(s);
  for (auto& v : scales) v = float_to_bf16(float(1 + next_random(s) % 8) / 512.0f);
  nibble_linear_spec spec{};
  spec.struct_size = sizeof spec;
  spec.layer_name = "calibration";
  spec.k = spec.full_k = kCalK;
  spec.n = spec.full_n = n;
  spec.group_size = int32_t(kCalG);
  spec.bits = bits8 ? 8 : 4;
  spec.weight_type = bits8 ? NIBBLE_WT_UINT8B128 : NIBBLE_WT_UINT4B8;
  spec.act_dtype = act_dtype;
  spec.scale_dtype = NIBBLE_DTYPE_BF16;
  nibble_canonical_weights w{};
  w.qweight = q.data();
  w.scales = scales.data();
  return bits8 ? prepare_cpu_weights_8bit(spec, w) : prepare_cpu_weights(spec, w);
}

// ns of one call of `f` (gather and kernel, one thread) at each calibrated M, for the layers and
// activations given.
struct Bench {
  const KernelForm* form;
  const CpuWeights* w;
  std::vector<double> ns;
};

void calibrate(std::vector<Bench>& benches, int32_t act_dtype) {
  const size_t esize = act_dtype == NIBBLE_DTYPE_F32 ? 4 : 2;
  std::vector<uint8_t> x(size_t(kCalMs[std::size(kCalMs) - 1] * kCalK) * esize);
  uint64_t s = 7;
  for (size_t i = 0; i < x.size() / esize; ++i) {
    const float v = float(int(next_random(s) % 2001) - 1000) / 1000.0f;
    if (esize == 4)
      std::memcpy(x.data() + i * 4, &v, 4);
    else {
      const uint16_t h = act_dtype == NIBBLE_DTYPE_BF16 ? float_to_bf16(v) : float_to_f16(v);
      std::memcpy(x.data() + i * 2, &h, 2);
    }
  }
  std::vector<float> xp, xs, y;
  const TeamMember alone(nullptr, 0, 1);
  for (auto& b : benches) b.ns.assign(std::size(kCalMs), 1e30);
  for (size_t mi = 0; mi < std::size(kCalMs); ++mi) {
    const int64_t m = kCalMs[mi];
    for (int rep = 0; rep <= kReps; ++rep)
      for (auto& b : benches) {
        const CpuWeights& w = *b.w;
        const XLayout l = b.form->layout(act_dtype, m, b.form->tiles ? amx_tile_steps(w) : 0, w.byte_rows);
        xp.resize(size_t(x_buffer_words(w, l, m)));
        xs.resize(size_t(((m + l.rb - 1) / l.rb) * w.segments() * 2 * l.rb));
        y.resize(size_t(m * fused_y_stride(w)));
        const FusedArgs a{&w,     xp.data(), xs.data(),         m,
                          l.rb,   y.data(),  fused_y_stride(w), act_dtype == NIBBLE_DTYPE_F32,
                          l.form, 0,         w.segments(),      l.tile_steps, stream_prefetch()};
        const auto t0 = std::chrono::steady_clock::now();
        gather_x(w, x.data(), act_dtype, l, m, xp.data(), xs.data(), alone);
        b.form->fn(a, 0, w.tiles);
        const double ns =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0) b.ns[mi] = std::min(b.ns[mi], ns);
      }
  }
}

const char* dtype_label(int32_t d) {
  return d == NIBBLE_DTYPE_BF16 ? "bf16" : d == NIBBLE_DTYPE_F16 ? "f16" : "f32";
}

// Integer >= 1 in NIBBLE_CPU_GEMM_MIN_M, else 0 (the plugin's probe has validated it).
int64_t gemm_min_m_env() {
  const char* env = std::getenv("NIBBLE_CPU_GEMM_MIN_M");
  return env && std::atoll(env) > 0 ? std::atoll(env) : 0;
}

std::string describe(const KernelPlan& p) {
  std::string s;
  for (size_t i = 0; i < p.forms.size(); ++i) {
    const int64_t lo = p.forms[i].first;
    const long long hi = i + 1 < p.forms.size() ? (long long)p.forms[i + 1].first : 0;
    const std::string range = p.forms.size() == 1       ? "all M"
                              : i + 1 == p.forms.size() ? strf("M >= %lld", (long long)lo)
                              : i == 0                  ? strf("M < %lld", hi)
                                                        : strf("M %lld-%lld", (long long)lo, hi - 1);
    s += strf("%s%s %s", i ? ", " : "", p.forms[i].second->name, range.c_str());
  }
  return s;
}

KernelPlan make_plan(int32_t act_dtype, bool bits8) {
  const bool f32 = act_dtype == NIBBLE_DTYPE_F32;
  std::vector<const KernelForm*> usable;
  for (const KernelForm& f : kKernelForms)
    if ((f.x == XKind::kF32 || !f32) && !f.unavailable()) usable.push_back(&f);
  std::string note;
  std::vector<const KernelForm*> candidates = usable;
  bool family_forced = false;
  const char* forced = std::getenv("NIBBLE_CPU_ISA");
  if (forced && *forced) {
    std::vector<const KernelForm*> family;
    std::string why;
    for (const Family& fam : kFamilies) {
      if (std::strcmp(fam.isa, forced) != 0) continue;
      for (const char* name : fam.forms) {
        const KernelForm* f = name ? kernel_form(name) : nullptr;
        if (!f) continue;
        if (f->x != XKind::kF32 && f32)
          why = strf("f32 activations need exact f32 products (not %s)", f->x == XKind::kBf16 ? "bf16" : "8-bit parts");
        else if (const char* r = f->unavailable())
          why = r;
        if (!why.empty()) break;
        family.push_back(f);
      }
      if (!why.empty()) family.clear();
    }
    if (family.empty())
      note = strf("; NIBBLE_CPU_ISA=%s not taken: %s", forced, why.c_str());
    else {
      candidates = family;
      family_forced = true;
      note = strf("; NIBBLE_CPU_ISA=%s", forced);
    }
  }
  // Portable code is the last resort, AVX2 code is never faster than the same kernel on AVX-512
  // (which takes twice the columns per instruction; for the GEMM form, an AVX-512 instance of it
  // tied or lost to fused-avx512 on the Xeon host, docs/benchmarks.md "gemm-avx2"), the AVX-512
  // BF16 GEMM form never beats AMX's tiles where they run (the AMX Xeon host's calibrations): not
  // worth calibrating.
  const auto drop = [&](FusedKernel fn, FusedKernel unless_absent) {
    const bool other = std::any_of(candidates.begin(), candidates.end(),
                                   [&](const KernelForm* f) { return f->fn == unless_absent; });
    if (other || (!unless_absent && candidates.size() > 1))
      candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                      [&](const KernelForm* f) { return f->fn == fn; }),
                       candidates.end());
  };
  drop(fused_avx2, fused_avx512);
  drop(gemm_avx2, fused_avx512);
  drop(dot_avx2, fused_avx512);
  drop(gemm_avx512bf16, gemm_amx);
  drop(fused_portable, nullptr);
  // On Intel CPUs the one-tile form is fused-avx512: there fused-avx512bf16 is bound by its dot
  // products while it streams (vdpbf16ps zmm issues once per 2.2 cycles against two FMAs per
  // cycle, so per weight it costs 2x the f32 FMA: measured on the 2-core Emerald Rapids VM), and
  // in cache, where the calibration runs, the two are within its 1.25x margin at M = 1, so the
  // calibration cannot see it. Streaming at M = 1 on the Xeon host (AMX) the bf16 form read 5.3 GB/s
  // per thread in L3; on the Emerald Rapids VM (no AMX exposed), 2 threads, fused-avx512 read 2-bit
  // layers at 46-49% of the bandwidth against 40%, 8-bit at 70-77% against 64-72%, 4-bit the same
  // (docs/benchmarks.md, "Kernel choice on each CPU"). NIBBLE_CPU_ISA=avx512bf16 or amx keeps
  // fused-avx512bf16.
  if (!family_forced && cpu_is_intel() &&
      std::any_of(candidates.begin(), candidates.end(), [](const KernelForm* f) { return f->fn == fused_avx512; })) {
    candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                    [](const KernelForm* f) { return f->fn == fused_avx512bf16; }),
                     candidates.end());
    note += "; fused-avx512 for small M on Intel";
  }
  KernelPlan plan;
  const int64_t gemm_min = gemm_min_m_env();
  const auto one_tile_and_gemm = [&](const KernelForm* small, const KernelForm* gemm) {
    plan = {};
    if (gemm_min > 1) plan.forms.push_back({1, small});
    plan.forms.push_back({gemm_min > 1 ? gemm_min : 1, gemm});
    plan.summary =
        describe(plan) + strf(" (NIBBLE_CPU_GEMM_MIN_M=%lld%s)", (long long)gemm_min, note.c_str());
  };
  const auto gemm_of = [&]() -> const KernelForm* {
    for (const KernelForm* f : candidates)
      if (f->compute_bound) return f;
    return nullptr;
  };
  // Forced family with both forms and a fixed crossover: nothing left to measure.
  if (gemm_min > 0 && candidates.size() == 2 && !candidates[0]->compute_bound &&
      candidates[1]->compute_bound) {
    one_tile_and_gemm(candidates[0], candidates[1]);
    return plan;
  }
  if (candidates.size() == 1) {
    plan.forms.push_back({1, candidates[0]});
    plan.summary = describe(plan) + note;
    return plan;
  }
  const CpuWeights layer = calibration_layer(act_dtype, bits8);
  std::vector<Bench> benches;
  for (const KernelForm* f : candidates) benches.push_back({f, &layer, {}});
  const auto c0 = std::chrono::steady_clock::now();
  calibrate(benches, act_dtype);
  const double cal_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
  std::vector<std::vector<double>> times;
  for (const auto& b : benches) times.push_back(b.ns);
  const std::vector<int64_t> ms(std::begin(kCalMs), std::end(kCalMs));
  plan = plan_from_times(candidates, ms, times);
  {
    std::string r = strf("%s%s (%.0f ms), us per call at M =", dtype_label(act_dtype), bits8 ? " 8-bit" : "", cal_ms);
    for (size_t i = 0; i < ms.size(); ++i) r += strf("%s%lld", i ? "," : " ", (long long)ms[i]);
    r += ":";
    for (const auto& b : benches) {
      r += strf(" %s [", b.form->name);
      for (size_t i = 0; i < ms.size(); ++i) r += strf("%s%.1f", i ? " " : "", b.ns[i] / 1e3);
      r += "]";
    }
    std::lock_guard<std::mutex> lock(g_report_mu);
    g_report += (g_report.empty() ? "" : "; ") + r;
  }
  if (gemm_min > 0) {
    const KernelForm* small = plan.forms.front().second;
    const KernelForm* gemm = small->compute_bound ? small : gemm_of();
    if (small->compute_bound)
      for (const KernelForm* f : candidates)
        if (!f->compute_bound) small = f;
    if (gemm && !small->compute_bound) {
      one_tile_and_gemm(small, gemm);
      return plan;
    }
  }
  plan.summary = describe(plan) + " (calibrated" + note + ")";
  return plan;
}

}  // namespace

XLayout KernelForm::layout(int32_t act_dtype, int64_t m, int64_t tile_steps, bool byte_rows) const {
  XLayout l;
  l.form = x == XKind::kF32    ? (bytes && byte_rows && act_dtype != NIBBLE_DTYPE_F32 ? XForm::kF32Bytes : XForm::kF32)
           : x == XKind::kInt8 ? (bytes && byte_rows ? XForm::kInt8Bytes : XForm::kInt8)
           : act_dtype == NIBBLE_DTYPE_F16 ? XForm::kBf16x2
                                          : XForm::kBf16;
  l.rb = compute_bound && !tiles ? rows : std::min(rows, m);
  l.tile_steps = tiles ? tile_steps : 0;
  return l;
}

bool KernelPlan::uses_tiles() const {
  return std::any_of(forms.begin(), forms.end(), [](const auto& f) { return f.second->tiles; });
}

bool KernelPlan::two_bit() const {
  return std::all_of(forms.begin(), forms.end(), [](const auto& f) { return f.second->two_bit; });
}

const KernelForm& KernelPlan::at(int64_t m) const {
  const KernelForm* f = forms.front().second;
  for (const auto& [from, form] : forms)
    if (m >= from) f = form;
  return *f;
}

const KernelForm* kernel_form(const std::string& name) {
  for (const KernelForm& f : kKernelForms)
    if (name == f.name) return &f;
  return nullptr;
}

KernelPlan plan_from_times(const std::vector<const KernelForm*>& candidates, const std::vector<int64_t>& ms,
                           const std::vector<std::vector<double>>& times) {
  // Per M: the prior form, or the fastest where it is faster by more than kMargin; among the
  // one-tile forms only (`one_tile`), or among all.
  const auto pick_at = [&](size_t i, bool one_tile) {
    size_t prior = SIZE_MAX, fastest = SIZE_MAX;
    for (size_t f = 0; f < candidates.size(); ++f) {
      if (one_tile && candidates[f]->compute_bound) continue;
      if (fastest == SIZE_MAX || times[f][i] < times[fastest][i]) fastest = f;
      const int64_t from = candidates[f]->prior_from;
      if (from > 0 && from <= ms[i] && (prior == SIZE_MAX || from > candidates[prior]->prior_from)) prior = f;
    }
    return prior != SIZE_MAX && times[prior][i] <= kMargin * times[fastest][i] ? prior : fastest;
  };
  std::vector<size_t> picks(ms.size());
  for (size_t i = 0; i < ms.size(); ++i) picks[i] = pick_at(i, false);
  // A GEMM form runs from one M to the end: its advantage (the weights' decode shared by more
  // rows) grows with M. Past its first pick, a one-tile pick where the GEMM form is within the
  // margin of it (the prior kept, or noise) goes to the GEMM form; where the GEMM form is clearly
  // slower, its picks below were the calibration's noise, and the one-tile forms take them back.
  size_t gemm = SIZE_MAX, region = 0;
  for (size_t i = 0; i < ms.size(); ++i) {
    if (candidates[picks[i]]->compute_bound) {
      if (gemm == SIZE_MAX) region = i;
      gemm = picks[i];
    } else if (gemm != SIZE_MAX) {
      if (times[gemm][i] <= kMargin * times[picks[i]][i]) {
        picks[i] = gemm;
      } else {
        for (size_t k = region; k < i; ++k) picks[k] = pick_at(k, true);
        gemm = SIZE_MAX;
      }
    }
  }
  KernelPlan plan;
  for (size_t i = 0; i < ms.size(); ++i)
    if (plan.forms.empty() || plan.forms.back().second != candidates[picks[i]])
      plan.forms.push_back({i == 0 ? 1 : ms[i], candidates[picks[i]]});
  plan.summary = describe(plan);
  return plan;
}

const KernelPlan& kernel_plan(int32_t act_dtype, int bits) {
  static std::once_flag once[5];
  static KernelPlan plans[5];
  const bool f32 = act_dtype != NIBBLE_DTYPE_BF16 && act_dtype != NIBBLE_DTYPE_F16;
  const bool bits8 = bits == 8 && !f32;  // f32 activations read nibble rows: the 4-bit plan
  const int i = (act_dtype == NIBBLE_DTYPE_BF16 ? 0 : act_dtype == NIBBLE_DTYPE_F16 ? 1 : 2) + (bits8 ? 3 : 0);
  std::call_once(once[i], [&] { plans[i] = make_plan(act_dtype, bits8); });
  return plans[i];
}

std::string calibration_report() {
  std::lock_guard<std::mutex> lock(g_report_mu);
  return g_report;
}

const char* prefetch_name(Prefetch p) {
  return p == Prefetch::kNta ? "nta" : p == Prefetch::kT0 ? "t0" : "none";
}

// NIBBLE_CPU_PREFETCH where set (the probe has validated it), else by vendor, as measured
// (docs/benchmarks.md, "Prefetch hints"): prefetcht0 on Intel (on the AMX Xeon host far faster
// than prefetchnta for the AMX form at M = 8-32, a little for the one-tile form at M = 1),
// prefetchnta elsewhere (faster on the Zen 5 at M = 1-2 in its low bandwidth state).
Prefetch stream_prefetch() {
  static const Prefetch p = [] {
    const char* env = std::getenv("NIBBLE_CPU_PREFETCH");
    if (env && std::strcmp(env, "t0") == 0) return Prefetch::kT0;
    if (env && std::strcmp(env, "none") == 0) return Prefetch::kNone;
    if (env && std::strcmp(env, "nta") == 0) return Prefetch::kNta;
    return cpu_is_intel() ? Prefetch::kT0 : Prefetch::kNta;
  }();
  return p;
}

std::string prefetch_summary() {
  const char* env = std::getenv("NIBBLE_CPU_PREFETCH");
  return strf("%s (%s)", prefetch_name(stream_prefetch()),
              env && *env ? "NIBBLE_CPU_PREFETCH" : cpu_is_intel() ? "default on Intel" : "default");
}

// AMX needs three things: the CPU (CPUID.(7,0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE), the OS
// saving the tile state (XCR0 bits 17 XTILECFG and 18 XTILEDATA, read with xgetbv where
// CPUID.1:ECX bit 27 OSXSAVE says it may be), and, on Linux 5.16 and later, the process's
// permission to use the tile data (arch_prctl ARCH_REQ_XCOMP_PERM): asked for once, for the whole
// process (its threads, and children after a fork).
const char* amx_unavailable() {
  static const char* why = []() -> const char* {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 22 & 1u) || !(d >> 24 & 1u))
      return "this CPU lacks AMX-BF16 / AMX-TILE (CPUID.(7,0):EDX bits 22, 24)";
    if (avx512bf16_unavailable())
      return "this CPU lacks AVX-512 BF16 (the AMX form's dequantization uses it)";
    if (!__builtin_cpu_supports("avx512vbmi"))
      return "this CPU lacks AVX-512 VBMI (the AMX form's 2-bit dequantization uses it)";
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u))
      return "the OS has not enabled XSAVE (CPUID.1:ECX bit 27)";
    uint32_t lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
      return "the OS does not save AMX tile state (XCR0 bits 17, 18 clear)";
    constexpr long kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, kXfeatureXtiledata) != 0) {
      static char msg[160];
      std::snprintf(msg, sizeof msg, "the kernel refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
                    std::strerror(errno));
      return msg;
    }
    return nullptr;
  }();
  return why;
}

const OnednnCpu& OnednnCpu::this_cpu() {
  static const OnednnCpu cpu{cpu_has_amx_bf16(), !avx2_unavailable() && !__builtin_cpu_supports("avx512f")};
  return cpu;
}

int64_t onednn_from_m(bool onednn_bf16, const KernelPlan& plan, const OnednnCpu& cpu) {
  if (plan.uses_tiles()) return INT64_MAX;
  if (onednn_bf16 && cpu.amx_bf16) return kBf16OnednnMinM;
  if (!onednn_bf16 && cpu.avx2_only)
    return plan.at(kAvx2OnednnMinM).compute_bound ? INT64_MAX : kAvx2OnednnMinM;
  return INT64_MAX;
}

}  // namespace nibble::cpu
