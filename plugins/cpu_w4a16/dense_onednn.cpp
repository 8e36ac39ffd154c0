#include "dense_onednn.h"

#include <omp.h>

#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <string>
#include <stdexcept>
#include <vector>

#include "kernels.h"
#include "openmp_fork.h"
#include "nibble/plugin_abi.h"

namespace nibble::cpu {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

struct DenseMatmul::Impl {
  int64_t k, n;
  dt type;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  std::vector<uint8_t> plain;  // [K, N] as given
  struct PerM {
    dnnl::matmul prim;
    dnnl::memory weights;  // reordered into the primitive's preferred layout
  };
  mutable std::mutex mu;
  mutable std::map<int64_t, std::shared_ptr<PerM>> cache;

  std::shared_ptr<PerM> for_m(int64_t m) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(m);
    if (it != cache.end()) return it->second;
    auto src_md = dnnl::memory::desc({m, k}, type, tag::ab);
    auto wei_any = dnnl::memory::desc({k, n}, type, tag::any);
    auto dst_md = dnnl::memory::desc({m, n}, type, tag::ab);
    auto pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_any, dst_md), eng);
    auto pm = std::make_shared<PerM>();
    pm->prim = dnnl::matmul(pd);
    pm->weights = dnnl::memory(pd.weights_desc(), eng);
    dnnl::memory src_plain({{k, n}, type, tag::ab}, eng, const_cast<uint8_t*>(plain.data()));
    dnnl::stream s(eng);
    dnnl::reorder(src_plain, pm->weights).execute(s, src_plain, pm->weights);
    s.wait();
    cache.emplace(m, pm);
    return pm;
  }
};

std::string dense_unsupported(int64_t k, int64_t n, int32_t dtype) {
  if (dtype != NIBBLE_DTYPE_BF16 && dtype != NIBBLE_DTYPE_F32) return "oneDNN 2.6 runs bf16 and f32 matmul on CPUs only";
  const dt type = dtype == NIBBLE_DTYPE_BF16 ? dt::bf16 : dt::f32;
  try {
    const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    const auto src = dnnl::memory::desc({1, k}, type, tag::ab);
    const auto wei = dnnl::memory::desc({k, n}, type, tag::any);
    const auto dst = dnnl::memory::desc({1, n}, type, tag::ab);
    (void)dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), eng);
    return {};
  } catch (const dnnl::error& e) {
    return std::string("oneDNN cannot create a ") + (type == dt::bf16 ? "bf16" : "f32") + " matmul on this CPU (" +
           e.what() + ")" +
           (type == dt::bf16 ? "; oneDNN 2.6 runs bf16 matmul only on CPUs with AVX-512 (avx512_core), "
                               "and ONEDNN_MAX_CPU_ISA below that removes it too"
                             : "");
  }
}

DenseMatmul::DenseMatmul(int64_t k, int64_t n, int32_t dtype, const void* w) : impl_(new Impl) {
  impl_->k = k;
  impl_->n = n;
  if (dtype == NIBBLE_DTYPE_BF16) impl_->type = dt::bf16;
  else if (dtype == NIBBLE_DTYPE_F32) impl_->type = dt::f32;
  else throw std::invalid_argument("the oneDNN dense baseline runs bf16 and f32 only");
  const size_t bytes = size_t(k * n) * (dtype == NIBBLE_DTYPE_F32 ? 4 : 2);
  impl_->plain.resize(bytes);
  std::memcpy(impl_->plain.data(), w, bytes);
}

DenseMatmul::~DenseMatmul() = default;

void DenseMatmul::run(const void* x, void* y, int64_t m) const {
  if (openmp_lost_to_fork()) throw std::runtime_error(std::string("dense baseline: ") + openmp_fork_reason());
  note_openmp_use();
  auto pm = impl_->for_m(m);
  const auto& I = *impl_;
  dnnl::memory src({{m, I.k}, I.type, tag::ab}, I.eng, const_cast<void*>(x));
  dnnl::memory dst({{m, I.n}, I.type, tag::ab}, I.eng, y);
  dnnl::stream s(I.eng);
  omp_set_num_threads(num_threads());
  pm->prim.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, pm->weights}, {DNNL_ARG_DST, dst}});
  s.wait();
}

}  // namespace nibble::cpu
