/* nibble host C API: the one stable surface for hosts in any language (Python, Rust, Go, C).
 *
 * It covers what an inference engine needs: open a checkpoint and list its layers and their
 * specs, discover backends, select one for a layer under a policy and read back every candidate's
 * verdict, prepare a layer on the backend's device, apply it to DLPack tensors on the caller's
 * stream, and free everything. Plain C; nothing C++ crosses it (the library catches every
 * exception). It is implemented in libnibble, over the C++ host API (nibble/registry.h).
 *
 * Errors. Every call that can fail returns a nibble_host_error*: NULL on success, else an object
 * holding a status (nibble_host_status), a message that names the layer, the tensor, what was
 * expected and what was found, and, where no backend could take a layer, the whole selection
 * trace. The caller frees it with nibble_host_error_free. Out-parameters are written only on
 * success.
 *
 * Versioning. NIBBLE_HOST_API_VERSION changes on any incompatible change; a host compares it with
 * nibble_host_api_version() at run time. Within one version, functions and enum values are only
 * appended, and every struct that crosses the boundary starts with `struct_size`, which the
 * caller sets to sizeof(the struct) as it was compiled: the library reads and writes only the
 * fields inside it (a caller built against an older header gets the fields it knows; one built
 * against a newer header gets its new fields left as they were, and struct_size set to what the
 * library wrote). Layer specs are the plugin ABI's nibble_linear_spec, so new weight types or bit
 * widths there need no change here.
 *
 * Handles and lifetimes. Handles are opaque and freed by their own *_free function (NULL is
 * ignored). Strings returned as `const char*` belong to the handle they came from and live as
 * long as it does. A prepared layer (nibble_host_linear) keeps its backend's plugin loaded and
 * owns its weights: it outlives the registry and the checkpoint it came from, which may be freed
 * in any order. A selection outlives its registry too.
 *
 * Threads. Every function may be called from several threads at once; a handle may be freed only
 * once no call that uses it is running. nibble_host_linear_apply on one prepared layer from
 * several threads at once is safe.
 *
 * Tensors. apply takes DLPack tensors (dlpack/dlpack.h, DLPack >= 0.6): x [M, K] and y [M, N] of
 * the layer's activation dtype, on the device the layer was prepared on (kDLCPU for CPU backends,
 * kDLCUDA / kDLROCM with the prepared device_id for GPU backends), compact row-major (strides
 * NULL or [K, 1] / [N, 1]; the stride of a dimension of size 1 is not looked at), aligned to the
 * element size, not overlapping. Anything else is NIBBLE_HOST_ERR_INVALID_ARGUMENT with a message
 * naming the layer, the tensor, the expected and the found value: nibble never copies a tensor to
 * make it fit. M = 0 does nothing.
 */
#ifndef NIBBLE_C_H
#define NIBBLE_C_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#include "nibble/plugin_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The version of this API the header describes. */
#define NIBBLE_HOST_API_VERSION 1u

/** Status of a failed call: nibble::Errc + 1 (0 is success). Values are stable; append-only. */
typedef enum nibble_host_status {
  NIBBLE_HOST_OK = 0,
  NIBBLE_HOST_ERR_INVALID_ARGUMENT = 1,   /* the caller passed something malformed */
  NIBBLE_HOST_ERR_FORMAT = 2,             /* a checkpoint, config or policy file is malformed */
  NIBBLE_HOST_ERR_UNSUPPORTED = 3,        /* well-formed, but not something nibble runs */
  NIBBLE_HOST_ERR_NOT_FOUND = 4,          /* a file, tensor, layer or backend does not exist */
  NIBBLE_HOST_ERR_IO = 5,                 /* the operating system refused */
  NIBBLE_HOST_ERR_PLUGIN = 6,             /* a plugin failed or misbehaved */
  NIBBLE_HOST_ERR_NO_BACKEND = 7,         /* no backend could take the layer (see the trace) */
  NIBBLE_HOST_ERR_DEVICE = 8,             /* a device call failed */
  NIBBLE_HOST_ERR_LIMIT = 9,              /* an input exceeds a safety limit */
  NIBBLE_HOST_ERR_PLUGIN_UNSUPPORTED = 10, /* the backend declined: it cannot do this */
  NIBBLE_HOST_ERR_NO_DEVICE = 11,         /* the backend's device or driver is missing */
  NIBBLE_HOST_ERR_OUT_OF_MEMORY = 12,     /* host or device memory ran out */
  NIBBLE_HOST_ERR_INTERNAL = 13           /* a bug in nibble: please report it */
} nibble_host_status;

/** How a checkpoint stores a linear layer. */
typedef enum nibble_host_layer_status {
  NIBBLE_HOST_LAYER_QUANTIZED = 0,   /* a quantized layer nibble reads: it has a spec */
  NIBBLE_HOST_LAYER_UNQUANTIZED = 1, /* a 16-bit weight (the reason names the config key) */
  NIBBLE_HOST_LAYER_UNSUPPORTED = 2  /* quantized in a way nibble does not run (the reason says how) */
} nibble_host_layer_status;

/** One candidate's verdict in a selection (the values of nibble::Verdict). */
typedef enum nibble_host_verdict {
  NIBBLE_HOST_VERDICT_SELECTED = 0,
  NIBBLE_HOST_VERDICT_VIABLE = 1,           /* could run it, but another candidate came first */
  NIBBLE_HOST_VERDICT_DENIED = 2,           /* denied by the policy */
  NIBBLE_HOST_VERDICT_NOT_CONSIDERED = 3,   /* outside a strict pin / prefer list */
  NIBBLE_HOST_VERDICT_NO_DEVICE = 4,        /* its probe() failed */
  NIBBLE_HOST_VERDICT_UNSUPPORTED = 5,      /* outside its declared capabilities */
  NIBBLE_HOST_VERDICT_CANNOT_IMPLEMENT = 6, /* its can_implement() refused */
  NIBBLE_HOST_VERDICT_LOAD_FAILED = 7,      /* the plugin file could not be loaded */
  NIBBLE_HOST_VERDICT_PREPARE_FAILED = 8    /* its process_weights failed (nibble_host_prepare) */
} nibble_host_verdict;

typedef struct nibble_host_error nibble_host_error;
typedef struct nibble_host_policy nibble_host_policy;
typedef struct nibble_host_registry nibble_host_registry;
typedef struct nibble_host_checkpoint nibble_host_checkpoint;
typedef struct nibble_host_selection nibble_host_selection;
typedef struct nibble_host_linear nibble_host_linear;

/* ---- version and errors ------------------------------------------------------------------------ */

/** NIBBLE_HOST_API_VERSION of the library (compare with the header's). */
uint32_t nibble_host_api_version(void);
/** The library's version, e.g. "0.1.0". */
const char* nibble_host_version(void);
/** "ok", "invalid argument", "no backend", ... */
const char* nibble_host_status_name(int32_t status);

/** The status of an error (NIBBLE_HOST_OK for NULL). */
int32_t nibble_host_error_status(const nibble_host_error* error);
/** Its message ("" for NULL). */
const char* nibble_host_error_message(const nibble_host_error* error);
/** The selection trace when no backend could take a layer, else NULL. Owned by the error. */
const nibble_host_selection* nibble_host_error_selection(const nibble_host_error* error);
void nibble_host_error_free(nibble_host_error* error);

/* ---- policy (docs/policy.md) ------------------------------------------------------------------- */

/** A policy without rules: every backend, by priority. */
nibble_host_error* nibble_host_policy_new(nibble_host_policy** out);
/** NIBBLE_CONFIG (a TOML file) if set, then NIBBLE_BACKEND (a strict pin) on top. */
nibble_host_error* nibble_host_policy_from_environment(nibble_host_policy** out);
nibble_host_error* nibble_host_policy_from_file(const char* path, nibble_host_policy** out);
/** TOML text; `origin` names it in messages and traces (NULL: "policy"). */
nibble_host_error* nibble_host_policy_from_toml(const char* text, const char* origin, nibble_host_policy** out);
/** Pins `backend` for every layer on top of the rules; strict != 0: only it runs. */
nibble_host_error* nibble_host_policy_pin(nibble_host_policy* policy, const char* backend, int32_t strict);
void nibble_host_policy_free(nibble_host_policy* policy);

/* ---- registry: the backends found ------------------------------------------------------------- */

typedef struct nibble_host_discovery {
  uint32_t struct_size;     /* sizeof(nibble_host_discovery) */
  const char* const* dirs;  /* absolute directories searched first (may be NULL) */
  size_t num_dirs;
  int32_t use_default_dirs; /* 1: also the install directory of the plugins */
  int32_t use_env;          /* 1: also NIBBLE_PLUGIN_PATH (absolute entries; others are remarks) */
} nibble_host_discovery;

/** Loads every plugin found. options NULL: NIBBLE_PLUGIN_PATH, then the install directory. A bad
 *  plugin never fails the call: it is listed as skipped, with the reason. */
nibble_host_error* nibble_host_registry_discover(const nibble_host_discovery* options, nibble_host_registry** out);
void nibble_host_registry_free(nibble_host_registry* registry);

typedef struct nibble_host_backend_info {
  uint32_t struct_size; /* sizeof(nibble_host_backend_info) */
  const char* name;
  const char* version;
  const char* platform;     /* "cpu", "cuda", "rocm", ... */
  const char* description;
  const char* path;         /* the plugin file */
  const char* capabilities; /* "uint4,uint4b8 G{32,64,128,256,-1} f16,bf16,f32 act_order bias" */
  int32_t priority;
  int32_t available;        /* 1 if its probe() succeeded */
  const char* device;       /* probe(): the device, or why there is none */
  int32_t dlpack_device;    /* the DLDeviceType of its memory; 0 where nibble knows none */
} nibble_host_backend_info;

typedef struct nibble_host_skipped {
  uint32_t struct_size; /* sizeof(nibble_host_skipped) */
  const char* path;
  const char* kind;     /* "not a plugin", "load failed", "refused", "duplicate", "unsafe" */
  const char* reason;
} nibble_host_skipped;

size_t nibble_host_registry_num_backends(const nibble_host_registry* registry);
nibble_host_error* nibble_host_registry_backend(const nibble_host_registry* registry, size_t index,
                                                nibble_host_backend_info* info);
size_t nibble_host_registry_num_skipped(const nibble_host_registry* registry);
nibble_host_error* nibble_host_registry_skipped(const nibble_host_registry* registry, size_t index,
                                                nibble_host_skipped* info);
/** Why a backend may be missing: ignored NIBBLE_PLUGIN_PATH entries, unsafe directories, and the
 *  search path where nothing was found. Also notes of every selection. */
size_t nibble_host_registry_num_remarks(const nibble_host_registry* registry);
const char* nibble_host_registry_remark(const nibble_host_registry* registry, size_t index);

/* ---- checkpoint: a model directory ------------------------------------------------------------ */

typedef struct nibble_host_layer_info {
  uint32_t struct_size; /* sizeof(nibble_host_layer_info) */
  const char* name;     /* e.g. "model.layers.0.mlp.down_proj" */
  int32_t status;       /* nibble_host_layer_status */
  const char* reason;   /* why unquantized or unsupported; "" for a quantized layer */
  int64_t k;            /* in_features */
  int64_t n;            /* out_features */
  /* How the config says it is quantized (quantized and unsupported layers; 0 and "" for unquantized): */
  int32_t bits;
  int32_t group_size;   /* -1 = per channel */
  int32_t symmetric;
  int32_t act_order;
  int32_t format;       /* nibble_format */
  const char* packing;  /* the on-disk layout, e.g. "gptq (v1 zeros)" */
} nibble_host_layer_info;

/** Opens DIR: config.json and model.safetensors (or its sharded index). */
nibble_host_error* nibble_host_checkpoint_open(const char* dir, nibble_host_checkpoint** out);
void nibble_host_checkpoint_free(nibble_host_checkpoint* checkpoint);
/** One line on its quantization: "gptq v1, 4-bit, G128, symmetric". */
const char* nibble_host_checkpoint_quantization(const nibble_host_checkpoint* checkpoint);
/** The dtype config.json declares (nibble_dtype; F16 if absent). */
int32_t nibble_host_checkpoint_model_dtype(const nibble_host_checkpoint* checkpoint);
/** Every linear layer, in natural name order. */
size_t nibble_host_checkpoint_num_layers(const nibble_host_checkpoint* checkpoint);
nibble_host_error* nibble_host_checkpoint_layer(const nibble_host_checkpoint* checkpoint, size_t index,
                                                nibble_host_layer_info* info);
/** The index of a layer by name (NIBBLE_HOST_ERR_NOT_FOUND otherwise). */
nibble_host_error* nibble_host_checkpoint_find_layer(const nibble_host_checkpoint* checkpoint, const char* name,
                                                     size_t* index);
/** The spec of a quantized layer from the tensor headers (no weights are read). act_dtype is a
 *  nibble_dtype (F16, BF16, F32), 0 for the model's. spec->struct_size as for every struct here;
 *  spec->layer_name belongs to the checkpoint. */
nibble_host_error* nibble_host_checkpoint_spec(const nibble_host_checkpoint* checkpoint, const char* layer,
                                               int32_t act_dtype, nibble_linear_spec* spec);

/** The spec of rank `rank` of `world` ranks' partition of a quantized layer (parallel: COLUMN or
 *  ROW, as in nibble_host_layer_options), from the tensor headers alone, with every check of the
 *  split: what a host asks before it loads or prepares anything. */
nibble_host_error* nibble_host_checkpoint_shard_spec(const nibble_host_checkpoint* checkpoint, const char* layer,
                                                     int32_t act_dtype, int32_t parallel, int32_t rank, int32_t world,
                                                     nibble_linear_spec* spec);

/** The layer's weight as nibble's reference dequantizes it (w = s * (q - z), computed exactly and
 *  rounded once), written into `weight`: a host tensor (kDLCPU) of float32 [K, N], compact
 *  row-major. No backend is involved: this is the answer the backends are checked against, for a
 *  host that wants to compare with a plain framework. */
nibble_host_error* nibble_host_checkpoint_dequantize(const nibble_host_checkpoint* checkpoint, const char* layer,
                                                     DLTensor* weight);

/* ---- selection -------------------------------------------------------------------------------- */

typedef struct nibble_host_candidate {
  uint32_t struct_size;     /* sizeof(nibble_host_candidate) */
  const char* backend;      /* plugin name, or the file name for a load failure */
  int32_t verdict;          /* nibble_host_verdict */
  const char* verdict_name; /* "selected", "no device", ... */
  const char* reason;
} nibble_host_candidate;

/** How a layer is selected and prepared. Zero-initialized (with struct_size set), or NULL: no
 *  policy rules, the model's dtype, any backend's device, device 0, the default stream. */
typedef struct nibble_host_layer_options {
  uint32_t struct_size;              /* sizeof(nibble_host_layer_options) */
  const nibble_host_policy* policy;  /* NULL: no rules */
  int32_t act_dtype;                 /* nibble_dtype of x and y (F16, BF16, F32); 0: the model's */
  int32_t device_type;               /* DLDeviceType the caller's tensors live on: backends whose memory
                                        is elsewhere are denied (with that reason); 0: any backend */
  int32_t device_id;                 /* GPU backends: the ordinal the weights go to and x, y live on; it
                                        must be the current device during prepare and apply */
  void* stream;                      /* the stream weights are uploaded on (NULL: the default) */
  /* Tensor parallelism (appended; a caller whose struct ends at `stream` gets the whole layer):
     the partition of the layer that rank `rank` of `world` ranks holds (docs/tensor_parallel.md).
     COLUMN slices N: the ranks' y are concatenated along N. ROW slices K: rank r takes columns
     [r K/world, (r+1) K/world) of x and the ranks' y are summed; the bias is on rank 0 only. A
     split that cannot be made (N or K not divisible, a group straddling two ranks) fails with
     NIBBLE_HOST_ERR_UNSUPPORTED naming the layer, the split and the group size. */
  int32_t parallel;                  /* nibble_parallel; NONE (0): the whole layer, rank and world 0 or 0 and 1 */
  int32_t rank;                      /* 0 <= rank < world */
  int32_t world;                     /* ranks sharing the layer */
} nibble_host_layer_options;

/** Chooses a backend for a quantized layer of `checkpoint` (its partition, with options->parallel). Nothing fitting is not an error: the
 *  selection then has no backend and says why. An error for a pin of a backend that does not
 *  exist (the message lists those that do). */
nibble_host_error* nibble_host_select(const nibble_host_registry* registry, const nibble_host_checkpoint* checkpoint,
                                      const char* layer, const nibble_host_layer_options* options,
                                      nibble_host_selection** out);
void nibble_host_selection_free(nibble_host_selection* selection);
const char* nibble_host_selection_layer(const nibble_host_selection* selection);
/** The winner's name, or NULL if no backend can take the layer. */
const char* nibble_host_selection_backend(const nibble_host_selection* selection);
size_t nibble_host_selection_num_candidates(const nibble_host_selection* selection);
nibble_host_error* nibble_host_selection_candidate(const nibble_host_selection* selection, size_t index,
                                                   nibble_host_candidate* candidate);
/** Policy remarks and registry remarks (see nibble_host_registry_remark). */
size_t nibble_host_selection_num_notes(const nibble_host_selection* selection);
const char* nibble_host_selection_note(const nibble_host_selection* selection, size_t index);
/** The whole trace for people, one line per note and per candidate. */
const char* nibble_host_selection_trace(const nibble_host_selection* selection);

/* ---- prepared layers -------------------------------------------------------------------------- */

/** Selects a backend for `layer` (as nibble_host_select) and prepares its weights (only the
 *  partition of options->parallel, rank, world, where set) on the backend's device; where the winner's process_weights fails, the next viable candidate is tried (a strict
 *  policy has none outside its pin / prefer list). Fails with NIBBLE_HOST_ERR_NO_BACKEND and the
 *  whole trace (nibble_host_error_selection) when no candidate could take it. On success *out is
 *  the prepared layer and, if `selection` is not NULL, *selection the trace (freed by the caller). */
nibble_host_error* nibble_host_prepare(const nibble_host_registry* registry, const nibble_host_checkpoint* checkpoint,
                                       const char* layer, const nibble_host_layer_options* options,
                                       nibble_host_linear** out, nibble_host_selection** selection);
void nibble_host_linear_free(nibble_host_linear* linear);
/** The layer's spec (spec->layer_name belongs to the prepared layer). */
nibble_host_error* nibble_host_linear_spec(const nibble_host_linear* linear, nibble_linear_spec* spec);
const char* nibble_host_linear_backend(const nibble_host_linear* linear);
/** Where x and y must live: the backend's DLPack device type and the prepared device id. */
nibble_host_error* nibble_host_linear_device(const nibble_host_linear* linear, DLDevice* device);
/** The kernel the backend would run for M rows, written into buf (NUL-terminated, truncated to
 *  cap - 1); "" if the backend does not say. Returns the length of the whole name. */
size_t nibble_host_linear_kernel(const nibble_host_linear* linear, int64_t m, char* buf, size_t cap);

/** y = x * W (+ bias): x [M, K], y [M, N] (see Tensors above), enqueued on `stream` (a
 *  cudaStream_t / hipStream_t of the caller, NULL for the default stream; ignored on CPUs).
 *  Asynchronous on GPUs: y is ready when the stream has reached this point. */
nibble_host_error* nibble_host_linear_apply(const nibble_host_linear* linear, const DLTensor* x, DLTensor* y,
                                            void* stream);
/** The same on managed tensors, borrowed: nibble never calls their deleters. */
nibble_host_error* nibble_host_linear_apply_managed(const nibble_host_linear* linear, const DLManagedTensor* x,
                                                    DLManagedTensor* y, void* stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NIBBLE_C_H */
