// The portable kernel: plain C++ over the tile layout; the fallback on any CPU and the baseline
// the SIMD kernels are tested against (tests/test_cpu_kernels.cpp).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels.h"
#include "nibble/dtype.h"

namespace nibble::cpu {

namespace {
std::atomic<int> g_threads{0};
}

int num_threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  if (t > 0) return t;
  if (const char* env = std::getenv("NIBBLE_NUM_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  return omp_get_max_threads();
}

void set_num_threads(int n) { g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

namespace {
// One line's 8 values of x (a row of xp) in place as bf16 pairs: kBf16 the 4 pairs, kBf16x2 the
// 4 pairs of the hi parts then the 4 of the lo parts (hi + lo == x exactly for fp16 and bf16 x).
void to_bf16_pairs(float* slot, XForm f) {
  float v[8];
  std::memcpy(v, slot, sizeof v);
  uint32_t words[8] = {};
  for (int p = 0; p < 4; ++p) {
    const uint16_t h0 = float_to_bf16(v[2 * p]), h1 = float_to_bf16(v[2 * p + 1]);
    words[p] = uint32_t(h0) | uint32_t(h1) << 16;
    if (f == XForm::kBf16x2) {
      const uint16_t l0 = float_to_bf16(v[2 * p] - bf16_to_float(h0)), l1 = float_to_bf16(v[2 * p + 1] - bf16_to_float(h1));
      words[4 + p] = uint32_t(l0) | uint32_t(l1) << 16;
    }
  }
  std::memcpy(slot, words, sizeof words);
}
}  // namespace

void gather_x(const CpuWeights& w, const void* x, int32_t dtype, XForm f, int64_t m, int64_t rb, float* xp, float* xs) {
  const DType dt = DType(dtype);
  const int64_t blocks = (m + rb - 1) / rb, segs = w.segments();
  std::fill(xp, xp + blocks * w.lines * rb * 8, 0.0f);
  std::fill(xs, xs + blocks * segs * 2 * rb, 0.0f);
  for (int64_t r = 0; r < m; ++r) {
    float* dst = xp + (r / rb) * w.lines * rb * 8 + (r % rb) * 8;  // element (line l, j) at dst[l * rb * 8 + j]
    float* sums = xs + (r / rb) * segs * 2 * rb + (r % rb);
    for (int64_t sg = 0; sg < segs; ++sg) {
      double offset_sum = 0, sum = 0;  // double: the kernel subtracts these from fp32 sums
      for (int64_t i = w.seg_line[size_t(sg)] * 8; i < w.seg_line[size_t(sg + 1)] * 8; ++i) {
        const int32_t src = w.row_src[size_t(i)];
        const float v = src < 0 ? 0.0f : float(load_float(x, dt, size_t(r * w.k + src)));
        dst[(i / 8) * rb * 8 + i % 8] = v;
        offset_sum += trick_offset(f, int(i % 8)) * v;
        sum += v;
      }
      sums[(sg * 2) * rb] = float(offset_sum);
      sums[(sg * 2 + 1) * rb] = float(sum);
    }
    if (f != XForm::kF32)
      for (int64_t l = 0; l < w.lines; ++l) to_bf16_pairs(dst + l * rb * 8, f);
  }
}

void fused_portable(const FusedArgs& a, int64_t t0, int64_t t1) {
  const CpuWeights& w = *a.w;
  const int64_t ldy = w.tiles * kTileN;
  for (int64_t t = t0; t < t1; ++t) {
    const uint32_t* q = w.tile_codes(t);
    const float* s = w.tile_scales(t);
    const float* z = w.tile_zeros(t);
    for (int64_t r = 0; r < a.m; ++r) {
      float out[kTileN] = {0}, acc[kTileN];
      const float* x = a.xp + (r / a.rb) * w.lines * a.rb * 8 + (r % a.rb) * 8;
      for (int64_t g = 0; g < w.groups; ++g) {
        std::fill(acc, acc + kTileN, 0.0f);
        for (int64_t l = w.group_line[size_t(g)]; l < w.group_line[size_t(g + 1)]; ++l)
          for (int j = 0; j < 8; ++j) {
            const float xv = x[l * a.rb * 8 + j];
            for (int64_t c = 0; c < kTileN; ++c)
              acc[c] += xv * (float(w.code(q[l * kTileN + c], j)) - z[g * kTileN + c]);
          }
        for (int64_t c = 0; c < kTileN; ++c) out[c] += s[g * kTileN + c] * acc[c];
      }
      std::memcpy(a.y + r * ldy + t * kTileN, out, sizeof out);
    }
  }
}

IsaChoice fused_kernel_named(const char* name, int32_t act_dtype) {
  const std::string n = name;
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  if (n == "avx512bf16") {
    if (!avx512 || !__builtin_cpu_supports("avx512bf16")) return {nullptr, "this CPU lacks AVX-512 BF16", 0};
    if (act_dtype == NIBBLE_DTYPE_BF16) return {fused_avx512bf16, "avx512bf16", 8, CodeOrder::kBf16Pairs, XForm::kBf16};
    if (act_dtype == NIBBLE_DTYPE_F16) return {fused_avx512bf16, "avx512bf16", 8, CodeOrder::kBf16Pairs, XForm::kBf16x2};
    return {nullptr, "f32 activations need exact f32 products (not bf16)", 0};
  }
  if (n == "avx512") {
    if (avx512) return {fused_avx512, "avx512", 8};
    return {nullptr, "this CPU lacks AVX-512 F/BW/VL/DQ", 0};
  }
  if (n == "avx2") {
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {fused_avx2, "avx2", 3};
    return {nullptr, "this CPU lacks AVX2 and FMA", 0};
  }
  if (n == "portable") return {fused_portable, "portable", 1};
  return {nullptr, "unknown kernel (expected avx512bf16, avx512, avx2 or portable)", 0};
}

IsaChoice best_fused_kernel(int32_t act_dtype) {
  if (const char* forced = std::getenv("NIBBLE_CPU_ISA"); forced && *forced) {
    IsaChoice c = fused_kernel_named(forced, act_dtype);
    if (c.fn) return c;
  }
  for (const char* n : {"avx512bf16", "avx512", "avx2"}) {
    IsaChoice c = fused_kernel_named(n, act_dtype);
    if (c.fn) return c;
  }
  return {fused_portable, "portable", 1};
}

}  // namespace nibble::cpu
