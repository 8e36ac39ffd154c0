/* nibble plugin ABI.
 *
 * The whole boundary between the nibble core and a backend plugin. It is plain C: a plugin built by
 * another compiler, against another C++ standard library, or in another language must load. Nothing
 * C++ crosses it: no exceptions, no std types, and no memory allocated on one side and freed on the
 * other (every object a plugin creates is released by the same plugin).
 *
 * A plugin is a shared module that exports one symbol, NIBBLE_PLUGIN_ENTRY_NAME, holding a pointer
 * to a function of type nibble_plugin_entry_fn. With Boost.DLL that is
 *
 *     BOOST_DLL_ALIAS(my_entry, nibble_plugin_entry)
 *
 * and without it, the equivalent plain C definition
 *
 *     NIBBLE_EXPORT const void* nibble_plugin_entry = (const void*)&my_entry;
 *
 * The core checks that a file exports this symbol (by reading its symbol table, without loading it)
 * before it ever calls dlopen, so a shared object that is not a nibble plugin never runs any code.
 *
 * Versioning. `abi_version` must equal the host's NIBBLE_ABI_VERSION: a different value is refused
 * with a reason. `struct_size` is sizeof(nibble_plugin_api) as the plugin was compiled: fields are
 * only ever appended within one ABI version, so the host accepts any struct_size >=
 * NIBBLE_PLUGIN_API_V1_SIZE (the size of the first release of this version), reads only the fields
 * that lie inside struct_size, and ignores fields appended by a newer minor revision it does not
 * know. A struct smaller than NIBBLE_PLUGIN_API_V1_SIZE is refused. See docs/writing-a-backend.md.
 *
 * Threads. Every function may be called from several host threads at once, except that a prepared
 * handle is released only after every call that uses it has returned. `apply` on the same prepared
 * handle from several threads at once must be safe (the host shares prepared weights).
 *
 * Memory. Tensors passed to apply() and the dense baseline live in the plugin's device memory
 * (host memory for a CPU plugin), obtained through device_alloc. Canonical weights passed to
 * process_weights are always in host memory and only borrowed for the duration of the call.
 */
#ifndef NIBBLE_PLUGIN_ABI_H
#define NIBBLE_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define NIBBLE_EXPORT __declspec(dllexport)
#else
#define NIBBLE_EXPORT __attribute__((visibility("default")))
#endif

/** The ABI version this header describes. Changed on any incompatible change. */
#define NIBBLE_ABI_VERSION 1u
/** Name of the exported symbol that points at the entry function. */
#define NIBBLE_PLUGIN_ENTRY_NAME "nibble_plugin_entry"

/** Status codes returned by every fallible plugin function. */
typedef enum nibble_status {
  NIBBLE_OK = 0,
  NIBBLE_ERR_INVALID_ARGUMENT = 1, /* the caller passed something malformed */
  NIBBLE_ERR_UNSUPPORTED = 2,      /* well-formed, but this plugin cannot do it */
  NIBBLE_ERR_NO_DEVICE = 3,        /* the device or its driver is missing */
  NIBBLE_ERR_OUT_OF_MEMORY = 4,
  NIBBLE_ERR_DEVICE = 5,           /* a driver / runtime call failed */
  NIBBLE_ERR_INTERNAL = 6
} nibble_status;

/** Element types. Values are stable; 0 is deliberately invalid. */
typedef enum nibble_dtype {
  NIBBLE_DTYPE_INVALID = 0,
  NIBBLE_DTYPE_F16 = 1,
  NIBBLE_DTYPE_BF16 = 2,
  NIBBLE_DTYPE_F32 = 3,
  NIBBLE_DTYPE_F64 = 4,
  NIBBLE_DTYPE_I8 = 5,
  NIBBLE_DTYPE_U8 = 6,
  NIBBLE_DTYPE_I16 = 7,
  NIBBLE_DTYPE_U16 = 8,
  NIBBLE_DTYPE_I32 = 9,
  NIBBLE_DTYPE_U32 = 10,
  NIBBLE_DTYPE_I64 = 11,
  NIBBLE_DTYPE_U64 = 12,
  NIBBLE_DTYPE_BOOL = 13
} nibble_dtype;
#define NIBBLE_DTYPE_BIT(d) (1u << (unsigned)(d))

/** Weight types, named as vLLM's scalar types are: uint{b} has a per-group zero point,
 *  w = s * (q - z); uint{b}b{2^(b-1)} is symmetric, stored code = value + 2^(b-1), w = s * (q - 2^(b-1)),
 *  no zero points. The type fixes the bit width (nibble_weight_type_bits), which the spec repeats. */
typedef enum nibble_weight_type {
  NIBBLE_WT_INVALID = 0,
  NIBBLE_WT_UINT4 = 1,
  NIBBLE_WT_UINT4B8 = 2,
  /* appended in revision 1.2 */
  NIBBLE_WT_UINT8 = 3,
  NIBBLE_WT_UINT8B128 = 4,
  NIBBLE_WT_UINT2 = 5,
  NIBBLE_WT_UINT2B2 = 6,
  NIBBLE_WT_UINT3 = 7,
  NIBBLE_WT_UINT3B4 = 8
} nibble_weight_type;
#define NIBBLE_WT_BIT(t) (1u << (unsigned)(t))

/** Bit width of a weight type (2, 3, 4 or 8), or 0 for an invalid one. */
static inline int32_t nibble_weight_type_bits(int32_t t) {
  switch (t) {
    case NIBBLE_WT_UINT2: case NIBBLE_WT_UINT2B2: return 2;
    case NIBBLE_WT_UINT3: case NIBBLE_WT_UINT3B4: return 3;
    case NIBBLE_WT_UINT4: case NIBBLE_WT_UINT4B8: return 4;
    case NIBBLE_WT_UINT8: case NIBBLE_WT_UINT8B128: return 8;
    default: return 0;
  }
}
/** 1 for the symmetric types (no zero points; the zero is 2^(bits-1)). */
static inline int32_t nibble_weight_type_symmetric(int32_t t) {
  return t == NIBBLE_WT_UINT2B2 || t == NIBBLE_WT_UINT3B4 || t == NIBBLE_WT_UINT4B8 || t == NIBBLE_WT_UINT8B128;
}
/** The weight type of `bits` (2, 3, 4, 8) codes, symmetric or with zero points; NIBBLE_WT_INVALID otherwise. */
static inline int32_t nibble_weight_type_of(int32_t bits, int32_t symmetric) {
  switch (bits) {
    case 2: return symmetric ? NIBBLE_WT_UINT2B2 : NIBBLE_WT_UINT2;
    case 3: return symmetric ? NIBBLE_WT_UINT3B4 : NIBBLE_WT_UINT3;
    case 4: return symmetric ? NIBBLE_WT_UINT4B8 : NIBBLE_WT_UINT4;
    case 8: return symmetric ? NIBBLE_WT_UINT8B128 : NIBBLE_WT_UINT8;
    default: return NIBBLE_WT_INVALID;
  }
}

/** The checkpoint format a layer came from. Informative: the canonical form hides it. */
typedef enum nibble_format {
  NIBBLE_FORMAT_UNKNOWN = 0, /* made in memory (tests, benchmarks) */
  NIBBLE_FORMAT_GPTQ = 1,
  NIBBLE_FORMAT_GPTQ_V2 = 2,
  NIBBLE_FORMAT_AWQ = 3,
  NIBBLE_FORMAT_COMPRESSED_TENSORS = 4,
  NIBBLE_FORMAT_AUTOROUND = 5
} nibble_format;
#define NIBBLE_FORMAT_BIT(f) (1u << (unsigned)(f))
#define NIBBLE_FORMATS_ALL 0xffffffffu

/** Tensor-parallel role of a partition. */
typedef enum nibble_parallel {
  NIBBLE_PARALLEL_NONE = 0,
  NIBBLE_PARALLEL_COLUMN = 1, /* this rank holds N_part of full_N output features */
  NIBBLE_PARALLEL_ROW = 2     /* this rank holds K_part of full_K input features */
} nibble_parallel;

/** Direction of device_copy. */
typedef enum nibble_copy_kind {
  NIBBLE_COPY_HOST_TO_DEVICE = 1,
  NIBBLE_COPY_DEVICE_TO_HOST = 2,
  NIBBLE_COPY_DEVICE_TO_DEVICE = 3
} nibble_copy_kind;

/** What a plugin decides on: one linear layer Y[M,N] = X[M,K] * dequant(W)[K,N] (+ bias). */
typedef struct nibble_linear_spec {
  uint32_t struct_size;     /* sizeof(nibble_linear_spec) as the host built it */
  const char* layer_name;   /* e.g. "model.layers.0.mlp.down_proj"; never NULL, may be "" */
  int64_t k;                /* input features of this partition (the kernel's K) */
  int64_t n;                /* output features of this partition (the kernel's N) */
  int64_t full_k;           /* input features before tensor-parallel slicing */
  int64_t full_n;           /* output features before tensor-parallel slicing */
  int32_t parallel;         /* nibble_parallel */
  int32_t bits;             /* weight bits: 2, 3, 4 or 8, as weight_type says */
  int32_t group_size;       /* G along K; -1 = one group spanning all of K (per channel) */
  int32_t weight_type;      /* nibble_weight_type */
  int32_t act_dtype;        /* dtype of X, Y and bias */
  int32_t scale_dtype;      /* dtype of the canonical scales (F16, BF16 or F32) */
  int32_t act_order;        /* 1 if a g_idx permutation is present */
  int32_t has_bias;         /* 1 if a bias [N] is present */
  int32_t format;           /* nibble_format the layer came from (informative) */
} nibble_linear_spec;

/** A dense row-major tensor. `data` is device memory of the plugin it is passed to. */
typedef struct nibble_tensor {
  void* data;
  int32_t dtype;    /* nibble_dtype */
  int32_t ndim;     /* 1..4 */
  int64_t shape[4]; /* outermost first; unused entries are 0 */
} nibble_tensor;

/** Number of groups along K of a (partition) spec: 1 for per-channel (group_size -1); for a
 *  row-parallel act-order partition every group of the full layer is kept (its rows may fall in
 *  any of them), ceil(full_k / group_size); otherwise ceil(k / group_size). */
static inline int64_t nibble_spec_num_groups(const nibble_linear_spec* s) {
  if (s->group_size <= 0) return 1;
  const int64_t k = (s->act_order && s->parallel == NIBBLE_PARALLEL_ROW && s->full_k > 0) ? s->full_k : s->k;
  return (k + s->group_size - 1) / s->group_size;
}

/** The canonical weight form, in host memory, borrowed for the duration of process_weights.
 *  Let groups = nibble_spec_num_groups(spec) and b = spec->bits.
 *  - qweight  uint32 [ceil(k*b/32), n]: packed along K. Each column n is a little-endian bit
 *             stream down its words (word r of the column holds stream bits 32r..32r+31): the code
 *             of row k occupies stream bits b*k .. b*k+b-1. For b = 2, 4, 8 a word holds 32/b whole
 *             codes (at 4 bits: nibble j of word r is k = 8r+j, GPTQ's packing); for b = 3 every 3
 *             words hold 32 codes and codes 10 and 21 of each 32 straddle two words (GPTQ's 3-bit
 *             packing). Stream bits past k*b are zero.
 *  - zeros    uint8  [groups, n]: the true zero point (0..2^b-1) of each group, or NULL for the
 *             symmetric types (whose zero is the constant 2^(b-1)).
 *  - scales   [groups, n] in spec->scale_dtype.
 *  - g_idx    int32  [k]: group of each input row, present only for act order (NULL otherwise,
 *             where the group of row k is k / group_size).
 *  - bias     [n] in spec->act_dtype, or NULL.
 *  Dequantization: w[k,n] = scales[g,n] * (code(k,n) - zero(g,n)), g = g_idx ? g_idx[k] : k / G. */
typedef struct nibble_canonical_weights {
  const uint32_t* qweight;
  const uint8_t* zeros;
  const void* scales;
  const int32_t* g_idx;
  const void* bias;
} nibble_canonical_weights;

#define NIBBLE_MAX_GROUP_SIZES 8

/** What a plugin supports, as data: readable without touching a device. */
typedef struct nibble_capabilities {
  uint32_t formats;         /* NIBBLE_FORMAT_BIT mask of accepted source formats, or NIBBLE_FORMATS_ALL */
  uint32_t weight_types;    /* NIBBLE_WT_BIT mask */
  uint32_t bits;            /* mask of bit widths: (1u << b) for each b in {2, 3, 4, 8} it runs */
  uint32_t act_dtypes;      /* NIBBLE_DTYPE_BIT mask of activation dtypes */
  int32_t group_sizes[NIBBLE_MAX_GROUP_SIZES]; /* supported G values; -1 = per channel */
  uint32_t num_group_sizes; /* entries used in group_sizes */
  uint32_t act_order;       /* 1 if g_idx (act order) is supported */
  uint32_t bias;            /* 1 if a bias is supported */
  uint32_t k_multiple;      /* K of a partition must be a multiple of this (1 = any) */
  uint32_t n_multiple;      /* N of a partition must be a multiple of this (1 = any) */
  uint32_t min_device_level;/* e.g. 80 for CUDA sm_80; 0 where meaningless */
} nibble_capabilities;

/** Opaque handle to weights prepared by a plugin (owned by that plugin). */
typedef struct nibble_prepared nibble_prepared;
/** Opaque handle to a dense baseline weight (owned by that plugin). */
typedef struct nibble_dense nibble_dense;

/** The plugin's description and entry points. Every `char* msg, size_t msg_cap` pair is a buffer the
 *  host provides: on failure the plugin writes a NUL-terminated message that names what was
 *  expected and what was found (truncated to msg_cap - 1 bytes). */
typedef struct nibble_plugin_api {
  /* ---- header: never moves ---- */
  uint32_t abi_version; /* NIBBLE_ABI_VERSION the plugin was built against */
  uint32_t struct_size; /* sizeof(nibble_plugin_api) as the plugin was built */

  /* ---- identity ---- */
  const char* name;        /* unique backend name, [a-z0-9_]+, e.g. "cpu_w4a16" */
  const char* version;     /* the plugin's own version, e.g. "0.1.0" */
  const char* platform;    /* "cpu", "cuda", "rocm", ... */
  const char* description; /* one line for people */
  int32_t priority;        /* higher is tried first when the policy does not say otherwise */
  nibble_capabilities caps;

  /* ---- decision ---- */
  /** Is the device there? NIBBLE_OK and a short device description in msg, or
   *  NIBBLE_ERR_NO_DEVICE and why ("no CUDA driver", "no AMD GPU", ...). Must not crash without a
   *  device or driver. */
  int32_t (*probe)(char* msg, size_t msg_cap);
  /** Can this plugin run `spec`? NIBBLE_OK, or NIBBLE_ERR_UNSUPPORTED with the reason. Pure: no
   *  device work. */
  int32_t (*can_implement)(const nibble_linear_spec* spec, char* msg, size_t msg_cap);

  /* ---- weights and matmul ---- */
  /** Turn canonical weights (host memory) into the plugin's layout on its device. On success *out is
   *  a non-NULL handle that the host later passes to release(). */
  int32_t (*process_weights)(const nibble_linear_spec* spec, const nibble_canonical_weights* w,
                             void* stream, nibble_prepared** out, char* msg, size_t msg_cap);
  /** y[M,N] = x[M,K] * W (+ bias). x and y are 2-D tensors of spec.act_dtype in device memory;
   *  M is x->shape[0] and may be anything >= 1. Asynchronous on `stream` where the device has
   *  streams (NULL = the default stream); the host calls device_sync before reading y. */
  int32_t (*apply)(const nibble_prepared* w, const nibble_tensor* x, nibble_tensor* y, void* stream,
                   char* msg, size_t msg_cap);
  /** Free a prepared handle. NULL is ignored. */
  void (*release)(nibble_prepared* w);

  /* ---- device memory, so that a host can drive any backend without linking its runtime ---- */
  int32_t (*device_alloc)(size_t bytes, void** ptr, char* msg, size_t msg_cap);
  void (*device_free)(void* ptr);
  int32_t (*device_copy)(void* dst, const void* src, size_t bytes, int32_t kind /* nibble_copy_kind */,
                         void* stream, char* msg, size_t msg_cap);
  int32_t (*device_sync)(void* stream, char* msg, size_t msg_cap);

  /* ---- optional (NULL when absent) ---- */
  /** Set a named option, e.g. "num_threads" = "2". NIBBLE_ERR_UNSUPPORTED for unknown keys. */
  int32_t (*set_option)(const char* key, const char* value, char* msg, size_t msg_cap);
  /** Dense baseline for benchmarks: weight_kn is host memory [K,N] in spec->act_dtype. */
  int32_t (*dense_prepare)(const nibble_linear_spec* spec, const void* weight_kn, void* stream,
                           nibble_dense** out, char* msg, size_t msg_cap);
  int32_t (*dense_apply)(const nibble_dense* w, const nibble_tensor* x, nibble_tensor* y,
                         void* stream, char* msg, size_t msg_cap);
  void (*dense_release)(nibble_dense* w);
  /** Device timing for benchmarks: elapsed milliseconds of `iters` calls of fn(ctx, i) issued on
   *  `stream`, measured with device events. NULL on plugins whose host clock is exact (CPU). */
  int32_t (*time_device)(void (*fn)(void* ctx, int32_t i), void* ctx, int32_t iters, void* stream,
                         double* ms, char* msg, size_t msg_cap);
  /** Name of the kernel variant apply() would pick for this M on this prepared weight (for
   *  benchmarks and traces), written into msg. May be NULL. */
  int32_t (*describe_kernel)(const nibble_prepared* w, int64_t m, char* msg, size_t msg_cap);

  /* ---- appended in revision 1.1 (read only when struct_size covers them; may be NULL) ---- */
  /** Memory bandwidth the device sustains, as the plugin's fastest streaming code achieves it over
   *  a buffer of `bytes`, in bytes per second: the "BW" of the roofline. CPU plugins report read
   *  bandwidth; GPU plugins a device-to-device copy counting bytes read plus bytes written. */
  int32_t (*measure_bandwidth)(size_t bytes, void* stream, double* bytes_per_second, char* msg, size_t msg_cap);
} nibble_plugin_api;

/** True if plugin struct `api` (of api->struct_size bytes) has field `field` (a revision check). */
#define NIBBLE_API_HAS(api, field) \
  ((api)->struct_size >= offsetof(nibble_plugin_api, field) + sizeof((api)->field) && (api)->field != NULL)

/** Exports `fn` (a nibble_plugin_entry_fn) as the plugin entry without Boost: the same symbol
 *  BOOST_DLL_ALIAS(fn, nibble_plugin_entry) defines. Use once, at file scope. */
#ifdef __cplusplus
#define NIBBLE_PLUGIN_EXPORT_ENTRY(fn) \
  extern "C" NIBBLE_EXPORT const void* const nibble_plugin_entry = reinterpret_cast<const void*>(&(fn));
#else
#define NIBBLE_PLUGIN_EXPORT_ENTRY(fn) NIBBLE_EXPORT const void* const nibble_plugin_entry = (const void*)&(fn);
#endif

/** Size of the first release of ABI version 1; a smaller struct_size is refused. */
#define NIBBLE_PLUGIN_API_V1_SIZE (offsetof(nibble_plugin_api, describe_kernel) + sizeof(void*))

/** The entry function. `host_abi_version` is the host's NIBBLE_ABI_VERSION; a plugin may return
 *  NULL if it cannot serve that host (the host then records "entry returned NULL"). The returned
 *  struct is static and lives as long as the library is loaded. */
typedef const nibble_plugin_api* (*nibble_plugin_entry_fn)(uint32_t host_abi_version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NIBBLE_PLUGIN_ABI_H */
