// Tests of the kernel plan from calibrated times (kernel_choice.h plan_from_times), on made-up
// forms and times shaped like what the CPUs of docs/benchmarks.md measure: the features-based
// prior stays within the margin, a form clearly faster takes its M, of any family (every form
// reads the same layout); and where the oneDNN path takes over on each kind of CPU.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kernel_choice.h"
#include "test_util.h"

using namespace nibble::cpu;

std::string nibble::test::skip_reason() { return {}; }

namespace {

const char* none() { return nullptr; }
// name, fn, two_bit, bytes, x, rows, tiles, compute_bound, quantum, chunk, min_quanta, prior_from, unavailable
const KernelForm kFused{"fused-bf16", nullptr, false, false, XKind::kBf16, 8, false, false, 1, 1, 8, 1, none};
const KernelForm kAmx{"gemm-amx", nullptr, true, false, XKind::kBf16, 16, true, true, 2, 8, 2, 0, none};
const KernelForm kGemm{"gemm-bf16", nullptr, false, false, XKind::kBf16, 6, false, true, 4, 32, 2, 32, none};
const KernelForm kF32{"fused-f32", nullptr, true, true, XKind::kF32, 8, false, false, 1, 1, 8, 1, none};
const std::vector<int64_t> kMs = {1, 2, 4, 8, 16, 32, 64};

std::string plan(const std::vector<const KernelForm*>& forms, const std::vector<std::vector<double>>& times) {
  return plan_from_times(forms, kMs, times).summary;
}

}  // namespace

TEST_CASE("the prior stays where the calibration shows no clear winner") {
  // The GEMM form a little faster from M = 4 (within the margin): the prior's crossover at 32 stays.
  CHECK(plan({&kFused, &kGemm}, {{6, 10, 18, 37, 75, 150, 300}, {12, 14, 17, 34, 66, 140, 270}}) ==
        "fused-bf16 M < 32, gemm-bf16 M >= 32");
  // Clearly faster at 16: it takes 16 on.
  CHECK(plan({&kFused, &kGemm}, {{6, 10, 18, 37, 75, 150, 300}, {12, 14, 17, 34, 50, 100, 200}}) ==
        "fused-bf16 M < 16, gemm-bf16 M >= 16");
}

TEST_CASE("a GEMM form runs from one M to the end") {
  // The GEMM form clearly faster at 4 and 8, level at 16 (where the one-tile prior stays by the
  // margin), clearly faster again from 32 (a noisy calibration on a shared machine): one
  // crossover, at 4.
  CHECK(plan({&kFused, &kGemm}, {{6, 10, 30, 60, 75, 150, 300}, {12, 14, 20, 40, 74, 100, 200}}) ==
        "fused-bf16 M < 4, gemm-bf16 M >= 4");
  // Clearly slower at the largest M: its wins below were noise, and no GEMM form runs.
  CHECK(plan({&kFused, &kGemm}, {{6, 10, 30, 60, 75, 150, 200}, {12, 14, 20, 40, 74, 100, 300}}) ==
        "fused-bf16 all M");
  // A GEMM form without a prior (gemm-avx2), 1.9x faster from M = 4 but only 1.15x at 64, where
  // the one-tile prior stays by the margin: it still runs to the end.
  const KernelForm avx2{"fused-avx2", nullptr, true, true, XKind::kF32, 3, false, false, 1, 1, 8, 1, none};
  const KernelForm avx2_gemm{"gemm-avx2", nullptr, true, false, XKind::kF32, 6, false, true, 1, 32, 8, 0, none};
  CHECK(plan({&avx2, &avx2_gemm}, {{10, 20, 40, 80, 160, 320, 640}, {12, 18, 21, 42, 84, 168, 556}}) ==
        "fused-avx2 M < 4, gemm-avx2 M >= 4");
}

TEST_CASE("a form without a prior (AMX) runs only where it is clearly faster") {
  CHECK(plan({&kFused, &kAmx, &kGemm},
             {{6, 10, 18, 37, 75, 150, 300}, {9, 11, 16, 20, 25, 40, 70}, {12, 14, 17, 34, 66, 140, 270}}) ==
        "fused-bf16 M < 8, gemm-amx M >= 8");
  CHECK(plan({&kFused, &kAmx}, {{6, 10, 18, 37, 75, 150, 300}, {60, 100, 180, 370, 750, 1500, 3000}}) ==
        "fused-bf16 all M");
}

TEST_CASE("forms of different families mix: the first of equal priors stays unless another is clearly faster") {
  // The f32 kernel 1.6x faster from M = 8, 1.2x slower below: bf16 below 8, f32 from 8.
  CHECK(plan({&kFused, &kF32}, {{10, 12, 20, 64, 128, 256, 512}, {12, 14, 24, 40, 80, 160, 320}}) ==
        "fused-bf16 M < 8, fused-f32 M >= 8");
  // 1.2x faster only: the first stays.
  CHECK(plan({&kFused, &kF32}, {{10, 12, 20, 48, 96, 192, 384}, {12, 14, 24, 40, 80, 160, 320}}) ==
        "fused-bf16 all M");
  // The f32 one-tile form and AMX, as on the Xeon host: f32 below 8, AMX from 8.
  CHECK(plan({&kAmx, &kF32}, {{27, 32, 41, 59, 109, 208, 378}, {21, 31, 50, 89, 183, 359, 692}}) ==
        "fused-f32 M < 8, gemm-amx M >= 8");
}

TEST_CASE("a prior crossover between powers of two takes effect where the calibration has that M") {
  // gemm-amx's prior from 6 (the Xeon host, streaming): with M = 6 calibrated and AMX within the
  // margin there, the crossover is 6; without M = 6 among the calibrated M it falls to 8.
  const KernelForm amx6{"gemm-amx", nullptr, true, false, XKind::kBf16, 16, true, true, 2, 8, 2, 6, none};
  const std::vector<int64_t> ms6 = {1, 2, 4, 6, 8, 16, 32, 64};
  const std::vector<std::vector<double>> t6 = {{27, 32, 41, 52, 59, 109, 208, 378}, {21, 31, 50, 55, 89, 183, 359, 692}};
  CHECK(plan_from_times({&amx6, &kF32}, ms6, t6).summary == "fused-f32 M < 6, gemm-amx M >= 6");
  CHECK(plan_from_times({&amx6, &kF32}, kMs, {{27, 32, 41, 59, 109, 208, 378}, {21, 31, 50, 89, 183, 359, 692}}).summary ==
        "fused-f32 M < 8, gemm-amx M >= 8");
  // Clearly slower at 6 in the calibration (beyond the margin): the one-tile form keeps 6.
  const std::vector<std::vector<double>> slow6 = {{27, 32, 41, 90, 59, 109, 208, 378}, {21, 31, 50, 55, 89, 183, 359, 692}};
  CHECK(plan_from_times({&amx6, &kF32}, ms6, slow6).summary == "fused-f32 M < 8, gemm-amx M >= 8");
}

TEST_CASE("a plan reads 2-bit codes only where every form of it does") {
  CHECK(plan_from_times({&kAmx, &kF32}, kMs, {{27, 32, 41, 59, 109, 208, 378}, {21, 31, 50, 89, 183, 359, 692}}).two_bit());
  CHECK_FALSE(plan_from_times({&kFused, &kAmx}, kMs, {{6, 10, 18, 37, 75, 150, 300}, {9, 11, 16, 20, 25, 40, 70}}).two_bit());
}

TEST_CASE("an 8-bit layer's bytes go to the forms that read them, for 16-bit activations only") {
  CHECK(kF32.layout(NIBBLE_DTYPE_BF16, 1, 0, true).form == XForm::kF32Bytes);
  CHECK(kF32.layout(NIBBLE_DTYPE_F16, 8, 0, true).form == XForm::kF32Bytes);
  // f32 activations need the exact form, which the nibble rows have.
  CHECK(kF32.layout(NIBBLE_DTYPE_F32, 1, 0, true).form == XForm::kF32);
  CHECK(kF32.layout(NIBBLE_DTYPE_BF16, 1, 0, false).form == XForm::kF32);
  CHECK(kFused.layout(NIBBLE_DTYPE_BF16, 1, 0, true).form == XForm::kBf16);
  CHECK(kGemm.layout(NIBBLE_DTYPE_F16, 64, 0, true).form == XForm::kBf16x2);
  CHECK(trick_scale(XForm::kF32Bytes) == 256.0f);
  CHECK(trick_offset(XForm::kF32Bytes, 0) == 1.0f);
  CHECK(trick_offset(XForm::kF32Bytes, 1) == 0.0f);
}

TEST_CASE("8-bit layers have a plan of their own for 16-bit activations, and the 4-bit one for f32") {
  CHECK(&kernel_plan(NIBBLE_DTYPE_F32, 8) == &kernel_plan(NIBBLE_DTYPE_F32));
  const KernelPlan& p8 = kernel_plan(NIBBLE_DTYPE_BF16, 8);
  CHECK(&p8 != &kernel_plan(NIBBLE_DTYPE_BF16));
  REQUIRE_FALSE(p8.forms.empty());
  CHECK(p8.forms.front().first == 1);
  // Its calibration (where it had more than one candidate) is reported beside the 4-bit one's.
  if (p8.summary.find("calibrated") != std::string::npos)
    CHECK(calibration_report().find("bf16 8-bit") != std::string::npos);
}

TEST_CASE("the oneDNN path takes over at the measured crossover on each kind of CPU, and never over the AMX form") {
  const OnednnCpu amx{true, false}, avx512{false, false}, avx2{false, true};
  const KernelForm kAvx2{"fused-avx2", nullptr, true, true, XKind::kF32, 3, false, false, 1, 1, 8, 1, none};
  const KernelForm kAvx2Gemm{"gemm-avx2", nullptr, true, false, XKind::kF32, 6, false, true, 1, 32, 8, 0, none};
  const auto of = [](std::vector<std::pair<int64_t, const KernelForm*>> forms) {
    KernelPlan p;
    p.forms = std::move(forms);
    return p;
  };
  const KernelPlan fused = of({{1, &kFused}}), with_amx = of({{1, &kFused}, {6, &kAmx}});
  // AMX: the bf16 brgemm from kBf16OnednnMinM, unless the plan has the AMX form; f32 never.
  CHECK(onednn_from_m(true, fused, amx) == kBf16OnednnMinM);
  CHECK(onednn_from_m(true, with_amx, amx) == INT64_MAX);
  CHECK(onednn_from_m(false, fused, amx) == INT64_MAX);
  // AVX-512 without AMX (a Zen 5; Intel without AMX): the fused forms at every M.
  CHECK(onednn_from_m(true, fused, avx512) == INT64_MAX);
  CHECK(onednn_from_m(false, fused, avx512) == INT64_MAX);
  // AVX2 only (bf16 activations multiply in f32 there): the f32 brgemm from kAvx2OnednnMinM after
  // fused-avx2, never where the plan runs gemm-avx2 at kAvx2OnednnMinM.
  CHECK(onednn_from_m(false, of({{1, &kAvx2}}), avx2) == kAvx2OnednnMinM);
  CHECK(onednn_from_m(false, of({{1, &kAvx2}, {3, &kAvx2Gemm}}), avx2) == INT64_MAX);
  CHECK(onednn_from_m(false, of({{1, &kAvx2}, {1000, &kAvx2Gemm}}), avx2) == kAvx2OnednnMinM);
  CHECK(kAvx2OnednnMinM > 1);
  CHECK(kBf16OnednnMinM > 1);
}
