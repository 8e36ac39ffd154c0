/* example_scalar: a third-party nibble backend in portable C.
 *
 * What it shows: a plugin needs only <nibble/plugin_abi.h> (no libnibble, no Boost, no C++); it
 * declares its own capabilities (symmetric and asymmetric 4-bit, G in {32, 64, 128, -1}, f16 and
 * f32 activations, bias; no act order, no bf16), refuses everything else with a reason, keeps its
 * own weight layout (dequantized f32, [N][K] so that each output is one contiguous dot product),
 * and has the lowest priority, so it runs only where nothing better fits or where a policy asks
 * for it. */
#include <nibble/plugin_abi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct scalar_weights {
  int64_t k, n;
  int32_t act_dtype;
  float* w;    /* [n][k] dequantized */
  float* bias; /* [n] or NULL */
} scalar_weights;

static int32_t fail(int32_t status, char* msg, size_t cap, const char* text) {
  if (msg && cap) snprintf(msg, cap, "%s", text);
  return status;
}

static float half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  float f;
  if (exp == 0x1f) bits = sign | 0x7f800000u | (mant << 13);
  else if (exp == 0) {
    f = (float)mant * 5.9604644775390625e-08f; /* subnormal: mant * 2^-24 */
    return sign ? -f : f;
  } else bits = sign | ((exp + 112u) << 23) | (mant << 13);
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_half(float f) { /* round to nearest even */
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (u < 0x38800000u) {
    float a;
    memcpy(&a, &u, 4);
    a = a * 16777216.0f + 8388608.0f - 8388608.0f;
    return (uint16_t)(sign | (uint16_t)a);
  }
  u += 0xc8000fffu + ((u >> 13) & 1u);
  return (uint16_t)(sign | (uint16_t)(u >> 13));
}

static float load_scalar(const void* p, int32_t dtype, int64_t i) {
  if (dtype == NIBBLE_DTYPE_F32) return ((const float*)p)[i];
  if (dtype == NIBBLE_DTYPE_F16) return half_to_float(((const uint16_t*)p)[i]);
  if (dtype == NIBBLE_DTYPE_BF16) {
    const uint32_t bits = (uint32_t)((const uint16_t*)p)[i] << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
  }
  return 0.0f;
}

static int32_t probe(char* msg, size_t cap) { return fail(NIBBLE_OK, msg, cap, "portable C, one thread"); }

static int32_t can_implement(const nibble_linear_spec* s, char* msg, size_t cap) {
  if (!s) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null spec");
  if (s->bits != 4) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "only 4-bit weights");
  if (s->act_dtype != NIBBLE_DTYPE_F16 && s->act_dtype != NIBBLE_DTYPE_F32)
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "activations must be f16 or f32 (no bf16 here)");
  if (s->act_order) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "act order (g_idx) is not implemented");
  if (s->group_size != 32 && s->group_size != 64 && s->group_size != 128 && s->group_size != -1)
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "group size must be 32, 64, 128 or -1");
  if (s->k > 65536 || s->n > 65536) return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "K and N above 65536 would be too slow here");
  return NIBBLE_OK;
}

static int32_t process_weights(const nibble_linear_spec* s, const nibble_canonical_weights* cw, void* stream,
                               nibble_prepared** out, char* msg, size_t cap) {
  int32_t st = can_implement(s, msg, cap);
  (void)stream;
  if (st != NIBBLE_OK) return st;
  if (!cw || !cw->qweight || !cw->scales || !out) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "missing tensors");
  scalar_weights* w = calloc(1, sizeof *w);
  if (!w) return fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "out of memory");
  w->k = s->k;
  w->n = s->n;
  w->act_dtype = s->act_dtype;
  w->w = malloc((size_t)(s->k * s->n) * sizeof(float));
  if (!w->w) {
    free(w);
    return fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "out of memory");
  }
  const int64_t g_size = s->group_size > 0 ? s->group_size : s->k;
  for (int64_t k = 0; k < s->k; ++k)
    for (int64_t n = 0; n < s->n; ++n) {
      const int64_t g = k / g_size;
      const float q = (float)((cw->qweight[(k / 8) * s->n + n] >> (4 * (k % 8))) & 0xfu);
      const float z = cw->zeros ? (float)cw->zeros[g * s->n + n] : 8.0f;
      w->w[n * s->k + k] = load_scalar(cw->scales, s->scale_dtype, g * s->n + n) * (q - z);
    }
  if (cw->bias) {
    w->bias = malloc((size_t)s->n * sizeof(float));
    for (int64_t n = 0; w->bias && n < s->n; ++n) w->bias[n] = load_scalar(cw->bias, s->act_dtype, n);
  }
  *out = (nibble_prepared*)w;
  return NIBBLE_OK;
}

static int32_t apply(const nibble_prepared* h, const nibble_tensor* x, nibble_tensor* y, void* stream, char* msg,
                     size_t cap) {
  const scalar_weights* w = (const scalar_weights*)h;
  (void)stream;
  if (!w || !x || !y || !x->data || !y->data) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "null argument");
  if (x->ndim != 2 || x->shape[1] != w->k || y->ndim != 2 || y->shape[1] != w->n || y->shape[0] != x->shape[0] ||
      x->dtype != w->act_dtype || y->dtype != w->act_dtype)
    return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "x must be [M, K] and y [M, N] of the activation dtype");
  for (int64_t m = 0; m < x->shape[0]; ++m)
    for (int64_t n = 0; n < w->n; ++n) {
      double acc = w->bias ? w->bias[n] : 0.0;
      const float* row = w->w + n * w->k;
      for (int64_t k = 0; k < w->k; ++k) acc += (double)load_scalar(x->data, w->act_dtype, m * w->k + k) * row[k];
      if (w->act_dtype == NIBBLE_DTYPE_F32) ((float*)y->data)[m * w->n + n] = (float)acc;
      else ((uint16_t*)y->data)[m * w->n + n] = float_to_half((float)acc);
    }
  return NIBBLE_OK;
}

static void release(nibble_prepared* h) {
  scalar_weights* w = (scalar_weights*)h;
  if (!w) return;
  free(w->w);
  free(w->bias);
  free(w);
}

static int32_t device_alloc(size_t bytes, void** ptr, char* msg, size_t cap) {
  *ptr = malloc(bytes ? bytes : 1);
  return *ptr ? NIBBLE_OK : fail(NIBBLE_ERR_OUT_OF_MEMORY, msg, cap, "out of memory");
}
static void device_free(void* p) { free(p); }
static int32_t device_copy(void* dst, const void* src, size_t bytes, int32_t kind, void* stream, char* msg, size_t cap) {
  (void)kind, (void)stream, (void)msg, (void)cap;
  memmove(dst, src, bytes);
  return NIBBLE_OK;
}
static int32_t device_sync(void* stream, char* msg, size_t cap) {
  (void)stream, (void)msg, (void)cap;
  return NIBBLE_OK;
}

static const nibble_plugin_api kApi = {
    .abi_version = NIBBLE_ABI_VERSION,
    .struct_size = sizeof(nibble_plugin_api),
    .name = "example_scalar",
    .version = "0.1.0",
    .platform = "cpu",
    .description = "third-party example: portable C, dequantized f32 dot products",
    .priority = 1,
    .caps = {.formats = NIBBLE_FORMATS_ALL,
             .weight_types = NIBBLE_WT_BIT(NIBBLE_WT_UINT4) | NIBBLE_WT_BIT(NIBBLE_WT_UINT4B8),
             .bits = 1u << 4,
             .act_dtypes = NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F16) | NIBBLE_DTYPE_BIT(NIBBLE_DTYPE_F32),
             .group_sizes = {32, 64, 128, -1},
             .num_group_sizes = 4,
             .act_order = 0,
             .bias = 1,
             .k_multiple = 1,
             .n_multiple = 1,
             .min_device_level = 0},
    .probe = probe,
    .can_implement = can_implement,
    .process_weights = process_weights,
    .apply = apply,
    .release = release,
    .device_alloc = device_alloc,
    .device_free = device_free,
    .device_copy = device_copy,
    .device_sync = device_sync,
};

static const nibble_plugin_api* entry(uint32_t host_abi_version) {
  return host_abi_version == NIBBLE_ABI_VERSION ? &kApi : NULL;
}

NIBBLE_PLUGIN_EXPORT_ENTRY(entry)
