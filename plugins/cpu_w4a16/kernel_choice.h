// Which kernel form runs which M, on this CPU: the plugin's menu of kernel forms (a declared
// table, kKernelForms in kernel_choice.cpp), what each needs of the CPU and the OS, and the plan a
// layer is prepared for, chosen by a short calibration at first use (once per process and
// activation dtype) unless the NIBBLE_CPU_* variables force one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"

namespace nibble::cpu {

/// How a form takes x: f32 (any activations), bf16 pairs (kBf16 / kBf16x2) or 8-bit parts (kInt8),
/// the last two for 16-bit activations only (f32 activations need exact f32 products).
enum class XKind { kF32, kBf16, kInt8 };

/// One kernel form of the menu.
struct KernelForm {
  const char* name;  ///< as describe_kernel reports it: "fused-avx512bf16", "gemm-amx", ...
  FusedKernel fn;
  bool two_bit;        ///< reads native 2-bit codes too (cpu_weights.h), not only 4-bit ones
  bool bytes;          ///< reads an 8-bit layer's bytes as codes (XForm::kF32Bytes / kInt8Bytes, 16-bit activations)
  XKind x;             ///< how it takes x
  int64_t rows;        ///< rows per block of x: the kernel's register blocking (or AMX tile rows)
  bool tiles;          ///< x in the AMX tile layout (XLayout)
  bool compute_bound;  ///< a GEMM form: rb = rows even for fewer rows; ranges handed out guided
  int64_t quantum;     ///< tiles a range is a multiple of (the form's column blocking)
  int64_t chunk;       ///< tiles of a range it prefers (cache blocking), a multiple of quantum
  int64_t min_quanta;  ///< quanta per member below which apply splits K as well
  /// The M from which it is the choice by CPU features alone among the candidates (the ranking
  /// measured with weights streamed from memory, docs/benchmarks.md); 0: never without a
  /// calibration that shows it faster.
  int64_t prior_from;
  const char* (*unavailable)();  ///< why this CPU (or OS) cannot run it, or nullptr

  /// x's layout for m rows of activations of `act_dtype`, with `tile_steps` for the tile layout,
  /// for a layer of byte_rows (CpuWeights::byte_rows: read as bytes where the form can).
  XLayout layout(int32_t act_dtype, int64_t m, int64_t tile_steps, bool byte_rows = false) const;
};

/// The forms one layer uses, by M: forms[i].second runs from M = forms[i].first (ascending, the
/// first from 1). Every form reads the same layout (cpu_weights.h), so any may follow any.
struct KernelPlan {
  std::vector<std::pair<int64_t, const KernelForm*>> forms;
  std::string summary;  ///< "fused-avx512bf16 M < 32, gemm-avx512bf16 M >= 32 (calibrated)"
  bool uses_tiles() const;
  /// Every form reads native 2-bit codes (else a 2-bit layer is prepared as nibble planes).
  bool two_bit() const;
  const KernelForm& at(int64_t m) const;
};

/// The plan for activations of `act_dtype` (NIBBLE_DTYPE_*), made on first use and kept for the
/// process. NIBBLE_CPU_ISA=amx|avx512bf16|avx512-amx|avx512|avx2|portable limits it to that family (where this
/// CPU and the activations allow it; else the probe says why and the plan is made as without it),
/// NIBBLE_CPU_GEMM_MIN_M=N fixes the M from which the family's GEMM form runs; what is not fixed
/// is calibrated: each candidate form timed on a small layer in cache, one thread (calibration()).
/// 8-bit layers (`bits` 8) with 16-bit activations have a plan of their own, calibrated on an
/// 8-bit layer: the forms that read their bytes (KernelForm::bytes) do a different amount of work
/// per code than on 4-bit codes.
const KernelPlan& kernel_plan(int32_t act_dtype, int bits = 4);

/// A form of the menu by name ("fused-avx512", "gemm-amx", ...), or nullptr.
const KernelForm* kernel_form(const std::string& name);

/// What the calibrations so far measured, for the probe message: per dtype and form, ns per call
/// at each calibrated M; empty before the first.
std::string calibration_report();

/// The prefetch hint of the streaming kernels (FusedArgs::prefetch) on this CPU, fixed for the
/// process: NIBBLE_CPU_PREFETCH=nta|t0|none, else t0 on Intel CPUs and nta on others (measured:
/// kernel_choice.cpp). prefetch_summary() says which and why, for the probe message.
Prefetch stream_prefetch();
std::string prefetch_summary();

/// Why this CPU or OS cannot run the AMX form (CPUID, XCR0, the kernel's tile permission), or
/// nullptr; the first call asks the kernel for permission (arch_prctl ARCH_REQ_XCOMP_PERM).
const char* amx_unavailable();

/// A plan from calibrated times: times[f][i] = ns of candidate f at ms[i] (ascending M from 1),
/// candidates in the menu's order of preference. The calibration runs everything from cache, one
/// thread, so it sees compute rates, not how a form streams its weights from memory: per M, the
/// prior form (KernelForm::prior_from; of equal ones the first) stays unless another is faster by
/// more than kMargin. A GEMM form (compute_bound), once picked, runs to the largest M where it is
/// within kMargin of the pick there; where it is clearly slower at a larger M its picks below
/// are taken as noise and go back to the one-tile forms. (Exposed for the unit test.)
KernelPlan plan_from_times(const std::vector<const KernelForm*>& candidates, const std::vector<int64_t>& ms,
                           const std::vector<std::vector<double>>& times);
constexpr double kMargin = 1.25;

/// What decides between the plan's kernels and the oneDNN path (kernel_onednn.h) on a CPU.
struct OnednnCpu {
  bool amx_bf16 = false;   ///< AMX-BF16 (CPUID.(7,0):EDX bit 22)
  bool avx2_only = false;  ///< AVX2 and FMA, no AVX-512 F
  static const OnednnCpu& this_cpu();
};
/// The crossovers, measured (docs/benchmarks.md). The bf16 brgemm on AMX tiles (bf16 activations)
/// won over the avx512bf16 GEMM form from M = 256 on the large layers and from 1024 on all.
/// Without AMX but with AVX-512 BF16 (a Zen 5) the fused avx512bf16 kernel beat the oneDNN path
/// at M = 256, and the f32 brgemm lost to the fused kernel at every M measured: there oneDNN is
/// never chosen. On an AVX2-only CPU oneDNN runs its f32 brgemm: it beat fused-avx2 (a Zen 3) from
/// M = 256 on, so it runs from kAvx2OnednnMinM where the plan runs fused-avx2 there; it lost to
/// gemm-avx2 with its decoded operands at M = 512 and 1024, so never where the plan runs gemm-avx2
/// at 256 (docs/benchmarks.md, "gemm-avx2").
constexpr int64_t kBf16OnednnMinM = 256, kAvx2OnednnMinM = 256;
/// The M from which the oneDNN path runs by default (INT64_MAX: never) for a layer whose oneDNN
/// path multiplies in bf16 (`onednn_bf16`, else f32), with this plan of the fused kernels: never
/// where the plan has the AMX form (it multiplies on the same tiles without dequantizing to memory
/// first), and on AVX2-only CPUs by which form the plan runs at M = kAvx2OnednnMinM.
int64_t onednn_from_m(bool onednn_bf16, const KernelPlan& plan, const OnednnCpu& cpu);

}  // namespace nibble::cpu
