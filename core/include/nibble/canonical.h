// CanonicalLinear: the one weight layout every checkpoint format is converted into and every
// backend accepts, so that a format bug can live in exactly one place (core/src/formats/).
//
// Layout (K = spec.k, N = spec.n, b = spec.bits in {2, 3, 4, 8}, groups = spec.num_groups()):
//   qweight  u32 [ceil(K*b/32), N]  packed along K: each column is a little-endian bit stream down
//                                   its words, the code of row k at stream bits b*k .. b*k+b-1
//                                   (4 bits: nibble j of row r is k = 8r + j; 3 bits: codes 10 and
//                                   21 of every 32 straddle two words, as GPTQ packs them); stream
//                                   bits past K*b are zero
//   zeros    u8  [groups, N]     true zero points 0..2^b-1 (GPTQ v2 meaning); empty for the
//                                symmetric types (zero 2^(b-1))
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

  /// Stored code of element (k, n).
  uint8_t code(int64_t k, int64_t n) const noexcept {
    return stream_code(qweight.data_as<uint32_t>() + n, spec.n, k, spec.bits);
  }
  /// Code `k` of a column's bit stream of `bits`-bit codes, whose words lie `stride` words apart.
  static uint8_t stream_code(const uint32_t* column, int64_t stride, int64_t k, int bits) noexcept {
    const int64_t bit = int64_t(bits) * k, r = bit >> 5;
    const int shift = int(bit & 31);
    uint64_t v = column[r * stride] >> shift;
    if (shift + bits > 32) v |= uint64_t(column[(r + 1) * stride]) << (32 - shift);
    return uint8_t(v & ((1u << bits) - 1));
  }
  int64_t group_of(int64_t k) const noexcept {
    return g_idx.empty() ? k / spec.effective_group() : g_idx.data_as<int32_t>()[k];
  }
  uint8_t zero(int64_t g, int64_t n) const noexcept {
    return zeros.empty() ? uint8_t(symmetric_zero(spec.weight_type)) : zeros.data_as<uint8_t>()[g * spec.n + n];
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

/// Checks the spec (bits agree with the weight type, positive sizes, group size), every tensor's
/// dtype and shape, zero points in 0..2^b-1, zero stream bits past K, finite scales and g_idx values
/// in [0, groups). Throws Errc::format naming the layer, the tensor, the expected and the found value.
void validate(const CanonicalLinear& w);

/// Rows of the canonical qweight of K codes of `bits` bits: ceil(K * bits / 32).
inline int64_t packed_rows(int64_t k, int bits) noexcept { return (k * bits + 31) / 32; }
/// Packs codes u8 [K, N] (each < 2^bits) into the canonical qweight u32 [packed_rows(K, bits), N].
Tensor pack_codes_k(const Tensor& codes_kn, int bits = 4);
/// Unpacks a canonical qweight back into codes u8 [K, N].
Tensor unpack_codes_k(const Tensor& qweight, int64_t k, int bits = 4);

/// Dequantized weight as f32 [K, N] (each element computed exactly in double, then rounded once).
Tensor dequantize(const CanonicalLinear& w);

/// A layer with uniformly random codes, zero points, scales (and g_idx / bias when the spec asks),
/// reproducible from `seed`. Scales are drawn so that |w| is about 0.02, as in real LLM layers.
CanonicalLinear random_canonical(const LinearSpec& spec, uint64_t seed);

/// Random activations [m, k] of dtype, reproducible from `seed`, values exactly representable.
Tensor random_activations(int64_t m, int64_t k, DType dtype, uint64_t seed);

}  // namespace nibble
