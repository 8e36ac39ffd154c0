// Element types, their sizes and names, and exact conversions between the 16-bit float formats and
// float. Public and header-only so that plugins and hosts share one definition.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "nibble/plugin_abi.h"

namespace nibble {

enum class DType : int32_t {
  invalid = NIBBLE_DTYPE_INVALID,
  f16 = NIBBLE_DTYPE_F16,
  bf16 = NIBBLE_DTYPE_BF16,
  f32 = NIBBLE_DTYPE_F32,
  f64 = NIBBLE_DTYPE_F64,
  i8 = NIBBLE_DTYPE_I8,
  u8 = NIBBLE_DTYPE_U8,
  i16 = NIBBLE_DTYPE_I16,
  u16 = NIBBLE_DTYPE_U16,
  i32 = NIBBLE_DTYPE_I32,
  u32 = NIBBLE_DTYPE_U32,
  i64 = NIBBLE_DTYPE_I64,
  u64 = NIBBLE_DTYPE_U64,
  boolean = NIBBLE_DTYPE_BOOL,
};

/// Bytes per element; 0 for invalid.
constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::i8: case DType::u8: case DType::boolean: return 1;
    case DType::f16: case DType::bf16: case DType::i16: case DType::u16: return 2;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    case DType::f64: case DType::i64: case DType::u64: return 8;
    default: return 0;
  }
}

/// Short lowercase name: "f16", "bf16", "f32", "i32", ...
std::string_view dtype_name(DType t) noexcept;
/// Inverse of dtype_name, also accepting "fp16", "float16", "bfloat16", "fp32", "float32".
std::optional<DType> parse_dtype(std::string_view s) noexcept;

constexpr bool is_float(DType t) noexcept {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}

// ---- 16-bit floats ----------------------------------------------------------------------------

inline uint32_t float_bits(float f) noexcept { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) noexcept { float f; std::memcpy(&f, &u, 4); return f; }

/// bf16 -> float is exact: the bf16 bits are the top half of the float.
inline float bf16_to_float(uint16_t h) noexcept { return bits_float(uint32_t(h) << 16); }

/// float -> bf16, round to nearest even; NaN stays NaN.
inline uint16_t float_to_bf16(float f) noexcept {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// IEEE half -> float, exact (including subnormals, inf, NaN).
inline float f16_to_float(uint16_t h) noexcept {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24
    float v = float(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// float -> IEEE half, round to nearest even, overflow to inf, NaN stays NaN.
inline uint16_t float_to_f16(float f) noexcept {
  uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (u >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (u < 0x38800000u) {                                  // below the smallest normal half, 2^-14
    // subnormal half: round(f * 2^24) with ties to even, done in float arithmetic exactly
    float a = bits_float(u) * 16777216.0f;
    float r = a + 8388608.0f - 8388608.0f;  // rounds to an integer with ties to even
    return uint16_t(sign | uint16_t(r));
  }
  uint32_t mant_odd = (u >> 13) & 1u;
  u += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return uint16_t(sign | uint16_t(u >> 13));
}

/// Load element i of a float tensor of dtype t as double (exact for f16/bf16/f32/f64).
inline double load_float(const void* p, DType t, std::size_t i) noexcept {
  switch (t) {
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    default: return 0.0;
  }
}

/// Store v rounded to dtype t (round to nearest even).
inline void store_float(void* p, DType t, std::size_t i, double v) noexcept {
  switch (t) {
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_f16(float(v)); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v)); break;
    case DType::f32: static_cast<float*>(p)[i] = float(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    default: break;
  }
}

}  // namespace nibble
