// CanonicalLinear: the one weight layout every checkpoint format is converted into and every
// backend accepts, so that a format bug can live in exactly one place (core/src/formats_*.cpp).
//
// Layout (K = spec.k, N = spec.n, groups = spec.num_groups()):
//   qweight  u32 [ceil(K/8), N]  packed along K: nibble j of row r holds the code of k = 8r + j;
//                                rows past K are zero padding
//   zeros    u8  [groups, N]     true zero points 0..15 (GPTQ v2 meaning); empty for uint4b8
//   scales   f16|bf16|f32 [groups, N]
//   g_idx    i32 [K]             group of each input row; empty unless act order
//   bias     act dtype [N]       optional
// w[k, n] = scales[g, n] * (code(k, n) - zero(g, n)), g = g_idx.empty() ? k / G : g_idx[k].
#pragma once

#include <cstdint>
#include <string>

#include "nibble/spec.h"
#include "nibble/tensor.h"

namespace nibble {

struct CanonicalLinear {
  LinearSpec spec;  ///< k, n, group size, weight type, dtypes, act order, bias, format
  Tensor qweight;
  Tensor zeros;
  Tensor scales;
  Tensor g_idx;
  Tensor bias;

  /// Stored 4-bit code of element (k, n).
  uint8_t code(int64_t k, int64_t n) const noexcept {
    const uint32_t word = qweight.data_as<uint32_t>()[(k / 8) * spec.n + n];
    return uint8_t((word >> (4 * (k % 8))) & 0xfu);
  }
  int64_t group_of(int64_t k) const noexcept {
    return g_idx.empty() ? k / spec.effective_group() : g_idx.data_as<int32_t>()[k];
  }
  uint8_t zero(int64_t g, int64_t n) const noexcept {
    return zeros.empty() ? uint8_t(8) : zeros.data_as<uint8_t>()[g * spec.n + n];
  }
  double scale(int64_t g, int64_t n) const noexcept { return scales.at(std::size_t(g * spec.n + n)); }
  /// Dequantized w[k, n], exact in double.
  double weight(int64_t k, int64_t n) const noexcept {
    const int64_t g = group_of(k);
    return scale(g, n) * (double(code(k, n)) - double(zero(g, n)));
  }

  /// The C view handed to plugins (borrowed pointers into this object).
  nibble_canonical_weights to_abi() const noexcept;
};

/// Checks every tensor's dtype and shape against spec, zero points in 0..15 and g_idx values in
/// [0, groups). Throws Errc::format naming the layer, the tensor, the expected and the found value.
void validate(const CanonicalLinear& w);

/// Packs codes u8 [K, N] (0..15) into the canonical qweight u32 [ceil(K/8), N].
Tensor pack_codes_k(const Tensor& codes_kn);
/// Unpacks a canonical qweight back into codes u8 [K, N].
Tensor unpack_codes_k(const Tensor& qweight, int64_t k);

/// Dequantized weight as f32 [K, N] (each element computed exactly in double, then rounded once).
Tensor dequantize(const CanonicalLinear& w);

/// A layer with uniformly random codes, zero points, scales (and g_idx / bias when the spec asks),
/// reproducible from `seed`. Scales are drawn so that |w| is about 0.02, as in real LLM layers.
CanonicalLinear random_canonical(const LinearSpec& spec, uint64_t seed);

/// Random activations [m, k] of dtype, reproducible from `seed`, values exactly representable.
Tensor random_activations(int64_t m, int64_t k, DType dtype, uint64_t seed);

}  // namespace nibble
