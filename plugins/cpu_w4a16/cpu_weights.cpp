#include "cpu_weights.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "nibble/dtype.h"

namespace nibble::cpu {

CpuWeights prepare_cpu_weights(const nibble_linear_spec& s, const nibble_canonical_weights& w) {
  if (!w.qweight || !w.scales) throw std::invalid_argument("tensor 'qweight' or 'scales' is missing");
  if (s.weight_type == NIBBLE_WT_UINT4 && !w.zeros)
    throw std::invalid_argument("tensor 'zeros' is missing for a uint4 layer");
  if (s.act_order && !w.g_idx) throw std::invalid_argument("tensor 'g_idx' is missing for an act-order layer");
  if (s.has_bias && !w.bias) throw std::invalid_argument("tensor 'bias' is missing");

  CpuWeights cw;
  cw.k = s.k;
  cw.n = s.n;
  const int64_t G = s.group_size <= 0 ? s.k : s.group_size;
  cw.groups = nibble_spec_num_groups(&s);
  cw.act_dtype = s.act_dtype;
  const int64_t K = s.k, N = s.n, ng = cw.groups;

  // Group of every canonical row, and the order that makes groups contiguous.
  std::vector<int32_t> group(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) {
    const int64_t g = s.act_order ? w.g_idx[k] : k / G;
    if (g < 0 || g >= ng)
      throw std::invalid_argument("tensor 'g_idx': value " + std::to_string(g) + " at row " +
                                  std::to_string(k) + " outside [0, " + std::to_string(ng) + ")");
    group[size_t(k)] = int32_t(g);
  }
  std::vector<int32_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  if (s.act_order) {
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return group[size_t(a)] < group[size_t(b)]; });
    bool identity = true;
    for (int64_t i = 0; i < K; ++i) identity &= order[size_t(i)] == i;
    if (!identity) cw.perm = order;
  }
  cw.group_start.assign(size_t(ng + 1), 0);
  for (int64_t k = 0; k < K; ++k) cw.group_start[size_t(group[size_t(k)] + 1)]++;
  for (int64_t g = 0; g < ng; ++g) cw.group_start[size_t(g + 1)] += cw.group_start[size_t(g)];

  const int64_t k8 = (K + 7) / 8;
  cw.q.assign(size_t(k8 * N), 0);
  if (cw.perm.empty()) {
    std::copy(w.qweight, w.qweight + k8 * N, cw.q.begin());
  } else {
    for (int64_t i = 0; i < K; ++i) {
      const int64_t src = cw.perm[size_t(i)];
      for (int64_t c = 0; c < N; ++c) {
        const uint32_t code = (w.qweight[(src / 8) * N + c] >> (4 * (src % 8))) & 0xfu;
        cw.q[size_t((i / 8) * N + c)] |= code << (4 * (i % 8));
      }
    }
  }

  cw.scales.resize(size_t(ng * N));
  cw.zeros.resize(size_t(ng * N));
  for (int64_t i = 0; i < ng * N; ++i) {
    cw.scales[size_t(i)] = float(load_float(w.scales, DType(s.scale_dtype), size_t(i)));
    cw.zeros[size_t(i)] = s.weight_type == NIBBLE_WT_UINT4 ? float(w.zeros[i]) : 8.0f;
  }
  if (s.has_bias) {
    cw.bias.resize(size_t(N));
    for (int64_t i = 0; i < N; ++i) cw.bias[size_t(i)] = float(load_float(w.bias, DType(s.act_dtype), size_t(i)));
  }
  return cw;
}

}  // namespace nibble::cpu
