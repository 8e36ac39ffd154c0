// Nibble planes: a 2-, 3- or 8-bit layer in the canonical form rewritten as an equivalent 4-bit
// layer, so that a plugin whose kernels read 4-bit codes runs every width the canonical form has.
// Header-only, on the plugin side of the ABI (no libnibble), as a third-party plugin would use it.
//
// 2 and 3 bits. A code fits a nibble as it is. Zero points stay what they are (uint4). Symmetric
// codes move by 8 - 2^(b-1), which keeps their value against the zero 8 (uint4b8): no zero points.
// Rows, groups and g_idx are unchanged.
//
// 8 bits. A code q = 16 hi + lo is two nibbles, and with the zero point split the same way
// (z = 16 zh + zl),
//     s (q - z) = 16 s (hi - zh) + s (lo - zl),
// a sum of two 4-bit terms with integer zero points and scales s and 16 s (16 s is exact in every
// scale dtype). Each real group g becomes two virtual groups of G' rows, 2g holding the low nibbles
// of its rows and 2g + 1 the high nibbles, both reading the same x rows: the virtual layer has
// K' = 2 * groups * G' rows and no act order (act order is resolved into the order of its rows),
// and `x_rows` says which real row of x each virtual row reads (-1: padding, x = 0). G' is the
// largest group's row count rounded up to 32, so that groups never straddle a 32-row unit.
// Symmetric 8-bit (z = 128) splits into zh = 8, zl = 0: the virtual layer is uint4 either way.
//
// A plugin prepares the virtual layer as it prepares any 4-bit layer and gathers x through x_rows
// (composed with its own row permutation, if any) at apply time. The bytes streamed are the real
// layer's codes, plus one scale and one zero point more per group.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "nibble/dtype.h"
#include "nibble/plugin_abi.h"

namespace nibble::plugin {

struct NibblePlanes {
  nibble_linear_spec spec{};        ///< the virtual 4-bit layer (layer_name borrowed from the real spec)
  std::vector<uint32_t> qweight;    ///< canonical 4-bit qweight [ceil(K'/8)][N]
  std::vector<uint8_t> zeros;       ///< [groups'][N], or empty for uint4b8
  std::vector<uint8_t> scales;      ///< [groups'][N] of spec.scale_dtype (raw bytes)
  std::vector<int32_t> g_idx;       ///< [K'] or empty (the real g_idx is kept by reference otherwise)
  const int32_t* real_g_idx = nullptr;
  const void* bias = nullptr;       ///< the real layer's bias (unchanged)
  std::vector<int32_t> x_rows;      ///< [K']: real row of x each virtual row reads, -1 = zero; empty = the same rows
  int64_t real_k = 0;               ///< K of the real layer (x has this many columns)

  /// The virtual layer's canonical weights (pointers into this object; valid while it lives).
  nibble_canonical_weights weights() const {
    nibble_canonical_weights w{};
    w.qweight = qweight.data();
    w.zeros = zeros.empty() ? nullptr : zeros.data();
    w.scales = scales.data();
    w.g_idx = !g_idx.empty() ? g_idx.data() : real_g_idx;
    w.bias = bias;
    return w;
  }
};

/// True where a layer of this spec needs nibble planes to run on 4-bit kernels.
inline bool needs_nibble_planes(const nibble_linear_spec& s) { return s.bits != 4; }

namespace planes_detail {

inline size_t scale_size(int32_t dtype) {
  switch (dtype) {
    case NIBBLE_DTYPE_F16: case NIBBLE_DTYPE_BF16: return 2;
    case NIBBLE_DTYPE_F32: return 4;
    default: throw std::invalid_argument("tensor 'scales': expected dtype f16, bf16 or f32");
  }
}

// scale * 16, exactly: 16 times a finite f16, bf16 or f32 value is representable in its dtype
// unless it overflows (a subnormal keeps its significant bits), and such a scale is refused.
inline void scale_times_16(const uint8_t* in, uint8_t* out, int32_t dtype) {
  float f;
  uint16_t h = 0;
  if (dtype == NIBBLE_DTYPE_F32) std::memcpy(&f, in, 4);
  else std::memcpy(&h, in, 2), f = dtype == NIBBLE_DTYPE_F16 ? f16_to_float(h) : bf16_to_float(h);
  const float g = f * 16.0f;
  const float back = dtype == NIBBLE_DTYPE_F32 ? g : dtype == NIBBLE_DTYPE_F16 ? f16_to_float(float_to_f16(g)) : bf16_to_float(float_to_bf16(g));
  if (!(g - g == 0.0f) || back != g)
    throw std::invalid_argument("tensor 'scales': a scale of " + std::to_string(f) + " times 16 does not fit its dtype");
  if (dtype == NIBBLE_DTYPE_F32) std::memcpy(out, &g, 4);
  else h = dtype == NIBBLE_DTYPE_F16 ? float_to_f16(g) : float_to_bf16(g), std::memcpy(out, &h, 2);
}

inline uint32_t stream_code(const uint32_t* qweight, int64_t n, int64_t col, int64_t k, int bits) {
  const int64_t bit = int64_t(bits) * k, r = bit >> 5;
  const int shift = int(bit & 31);
  uint64_t v = qweight[r * n + col] >> shift;
  if (shift + bits > 32) v |= uint64_t(qweight[(r + 1) * n + col]) << (32 - shift);
  return uint32_t(v & ((1u << bits) - 1));
}

}  // namespace planes_detail

/// The virtual 4-bit layer of a 2-, 3- or 8-bit one (see the top of this file). Throws
/// std::invalid_argument naming the tensor on inconsistent input.
inline NibblePlanes make_nibble_planes(const nibble_linear_spec& s, const nibble_canonical_weights& w) {
  const int bits = s.bits;
  if (bits != 2 && bits != 3 && bits != 8)
    throw std::invalid_argument("nibble planes: expected a 2-, 3- or 8-bit layer, found " + std::to_string(bits) + " bits");
  if (nibble_weight_type_bits(s.weight_type) != bits)
    throw std::invalid_argument("nibble planes: the weight type does not have " + std::to_string(bits) + " bits");
  if (!w.qweight || !w.scales) throw std::invalid_argument("tensor 'qweight' or 'scales' is missing");
  const bool sym = nibble_weight_type_symmetric(s.weight_type) != 0;
  if (!sym && !w.zeros) throw std::invalid_argument("tensor 'zeros' is missing for a layer with zero points");
  if (s.act_order && !w.g_idx) throw std::invalid_argument("tensor 'g_idx' is missing for an act-order layer");
  const int64_t K = s.k, N = s.n, groups = nibble_spec_num_groups(&s);
  const int64_t G = s.group_size <= 0 ? K : s.group_size;
  const size_t es = planes_detail::scale_size(s.scale_dtype);
  const auto* sc = static_cast<const uint8_t*>(w.scales);

  NibblePlanes p;
  p.spec = s;
  p.spec.bits = 4;
  p.real_k = K;
  p.bias = w.bias;
  const auto group_of = [&](int64_t k) -> int64_t {
    const int64_t g = s.act_order ? w.g_idx[k] : k / G;
    if (g < 0 || g >= groups)
      throw std::invalid_argument("tensor 'g_idx': value " + std::to_string(g) + " at row " + std::to_string(k) +
                                  " outside [0, " + std::to_string(groups) + ")");
    return g;
  };

  if (bits != 8) {
    // One plane: the same rows, each code in a nibble.
    p.spec.weight_type = sym ? NIBBLE_WT_UINT4B8 : NIBBLE_WT_UINT4;
    const uint32_t shift = sym ? uint32_t(8 - (1 << (bits - 1))) : 0;
    p.qweight.assign(size_t((K + 7) / 8 * N), 0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t c = 0; c < N; ++c)
        p.qweight[size_t((k / 8) * N + c)] |= (planes_detail::stream_code(w.qweight, N, c, k, bits) + shift) << (4 * (k % 8));
    if (!sym) p.zeros.assign(w.zeros, w.zeros + groups * N);
    p.scales.assign(sc, sc + size_t(groups * N) * es);
    p.real_g_idx = s.act_order ? w.g_idx : nullptr;
    return p;
  }

  // Two planes per group, rows in group order.
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(groups));
  for (int64_t k = 0; k < K; ++k) members[size_t(group_of(k))].push_back(int32_t(k));
  size_t largest = 1;
  for (const auto& m : members) largest = std::max(largest, m.size());
  const int64_t Gv = (int64_t(largest) + 31) / 32 * 32, Kv = 2 * groups * Gv;
  p.spec.k = Kv;
  p.spec.full_k = Kv;
  p.spec.full_n = N;
  p.spec.parallel = NIBBLE_PARALLEL_NONE;
  p.spec.group_size = int32_t(Gv);
  p.spec.act_order = 0;
  p.spec.weight_type = NIBBLE_WT_UINT4;
  p.qweight.assign(size_t(Kv / 8 * N), 0);
  p.x_rows.assign(size_t(Kv), -1);
  p.zeros.assign(size_t(2 * groups * N), 0);
  p.scales.assign(size_t(2 * groups * N) * es, 0);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t lo0 = 2 * g * Gv, hi0 = lo0 + Gv;
    const auto& rows = members[size_t(g)];
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t k = rows[i], vlo = lo0 + int64_t(i), vhi = hi0 + int64_t(i);
      p.x_rows[size_t(vlo)] = p.x_rows[size_t(vhi)] = int32_t(k);
      for (int64_t c = 0; c < N; ++c) {
        const uint32_t q = planes_detail::stream_code(w.qweight, N, c, k, 8);
        p.qweight[size_t((vlo / 8) * N + c)] |= (q & 0xfu) << (4 * (vlo % 8));
        p.qweight[size_t((vhi / 8) * N + c)] |= (q >> 4) << (4 * (vhi % 8));
      }
    }
    for (int64_t c = 0; c < N; ++c) {
      const uint32_t z = sym ? 128u : w.zeros[g * N + c];
      p.zeros[size_t(2 * g * N + c)] = uint8_t(z & 0xfu);
      p.zeros[size_t((2 * g + 1) * N + c)] = uint8_t(z >> 4);
      const uint8_t* in = sc + size_t(g * N + c) * es;
      std::memcpy(p.scales.data() + size_t(2 * g * N + c) * es, in, es);
      planes_detail::scale_times_16(in, p.scales.data() + size_t((2 * g + 1) * N + c) * es, s.scale_dtype);
    }
  }
  return p;
}

}  // namespace nibble::plugin
