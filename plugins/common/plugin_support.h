// Helpers shared by the in-tree plugins, on the plugin side of the ABI: message buffers, exception
// guards (nothing may unwind across the C boundary) and the capability check every can_implement
// starts with. Header-only and independent of libnibble, as a third-party plugin would be.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "nibble/plugin_abi.h"

namespace nibble::plugin {

/// printf into the host's message buffer (NUL-terminated, truncated); returns `status`.
inline int32_t fail(int32_t status, char* msg, size_t cap, const char* format, ...)
    __attribute__((format(printf, 4, 5)));
inline int32_t fail(int32_t status, char* msg, size_t cap, const char* format, ...) {
  if (msg && cap) {
    va_list ap;
    va_start(ap, format);
    std::vsnprintf(msg, cap, format, ap);
    va_end(ap);
  }
  return status;
}

/// Runs f() and turns any exception into a status and a message.
template <class F>
int32_t guarded(char* msg, size_t cap, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "out of host memory");
  } catch (const std::exception& e) {
    return fail(NIBBLE_ERR_INTERNAL, msg, cap, "%s", e.what());
  } catch (...) {
    return fail(NIBBLE_ERR_INTERNAL, msg, cap, "unknown exception");
  }
}

inline const char* weight_type_str(int32_t t) {
  switch (t) {
    case NIBBLE_WT_UINT4: return "uint4";
    case NIBBLE_WT_UINT4B8: return "uint4b8";
    case NIBBLE_WT_UINT8: return "uint8";
    case NIBBLE_WT_UINT8B128: return "uint8b128";
    case NIBBLE_WT_UINT2: return "uint2";
    case NIBBLE_WT_UINT2B2: return "uint2b2";
    case NIBBLE_WT_UINT3: return "uint3";
    case NIBBLE_WT_UINT3B4: return "uint3b4";
    default: return "invalid";
  }
}

/// "2, 4, 8" for the bits set in `mask` (bit widths or weight types, by `names`).
inline std::string mask_str(uint32_t mask, const char* (*names)(int32_t) = nullptr) {
  std::string out;
  for (int32_t i = 0; i < 32; ++i)
    if (mask & (1u << i)) {
      if (!out.empty()) out += ", ";
      out += names ? names(i) : std::to_string(i);
    }
  return out.empty() ? "none" : out;
}

inline const char* dtype_str(int32_t d) {
  switch (d) {
    case NIBBLE_DTYPE_F16: return "f16";
    case NIBBLE_DTYPE_BF16: return "bf16";
    case NIBBLE_DTYPE_F32: return "f32";
    default: return "other";
  }
}

/// The checks every can_implement starts with: the spec against the plugin's declared
/// capabilities. The host checks the same before calling, but a plugin must never rely on that.
inline int32_t check_caps(const nibble_capabilities& c, const nibble_linear_spec* s, char* msg, size_t cap) {
  if (!s || s->struct_size < sizeof(nibble_linear_spec))
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "linear spec missing or from an older host");
  if (s->k <= 0 || s->n <= 0)
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "expected positive K and N, found K=%lld N=%lld",
                (long long)s->k, (long long)s->n);
  if (s->bits < 0 || s->bits > 31 || !(c.bits & (1u << s->bits)))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "%d-bit weights not supported (runs %s bits)", s->bits,
                mask_str(c.bits).c_str());
  if (s->weight_type <= 0 || s->weight_type > 31 || !(c.weight_types & NIBBLE_WT_BIT(s->weight_type)))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "weight type %s not supported (runs %s)",
                weight_type_str(s->weight_type), mask_str(c.weight_types, weight_type_str).c_str());
  if (nibble_weight_type_bits(s->weight_type) != s->bits)
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "weight type %s has %d bits, but the spec says bits = %d",
                weight_type_str(s->weight_type), nibble_weight_type_bits(s->weight_type), s->bits);
  if (s->act_dtype <= 0 || s->act_dtype > 31 || !(c.act_dtypes & NIBBLE_DTYPE_BIT(s->act_dtype)))
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "activation dtype %s not supported", dtype_str(s->act_dtype));
  if (s->scale_dtype != NIBBLE_DTYPE_F16 && s->scale_dtype != NIBBLE_DTYPE_BF16 &&
      s->scale_dtype != NIBBLE_DTYPE_F32)
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "scale dtype %s not supported", dtype_str(s->scale_dtype));
  bool g_ok = false;
  for (uint32_t i = 0; i < c.num_group_sizes && i < NIBBLE_MAX_GROUP_SIZES; ++i)
    g_ok |= c.group_sizes[i] == s->group_size;
  if (!g_ok) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "group size %d not supported", s->group_size);
  if (s->act_order && !c.act_order) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "act order not supported");
  if (s->has_bias && !c.bias) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "bias not supported");
  if (c.k_multiple > 1 && s->k % c.k_multiple)
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "K_part %lld not a multiple of %u", (long long)s->k, c.k_multiple);
  if (c.n_multiple > 1 && s->n % c.n_multiple)
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "N_part %lld not a multiple of %u", (long long)s->n, c.n_multiple);
  return NIBBLE_OK;
}

/// Checks a 2-D activation tensor of apply(): dtype, rank, inner dimension.
inline int32_t check_io(const nibble_tensor* t, const char* name, int32_t dtype, int64_t inner, int64_t rows,
                        char* msg, size_t cap) {
  if (!t || !t->data)
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "tensor '%s' is missing", name);
  if (t->ndim != 2)
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "tensor '%s': expected rank 2, found rank %d", name, t->ndim);
  const std::string want_rows = rows >= 0 ? std::to_string(rows) : "M >= 1";
  if (t->dtype != dtype || t->shape[1] != inner || t->shape[0] < 1 || (rows >= 0 && t->shape[0] != rows))
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "tensor '%s': expected %s [%s, %lld], found %s [%lld, %lld]",
                name, dtype_str(dtype), want_rows.c_str(), (long long)inner, dtype_str(t->dtype),
                (long long)t->shape[0], (long long)t->shape[1]);
  return NIBBLE_OK;
}

}  // namespace nibble::plugin
