// Names and small helpers of the public value types (errors, dtypes, specs).
#include <fmt/format.h>

#include "nibble/dtype.h"
#include "nibble/error.h"
#include "nibble/spec.h"
#include "nibble/version.h"

namespace nibble {

const char* version() noexcept { return NIBBLE_VERSION_STRING; }

const char* errc_name(Errc c) noexcept {
  switch (c) {
    case Errc::invalid_argument: return "invalid argument";
    case Errc::format: return "format error";
    case Errc::unsupported: return "unsupported";
    case Errc::not_found: return "not found";
    case Errc::io: return "I/O error";
    case Errc::plugin: return "plugin error";
    case Errc::no_backend: return "no backend";
    case Errc::device: return "device error";
    case Errc::limit: return "limit exceeded";
    case Errc::plugin_unsupported: return "unsupported by the plugin";
    case Errc::no_device: return "no device";
    case Errc::out_of_memory: return "out of memory";
    case Errc::internal: return "internal error";
  }
  return "error";
}

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i16: return "i16";
    case DType::u16: return "u16";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
    case DType::i64: return "i64";
    case DType::u64: return "u64";
    case DType::boolean: return "bool";
    default: return "invalid";
  }
}

std::optional<DType> parse_dtype(std::string_view s) noexcept {
  if (s == "f16" || s == "fp16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f32" || s == "fp32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f64" || s == "float64") return DType::f64;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "u8" || s == "uint8") return DType::u8;
  if (s == "i8" || s == "int8") return DType::i8;
  return std::nullopt;
}

const char* weight_type_name(WeightType t) noexcept {
  switch (t) {
    case WeightType::uint4: return "uint4";
    case WeightType::uint4b8: return "uint4b8";
    case WeightType::uint8: return "uint8";
    case WeightType::uint8b128: return "uint8b128";
    case WeightType::uint2: return "uint2";
    case WeightType::uint2b2: return "uint2b2";
    case WeightType::uint3: return "uint3";
    case WeightType::uint3b4: return "uint3b4";
  }
  return "invalid";
}

WeightType weight_type_of(int32_t bits, bool symmetric) {
  const int32_t t = nibble_weight_type_of(bits, symmetric ? 1 : 0);
  if (t == NIBBLE_WT_INVALID)
    throw Error(Errc::unsupported, fmt::format("{}-bit weights: nibble runs 2, 3, 4 and 8 bits", bits));
  return WeightType(t);
}

const char* format_name(Format f) noexcept {
  switch (f) {
    case Format::unknown: return "in-memory";
    case Format::gptq: return "gptq";
    case Format::gptq_v2: return "gptq_v2";
    case Format::awq: return "awq";
    case Format::compressed_tensors: return "compressed-tensors";
    case Format::autoround: return "auto-round";
  }
  return "invalid";
}

const char* parallel_name(Parallel p) noexcept {
  switch (p) {
    case Parallel::none: return "none";
    case Parallel::column: return "column";
    case Parallel::row: return "row";
  }
  return "invalid";
}

nibble_linear_spec LinearSpec::to_abi() const noexcept {
  nibble_linear_spec s{};
  s.struct_size = sizeof(nibble_linear_spec);
  s.layer_name = name.c_str();
  s.k = k;
  s.n = n;
  s.full_k = full_k ? full_k : k;
  s.full_n = full_n ? full_n : n;
  s.parallel = int32_t(parallel);
  s.bits = bits;
  s.group_size = group_size;
  s.weight_type = int32_t(weight_type);
  s.act_dtype = int32_t(act_dtype);
  s.scale_dtype = int32_t(scale_dtype);
  s.act_order = act_order ? 1 : 0;
  s.has_bias = has_bias ? 1 : 0;
  s.format = int32_t(format);
  return s;
}

std::string LinearSpec::summary() const {
  std::string s = fmt::format("{} G{} {} k={} n={}", weight_type_name(weight_type), group_size,
                              dtype_name(act_dtype), k, n);
  if (act_order) s += " act_order";
  if (has_bias) s += " bias";
  if (parallel != Parallel::none)
    s += fmt::format(" {}-parallel of {}x{}", parallel_name(parallel), full_k, full_n);
  return s;
}

}  // namespace nibble
