// process_weights' host half: canonical form -> the layout of rocm_layout.h.
#include "rocm_layout.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "gpu_plugin.h"
#include "nibble/dtype.h"
#include "nibble_planes.h"

namespace nibble::rocm {

namespace {

// The layout of a 4-bit layer.
HostLayout make_layout_4bit(const nibble_linear_spec& s, const nibble_canonical_weights& w) {
  if (!w.qweight || !w.scales) throw std::invalid_argument("tensor 'qweight' or 'scales' is missing");
  if (s.weight_type == NIBBLE_WT_UINT4 && !w.zeros)
    throw std::invalid_argument("tensor 'zeros' is missing for a uint4 layer");
  if (s.act_order && !w.g_idx) throw std::invalid_argument("tensor 'g_idx' is missing for an act-order layer");
  if (s.has_bias && !w.bias) throw std::invalid_argument("tensor 'bias' is missing");
  if (s.k <= 0 || s.n <= 0) throw std::invalid_argument("expected positive K and N");

  HostLayout out;
  LayoutDims& d = out.d;
  d.k = s.k;
  d.n = s.n;
  d.groups = nibble_spec_num_groups(&s);
  const int64_t K = s.k, N = s.n, G = s.group_size <= 0 ? K : s.group_size;
  const auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };

  // Members of each group, in canonical order (act order only).
  std::vector<std::vector<int32_t>> members;
  if (s.act_order) {
    members.resize(std::size_t(d.groups));
    for (int64_t k = 0; k < K; ++k) {
      const int64_t g = w.g_idx[k];
      if (g < 0 || g >= d.groups)
        throw std::invalid_argument("tensor 'g_idx': value " + std::to_string(g) + " at row " + std::to_string(k) +
                                    " outside [0, " + std::to_string(d.groups) + ")");
      members[std::size_t(g)].push_back(int32_t(k));
    }
    std::size_t largest = 1;
    for (const auto& m : members) largest = std::max(largest, m.size());
    d.g_eff = round_up(int64_t(largest), kGroupAlign);
  } else {
    d.g_eff = round_up(G, kGroupAlign);  // G is 32, 64 or 128 already; per channel: K rounded up
  }
  d.k_pad = d.groups * d.g_eff;
  d.lines = d.k_pad / kLineRows;
  d.quads = (N + kQuadCols - 1) / kQuadCols;
  if (!s.act_order && d.k_pad < K)
    throw std::invalid_argument("internal: padded K " + std::to_string(d.k_pad) + " below K " + std::to_string(K));

  // Row map (act order): group g's members fill its slot from the start; the rest is padding.
  if (s.act_order) {
    out.row_src.assign(std::size_t(d.k_pad), -1);
    for (int64_t g = 0; g < d.groups; ++g) {
      const auto& m = members[std::size_t(g)];
      std::copy(m.begin(), m.end(), out.row_src.begin() + g * d.g_eff);
    }
  }

  // Codes.
  out.codes.assign(std::size_t(d.quads * d.lines * kQuadCols), 0u);
  const int64_t k_words = (K + 7) / 8;  // canonical rows of words
  for (int64_t q = 0; q < d.quads; ++q) {
    const int cols = int(std::min<int64_t>(kQuadCols, N - q * kQuadCols));
    for (int c = 0; c < cols; ++c) {
      const int64_t col = q * kQuadCols + c;
      if (out.row_src.empty()) {
        // Identity rows: padded row p is canonical row p, so each canonical word is one of ours
        // (canonical rows past K inside the last word are zero by the canonical form's contract).
        for (int64_t l = 0; l < k_words; ++l) out.codes[code_index(d, q, l, c)] = w.qweight[l * N + col];
      } else {
        for (int64_t p = 0; p < d.k_pad; ++p) {
          const int32_t src = out.row_src[std::size_t(p)];
          if (src < 0) continue;
          const uint32_t code = (w.qweight[(src / 8) * N + col] >> (4 * (src % 8))) & 0xfu;
          out.codes[code_index(d, q, p / kLineRows, c)] |= code << (4 * (p % kLineRows));
        }
      }
    }
  }

  // Scales (exact: f16, bf16 and f32 all convert to f32 without rounding) and zero points.
  out.scales.assign(std::size_t(d.quads * d.groups * kQuadCols), 0.0f);
  out.zeros.assign(std::size_t(d.quads * d.groups), 0);
  for (int64_t q = 0; q < d.quads; ++q)
    for (int64_t g = 0; g < d.groups; ++g) {
      uint16_t zq = 0;
      for (int c = 0; c < kQuadCols; ++c) {
        const int64_t col = q * kQuadCols + c;
        uint32_t z = 8;
        if (col < N) {
          out.scales[scale_index(d, q, g, c)] = float(load_float(w.scales, DType(s.scale_dtype), std::size_t(g * N + col)));
          if (s.weight_type == NIBBLE_WT_UINT4) z = w.zeros[g * N + col];
          if (z > 15)
            throw std::invalid_argument("tensor 'zeros': value " + std::to_string(z) + " at [" + std::to_string(g) +
                                        ", " + std::to_string(col) + "] outside 0..15");
        }
        zq = uint16_t(zq | (z << (4 * c)));
      }
      out.zeros[zero_index(d, q, g)] = zq;
    }

  if (s.has_bias) {
    out.bias.assign(std::size_t(d.quads * kQuadCols), 0.0f);
    for (int64_t c = 0; c < N; ++c) out.bias[std::size_t(c)] = float(load_float(w.bias, DType(s.act_dtype), std::size_t(c)));
  }
  return out;
}

}  // namespace

HostLayout make_layout(const nibble_linear_spec& s, const nibble_canonical_weights& w) {
  if (!plugin::needs_nibble_planes(s)) return make_layout_4bit(s, w);
  // The equivalent 4-bit layer; its rows read x through the planes' row map composed with the
  // layout's own, and x keeps the real layer's K columns.
  const plugin::NibblePlanes planes = plugin::make_nibble_planes(s, w);
  HostLayout h = make_layout_4bit(planes.spec, planes.weights());
  h.row_src = plugin::compose_row_map(h.row_src, h.d.k_pad, planes.spec.k, planes.x_rows);
  h.d.k = s.k;
  return h;
}

}  // namespace nibble::rocm
