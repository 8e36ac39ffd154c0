// The reference kernel: scalar, double accumulation, straight from the definition.
#include "nibble/reference.h"

#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "nibble/error.h"

namespace nibble {

namespace {

void check_x(const CanonicalLinear& w, const Tensor& x) {
  if (x.ndim() != 2 || x.dim(1) != w.spec.k || !is_float(x.dtype()))
    throw Error(Errc::invalid_argument,
                fmt::format("layer '{}': tensor 'x': expected a float tensor [M, {}], found {} {}",
                            w.spec.name, w.spec.k, dtype_name(x.dtype()), shape_str(x.shape())));
}

// Runs fn(m, n, sum) with sum = sum_k f(x[m,k], w[k,n]) in double, dequantizing W once.
template <class F>
Tensor accumulate(const CanonicalLinear& w, const Tensor& x, F term, bool abs_bias) {
  check_x(w, x);
  const int64_t m = x.dim(0), k = w.spec.k, n = w.spec.n;
  std::vector<double> wd(static_cast<std::size_t>(k * n));
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t nn = 0; nn < n; ++nn) wd[std::size_t(kk * n + nn)] = w.weight(kk, nn);
  std::vector<double> xd(static_cast<std::size_t>(k));
  Tensor y = Tensor::zeros(DType::f64, {m, n});
  double* out = y.mutable_data_as<double>();
  for (int64_t mm = 0; mm < m; ++mm) {
    for (int64_t kk = 0; kk < k; ++kk) xd[std::size_t(kk)] = x.at(std::size_t(mm * k + kk));
    double* row = out + mm * n;
    for (int64_t kk = 0; kk < k; ++kk) {
      const double xv = xd[std::size_t(kk)];
      const double* wr = wd.data() + kk * n;
      for (int64_t nn = 0; nn < n; ++nn) row[nn] += term(xv, wr[nn]);
    }
    if (!w.bias.empty())
      for (int64_t nn = 0; nn < n; ++nn) {
        const double b = w.bias.at(std::size_t(nn));
        row[nn] += abs_bias ? std::fabs(b) : b;
      }
  }
  return y;
}

}  // namespace

Tensor reference_linear(const CanonicalLinear& w, const Tensor& x) {
  return accumulate(w, x, [](double a, double b) { return a * b; }, false);
}

Tensor reference_magnitude(const CanonicalLinear& w, const Tensor& x) {
  return accumulate(w, x, [](double a, double b) { return std::fabs(a * b); }, true);
}

Comparison compare_to_reference(const Tensor& y, const Tensor& ref, const Tensor& mag, DType act) {
  if (y.shape() != ref.shape() || mag.shape() != ref.shape())
    throw Error(Errc::invalid_argument, fmt::format("compare_to_reference: shapes {} vs {} vs {}",
                                                    shape_str(y.shape()), shape_str(ref.shape()),
                                                    shape_str(mag.shape())));
  double eps_out = 0x1p-24, eps_acc = 0x1p-20;
  if (act == DType::f16) eps_out = 0x1p-11, eps_acc = 0x1p-10;
  if (act == DType::bf16) eps_out = 0x1p-8, eps_acc = 0x1p-8;
  Comparison c;
  const int64_t n = ref.ndim() == 2 ? ref.dim(1) : ref.numel();
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double got = y.at(std::size_t(i)), want = ref.at(std::size_t(i));
    const double tol = eps_out * std::fabs(want) + eps_acc * mag.at(std::size_t(i)) + 1e-30;
    const double err = std::fabs(got - want);
    const double r = std::isfinite(got) ? err / tol : INFINITY;
    if (!(r <= 1.0)) { c.ok = false; ++c.failures; }
    if (!(r <= c.max_rel_to_tol)) {
      c.max_rel_to_tol = r;
      c.worst_m = i / n; c.worst_n = i % n; c.worst_got = got; c.worst_want = want;
    }
    if (err > c.max_abs_err) c.max_abs_err = err;
  }
  return c;
}

}  // namespace nibble
