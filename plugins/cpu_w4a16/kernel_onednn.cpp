#include "kernel_onednn.h"

#include <omp.h>

#include <algorithm>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "dense_onednn.h"
#include "kernels.h"
#include "openmp_fork.h"
#include "nibble/plugin_abi.h"
#include "nibble/dtype.h"

namespace nibble::cpu {

namespace {
using dt = dnnl::memory::data_type;
constexpr int64_t kPanelN = 64;    // 4 tiles: the N width of one matmul
constexpr int64_t kPanelK = 1024;  // rows per panel: a 64 x 1024 f32 panel is 256 KB, inside L2
}  // namespace

struct OnednnPath::Impl {
  const CpuWeights* w;
  bool bf16;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  struct Prims {
    // [first panel | later panels (accumulate)] x [full K block | last K block]
    dnnl::matmul mm[2][2];
    dnnl::matmul::primitive_desc pd[2][2];
    int64_t last_k;
  };
  mutable std::mutex mu;
  mutable std::map<int64_t, std::shared_ptr<Prims>> cache;

  std::shared_ptr<Prims> prims(int64_t m) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(m);
    if (it != cache.end()) return it->second;
    auto p = std::make_shared<Prims>();
    const int64_t rows = w->lines * 8, ldy = (w->tiles * kTileN + kPanelN - 1) / kPanelN * kPanelN;
    p->last_k = rows % kPanelK ? rows % kPanelK : kPanelK;
    const dt t = bf16 ? dt::bf16 : dt::f32;
    for (int acc = 0; acc < 2; ++acc)
      for (int last = 0; last < 2; ++last) {
        if ((!last && rows < kPanelK) || (last && rows % kPanelK == 0)) continue;  // never used
        const int64_t kb = last ? p->last_k : kPanelK;
        dnnl::memory::desc a({m, kb}, t, {rows, 1});
        dnnl::memory::desc b({kb, kPanelN}, t, {kPanelN, 1});
        dnnl::memory::desc c({m, kPanelN}, dt::f32, {ldy, 1});
        dnnl::primitive_attr attr;
        if (acc) {
          dnnl::post_ops po;
          po.append_sum(1.0f);
          attr.set_post_ops(po);
        }
        p->pd[acc][last] = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, eng);
        p->mm[acc][last] = dnnl::matmul(p->pd[acc][last]);
      }
    cache.emplace(m, p);
    return p;
  }
};

OnednnPath::OnednnPath(const CpuWeights& w, bool bf16_act) : impl_(new Impl) {
  impl_->w = &w;
  impl_->bf16 = multiplies_bf16(bf16_act);
}
bool OnednnPath::multiplies_bf16(bool bf16_act) {
  // bf16 where the CPU has AVX512-BF16 and oneDNN builds bf16 matmul here (ONEDNN_MAX_CPU_ISA can take it away).
  static const bool onednn_bf16 = __builtin_cpu_supports("avx512bf16") &&
                                  dense_unsupported(kPanelK, kPanelN, NIBBLE_DTYPE_BF16).empty();
  return bf16_act && onednn_bf16;
}
bool OnednnPath::bf16() const { return impl_->bf16; }
OnednnPath::~OnednnPath() = default;

int64_t OnednnPath::y_stride() const { return (impl_->w->tiles * kTileN + kPanelN - 1) / kPanelN * kPanelN; }

const char* OnednnPath::name() const { return impl_->bf16 ? "onednn-bf16" : "onednn-f32"; }

void OnednnPath::run(const float* xp, int64_t m, float* y) const {
  if (openmp_lost_to_fork()) throw std::runtime_error(std::string("oneDNN path: ") + openmp_fork_reason());
  note_openmp_use();
  const Impl& I = *impl_;
  const CpuWeights& w = *I.w;
  auto p = I.prims(m);
  const int64_t rows = w.lines * 8;
  const int64_t panels = (w.tiles * kTileN + kPanelN - 1) / kPanelN;
  const int64_t kblocks = (rows + kPanelK - 1) / kPanelK;
  // bf16 path: x converted once.
  std::vector<uint16_t> xb;
  if (I.bf16) {
    xb.resize(size_t(m * rows));
    for (int64_t i = 0; i < m * rows; ++i) xb[size_t(i)] = float_to_bf16(xp[i]);
  }
  const int threads = int(std::min<int64_t>(num_threads(), panels));
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> panel(size_t(kPanelK * kPanelN)), tile(size_t(kPanelK * kTileN));
    std::vector<uint16_t> panel16(I.bf16 ? size_t(kPanelK * kPanelN) : 0);
    dnnl::stream s(I.eng);
#pragma omp for schedule(static)
    for (int64_t pn = 0; pn < panels; ++pn) {
      for (int64_t kb = 0; kb < kblocks; ++kb) {
        const int64_t l0 = kb * kPanelK / 8, l1 = std::min(w.lines, (kb + 1) * kPanelK / 8), kr = (l1 - l0) * 8;
        // Dequantize this panel's 4 tiles into a row-major [kr][64] panel (zeros past N).
        for (int64_t tt = 0; tt < kPanelN / kTileN; ++tt) {
          const int64_t t = pn * (kPanelN / kTileN) + tt;
          if (t < w.tiles) dequantize_tile(w, t, l0, l1, tile.data());
          for (int64_t r = 0; r < kr; ++r)
            for (int64_t c = 0; c < kTileN; ++c)
              panel[size_t(r * kPanelN + tt * kTileN + c)] = t < w.tiles ? tile[size_t(r * kTileN + c)] : 0.0f;
        }
        void* a_ptr;
        void* b_ptr;
        if (I.bf16) {
          for (int64_t i = 0; i < kr * kPanelN; ++i) panel16[size_t(i)] = float_to_bf16(panel[size_t(i)]);
          a_ptr = xb.data() + kb * kPanelK;
          b_ptr = panel16.data();
        } else {
          a_ptr = const_cast<float*>(xp + kb * kPanelK);
          b_ptr = panel.data();
        }
        const bool last = kb == kblocks - 1 && p->last_k != kPanelK;
        const dnnl::matmul& mm = p->mm[kb > 0][last];
        const auto& pd = p->pd[kb > 0][last];
        dnnl::memory A(pd.src_desc(), I.eng, a_ptr), B(pd.weights_desc(), I.eng, b_ptr);
        dnnl::memory C(pd.dst_desc(), I.eng, y + pn * kPanelN);
        mm.execute(s, {{DNNL_ARG_SRC, A}, {DNNL_ARG_WEIGHTS, B}, {DNNL_ARG_DST, C}});
      }
    }
    s.wait();
  }
}

}  // namespace nibble::cpu
