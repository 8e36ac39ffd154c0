/* The C host API from C (compiled as C11): discovery, a real checkpoint's layers and specs,
 * selection traces, preparing with fallback, applying DLPack tensors on two backends against each
 * other, every bad tensor, struct sizes, lifetimes, and freeing everything (the ASan run checks
 * for leaks).
 *
 * Environment: NIBBLE_TEST_PLUGIN_DIRS (the test plugins and cpu_w4a16), NIBBLE_FIXTURES. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nibble/nibble_c.h"

static int failures = 0;

#define CHECK(cond, ...)                             \
  do {                                               \
    if (!(cond)) {                                   \
      ++failures;                                    \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                           \
      printf("\n");                                  \
    }                                                \
  } while (0)

/* A call that must succeed; on failure prints nibble's message and counts a failure. */
static int ok(nibble_host_error* e, const char* what) {
  if (!e) return 1;
  ++failures;
  printf("FAIL: %s: %s (%s)\n", what, nibble_host_error_message(e), nibble_host_status_name(nibble_host_error_status(e)));
  nibble_host_error_free(e);
  return 0;
}

/* A call that must fail with `status` and a message containing every one of `needles` (NULL-ended). */
static void fails(nibble_host_error* e, int32_t status, const char* what, const char* const* needles) {
  if (!e) {
    ++failures;
    printf("FAIL: %s: succeeded, expected %s\n", what, nibble_host_status_name(status));
    return;
  }
  CHECK(nibble_host_error_status(e) == status, "%s: status %s, expected %s (%s)", what,
        nibble_host_status_name(nibble_host_error_status(e)), nibble_host_status_name(status), nibble_host_error_message(e));
  for (const char* const* n = needles; *n; ++n)
    CHECK(strstr(nibble_host_error_message(e), *n) != NULL, "%s: message lacks '%s': %s", what, *n,
          nibble_host_error_message(e));
  nibble_host_error_free(e);
}

static uint16_t f32_to_f16(float f) { /* exact for the values used here (small multiples of 1/8) */
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a == 0) return (uint16_t)sign;
  return (uint16_t)(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
}

static float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    const float v = (float)mant * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  u = sign | ((exp + 112u) << 23) | (mant << 13);
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static DLTensor tensor2d(void* data, int64_t* shape, int64_t* strides, DLDataType dtype) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = 2;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  return t;
}

static nibble_host_linear* prepare_on(nibble_host_registry* reg, nibble_host_checkpoint* ck, const char* layer,
                                      const char* backend) {
  nibble_host_policy* pol = NULL;
  nibble_host_linear* lin = NULL;
  if (!ok(nibble_host_policy_new(&pol), "policy_new")) return NULL;
  ok(nibble_host_policy_pin(pol, backend, 1), "policy_pin");
  nibble_host_layer_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.policy = pol;
  o.device_type = kDLCPU;
  ok(nibble_host_prepare(reg, ck, layer, &o, &lin, NULL), backend);
  nibble_host_policy_free(pol);
  return lin;
}

/* Rank `rank` of `world`'s partition of `layer`, prepared on `backend` (parallel: nibble_parallel). */
static nibble_host_linear* prepare_part(nibble_host_registry* reg, nibble_host_checkpoint* ck,
                                        const char* layer, const char* backend, int32_t parallel,
                                        int32_t rank, int32_t world) {
  nibble_host_policy* pol = NULL;
  nibble_host_linear* lin = NULL;
  if (!ok(nibble_host_policy_new(&pol), "policy_new")) return NULL;
  ok(nibble_host_policy_pin(pol, backend, 1), "policy_pin");
  nibble_host_layer_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.policy = pol;
  o.device_type = kDLCPU;
  o.parallel = parallel;
  o.rank = rank;
  o.world = world;
  ok(nibble_host_prepare(reg, ck, layer, &o, &lin, NULL), "prepare a partition");
  nibble_host_policy_free(pol);
  return lin;
}

/* The layer split over `world` ranks on cpu_w4a16, combined on the host as an engine does (column:
 * y concatenated along N; row: rank r takes x's columns [r K/w, (r+1) K/w) and the y are summed),
 * against the unsplit layer on the same backend. Returns the worst |combined - unsplit| / max |y|. */
static double split_error(nibble_host_registry* reg, nibble_host_checkpoint* ck, const char* layer,
                          int32_t parallel, int32_t world) {
  enum { M = 3, K = 512, N = 256 };
  static uint16_t x[M * K], xs[M * K], y[M * N], part[M * N];
  static double sum[M * N];
  const DLDataType f16 = {kDLFloat, 16, 1};
  for (int i = 0; i < M * K; ++i) x[i] = f32_to_f16((float)((i * 5) % 13 - 6) / 8.0f);
  memset(sum, 0, sizeof sum);
  nibble_host_linear* whole = prepare_on(reg, ck, layer, "cpu_w4a16");
  if (!whole) return INFINITY;
  int64_t sx[2] = {M, K}, sy[2] = {M, N};
  DLTensor tx = tensor2d(x, sx, NULL, f16), ty = tensor2d(y, sy, NULL, f16);
  ok(nibble_host_linear_apply(whole, &tx, &ty, NULL), "apply the whole layer");
  nibble_host_linear_free(whole);
  for (int32_t r = 0; r < world; ++r) {
    nibble_host_linear* lin = prepare_part(reg, ck, layer, "cpu_w4a16", parallel, r, world);
    if (!lin) return INFINITY;
    nibble_linear_spec s;
    s.struct_size = sizeof s;
    ok(nibble_host_linear_spec(lin, &s), "partition spec");
    CHECK(s.parallel == parallel && s.full_k == K && s.full_n == N,
          "partition spec: parallel %d full %lldx%lld", (int)s.parallel, (long long)s.full_k,
          (long long)s.full_n);
    int64_t pk = s.k, pn = s.n;
    for (int m = 0; m < M; ++m)
      for (int64_t k = 0; k < pk; ++k)
        xs[m * pk + k] = parallel == NIBBLE_PARALLEL_ROW ? x[m * K + r * pk + k] : x[m * K + k];
    int64_t px[2] = {M, pk}, py[2] = {M, pn};
    DLTensor tpx = tensor2d(xs, px, NULL, f16), tpy = tensor2d(part, py, NULL, f16);
    ok(nibble_host_linear_apply(lin, &tpx, &tpy, NULL), "apply a partition");
    for (int m = 0; m < M; ++m)
      for (int64_t n = 0; n < pn; ++n)
        sum[m * N + (parallel == NIBBLE_PARALLEL_COLUMN ? r * pn + n : n)] += f16_to_f32(part[m * pn + n]);
    nibble_host_linear_free(lin);
  }
  double max_y = 0, max_err = 0;
  for (int i = 0; i < M * N; ++i) {
    max_y = fmax(max_y, fabs(f16_to_f32(y[i])));
    max_err = fmax(max_err, fabs(sum[i] - f16_to_f32(y[i])));
  }
  return max_y > 0 ? max_err / max_y : INFINITY;
}

int main(void) {
  const char* dirs_env = getenv("NIBBLE_TEST_PLUGIN_DIRS");
  const char* fixtures = getenv("NIBBLE_FIXTURES");
  if (!dirs_env || !fixtures) {
    printf("FAIL: NIBBLE_TEST_PLUGIN_DIRS and NIBBLE_FIXTURES must be set\n");
    return 1;
  }
  CHECK(nibble_host_api_version() == NIBBLE_HOST_API_VERSION, "library speaks version %u", nibble_host_api_version());
  CHECK(strcmp(nibble_host_status_name(NIBBLE_HOST_ERR_NO_DEVICE), "no device") == 0, "%s",
        nibble_host_status_name(NIBBLE_HOST_ERR_NO_DEVICE));

  /* ---- discovery: the directories of NIBBLE_TEST_PLUGIN_DIRS only ---- */
  char dirs_buf[4096];
  const char* dirs[8];
  size_t ndirs = 0;
  snprintf(dirs_buf, sizeof dirs_buf, "%s", dirs_env);
  for (char* tok = strtok(dirs_buf, ":"); tok && ndirs < 8; tok = strtok(NULL, ":")) dirs[ndirs++] = tok;
  nibble_host_discovery d = {sizeof d, dirs, ndirs, 0, 0};
  nibble_host_registry* reg = NULL;
  if (!ok(nibble_host_registry_discover(&d, &reg), "discover")) return 1;
  int have_cpu = 0, have_good_b = 0;
  for (size_t i = 0; i < nibble_host_registry_num_backends(reg); ++i) {
    nibble_host_backend_info bi;
    bi.struct_size = sizeof bi;
    if (!ok(nibble_host_registry_backend(reg, i, &bi), "backend info")) continue;
    CHECK(bi.struct_size == sizeof bi, "struct_size %u", bi.struct_size);
    if (strcmp(bi.name, "cpu_w4a16") == 0) {
      have_cpu = 1;
      CHECK(bi.available && bi.dlpack_device == kDLCPU && strstr(bi.capabilities, "uint4b8"), "cpu_w4a16: %s %d %s",
            bi.device, bi.dlpack_device, bi.capabilities);
    }
    if (strcmp(bi.name, "test_good_b") == 0) have_good_b = 1;
  }
  CHECK(have_cpu && have_good_b, "cpu_w4a16 %d, test_good_b %d", have_cpu, have_good_b);
  int saw_wrong_abi = 0;
  for (size_t i = 0; i < nibble_host_registry_num_skipped(reg); ++i) {
    nibble_host_skipped s;
    s.struct_size = sizeof s;
    if (ok(nibble_host_registry_skipped(reg, i, &s), "skipped") && strstr(s.path, "test_wrong_abi.so"))
      saw_wrong_abi = strcmp(s.kind, "refused") == 0 && strstr(s.reason, "ABI version 99") != NULL;
  }
  CHECK(saw_wrong_abi, "test_wrong_abi.so is listed as refused with its reason");
  {
    nibble_host_backend_info bi;
    bi.struct_size = 8;
    const char* n[] = {"'info'->struct_size is 8, expected at least", NULL};
    fails(nibble_host_registry_backend(reg, 0, &bi), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "short struct", n);
    const char* n2[] = {"index 999 past the", NULL};
    bi.struct_size = sizeof bi;
    fails(nibble_host_registry_backend(reg, 999, &bi), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "index", n2);
  }

  /* ---- a checkpoint packed by AutoGPTQ ---- */
  char model[4096];
  snprintf(model, sizeof model, "%s/gptq_v1_sym_g128", fixtures);
  nibble_host_checkpoint* ck = NULL;
  if (!ok(nibble_host_checkpoint_open(model, &ck), "checkpoint_open")) return 1;
  CHECK(nibble_host_checkpoint_model_dtype(ck) == NIBBLE_DTYPE_F16, "model dtype %d", nibble_host_checkpoint_model_dtype(ck));
  CHECK(strstr(nibble_host_checkpoint_quantization(ck), "4-bit") != NULL, "%s", nibble_host_checkpoint_quantization(ck));
  size_t quantized = 0, unquantized = 0;
  for (size_t i = 0; i < nibble_host_checkpoint_num_layers(ck); ++i) {
    nibble_host_layer_info li;
    li.struct_size = sizeof li;
    if (!ok(nibble_host_checkpoint_layer(ck, i, &li), "layer info")) continue;
    if (li.status == NIBBLE_HOST_LAYER_QUANTIZED) ++quantized;
    if (li.status == NIBBLE_HOST_LAYER_UNQUANTIZED) {
      ++unquantized;
      CHECK(strcmp(li.name, "lm_head") == 0 && strstr(li.reason, "lm_head") != NULL, "%s: %s", li.name, li.reason);
    }
  }
  CHECK(quantized == 2 && unquantized == 1, "%zu quantized, %zu unquantized", quantized, unquantized);
  const char* layer = "model.layers.0.self_attn.q_proj";
  nibble_linear_spec spec;
  spec.struct_size = sizeof spec;
  ok(nibble_host_checkpoint_spec(ck, layer, 0, &spec), "spec");
  CHECK(spec.k == 512 && spec.n == 256 && spec.bits == 4 && spec.group_size == 128 &&
            spec.weight_type == NIBBLE_WT_UINT4B8 && spec.act_dtype == NIBBLE_DTYPE_F16 && spec.format == NIBBLE_FORMAT_GPTQ &&
            strcmp(spec.layer_name, layer) == 0,
        "spec k=%lld n=%lld bits=%d G=%d wt=%d act=%d", (long long)spec.k, (long long)spec.n, spec.bits, spec.group_size,
        spec.weight_type, spec.act_dtype);
  {
    const char* n[] = {"layer 'lm_head' is not quantized", NULL};
    fails(nibble_host_checkpoint_spec(ck, "lm_head", 0, &spec), NIBBLE_HOST_ERR_UNSUPPORTED, "spec of lm_head", n);
    const char* n2[] = {"layer 'nope'", NULL};
    size_t idx = 0;
    fails(nibble_host_checkpoint_find_layer(ck, "nope", &idx), NIBBLE_HOST_ERR_NOT_FOUND, "find nope", n2);
    const char* n3[] = {"act_dtype: expected 0", "found 7", NULL};
    fails(nibble_host_checkpoint_spec(ck, layer, 7, &spec), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "act dtype 7", n3);
    nibble_host_checkpoint* none = NULL;
    const char* n4[] = {"/nonexistent", NULL};
    fails(nibble_host_checkpoint_open("/nonexistent", &none), NIBBLE_HOST_ERR_NOT_FOUND, "open /nonexistent", n4);
  }

  /* ---- selection: the whole trace as data ---- */
  {
    nibble_host_policy* pol = NULL;
    ok(nibble_host_policy_from_toml("prefer = [\"test_good_b\"]\ndeny = [\"cpu_w4a16\"]\n", "inline.toml", &pol), "toml");
    nibble_host_selection* sel = NULL;
    nibble_host_layer_options so = {sizeof so, pol, 0, 0, 0, NULL, NIBBLE_PARALLEL_NONE, 0, 0};
    if (ok(nibble_host_select(reg, ck, layer, &so, &sel), "select")) {
      CHECK(nibble_host_selection_backend(sel) && strcmp(nibble_host_selection_backend(sel), "test_good_b") == 0, "winner %s",
            nibble_host_selection_backend(sel));
      int denied = 0, no_device = 0;
      for (size_t i = 0; i < nibble_host_selection_num_candidates(sel); ++i) {
        nibble_host_candidate c;
        c.struct_size = sizeof c;
        if (!ok(nibble_host_selection_candidate(sel, i, &c), "candidate")) continue;
        if (strcmp(c.backend, "cpu_w4a16") == 0)
          denied = c.verdict == NIBBLE_HOST_VERDICT_DENIED && strstr(c.reason, "inline.toml") != NULL;
        if (strcmp(c.backend, "test_no_device") == 0)
          no_device = c.verdict == NIBBLE_HOST_VERDICT_NO_DEVICE && strcmp(c.reason, "no test device present") == 0;
      }
      CHECK(denied && no_device, "denied %d no_device %d:\n%s", denied, no_device, nibble_host_selection_trace(sel));
      nibble_host_selection_free(sel);
    }
    const char* n[] = {"TOML syntax error", NULL};
    nibble_host_policy* bad = NULL;
    fails(nibble_host_policy_from_toml("prefer = [", "bad.toml", &bad), NIBBLE_HOST_ERR_FORMAT, "bad toml", n);
    ok(nibble_host_policy_pin(pol, "ghost", 1), "pin ghost");
    const char* n2[] = {"backend 'ghost'", "cpu_w4a16", NULL};
    fails(nibble_host_select(reg, ck, layer, &so, &sel), NIBBLE_HOST_ERR_NO_BACKEND, "pin ghost", n2);
    /* Tensors on a CUDA device: the CPU backends are denied for it, and the trace says so. */
    nibble_host_layer_options cuda = {sizeof cuda, NULL, 0, kDLCUDA, 0, NULL, NIBBLE_PARALLEL_NONE, 0, 0};
    if (ok(nibble_host_select(reg, ck, layer, &cuda, &sel), "select for cuda")) {
      nibble_host_candidate c;
      c.struct_size = sizeof c;
      ok(nibble_host_selection_candidate(sel, 0, &c), "candidate 0");
      CHECK(nibble_host_selection_backend(sel) == NULL && c.verdict == NIBBLE_HOST_VERDICT_DENIED &&
                strstr(c.reason, "device type cuda asked for") != NULL,
            "%s", nibble_host_selection_trace(sel));
      nibble_host_selection_free(sel);
    }
    nibble_host_policy_free(pol);
  }

  /* ---- prepare: fallback past a failing process_weights, and no fallback under a strict pin ---- */
  {
    nibble_host_policy* pol = NULL;
    ok(nibble_host_policy_from_toml("prefer = [\"test_process_fails\", \"test_good_b\"]\n", "fallback.toml", &pol), "toml");
    nibble_host_layer_options o = {sizeof o, pol, 0, 0, 0, NULL, NIBBLE_PARALLEL_NONE, 0, 0};
    nibble_host_linear* lin = NULL;
    nibble_host_selection* sel = NULL;
    if (ok(nibble_host_prepare(reg, ck, layer, &o, &lin, &sel), "prepare with fallback")) {
      CHECK(strcmp(nibble_host_linear_backend(lin), "test_good_b") == 0, "%s", nibble_host_linear_backend(lin));
      nibble_host_candidate c;
      c.struct_size = sizeof c;
      ok(nibble_host_selection_candidate(sel, 0, &c), "candidate 0");
      CHECK(strcmp(c.backend, "test_process_fails") == 0 && c.verdict == NIBBLE_HOST_VERDICT_PREPARE_FAILED &&
                strstr(c.reason, "simulated device failure") != NULL,
            "%s %s %s", c.backend, c.verdict_name, c.reason);
      nibble_host_selection_free(sel);
      nibble_host_linear_free(lin);
    }
    ok(nibble_host_policy_pin(pol, "test_process_fails", 1), "strict pin");
    lin = NULL;
    nibble_host_error* e = nibble_host_prepare(reg, ck, layer, &o, &lin, NULL);
    CHECK(e && nibble_host_error_status(e) == NIBBLE_HOST_ERR_NO_BACKEND && lin == NULL, "strict pin: %s",
          nibble_host_error_message(e));
    const nibble_host_selection* trace = nibble_host_error_selection(e);
    CHECK(trace && nibble_host_selection_backend(trace) == NULL, "the error carries the trace");
    if (trace) {
      nibble_host_candidate c;
      c.struct_size = sizeof c;
      ok(nibble_host_selection_candidate(trace, 0, &c), "trace candidate");
      CHECK(c.verdict == NIBBLE_HOST_VERDICT_PREPARE_FAILED && strstr(c.reason, "simulated device failure"), "%s: %s",
            c.verdict_name, c.reason);
    }
    CHECK(strstr(nibble_host_error_message(e), "no backend can run layer 'model.layers.0.self_attn.q_proj'") != NULL, "%s",
          nibble_host_error_message(e));
    nibble_host_error_free(e);
    nibble_host_policy_free(pol);
  }

  /* ---- tensor parallelism: a rank's partition, its spec, and the splits that are refused ---- */
  {
    nibble_linear_spec s;
    s.struct_size = sizeof s;
    if (ok(nibble_host_checkpoint_shard_spec(ck, layer, 0, NIBBLE_PARALLEL_COLUMN, 1, 4, &s),
           "shard_spec column"))
      CHECK(s.parallel == NIBBLE_PARALLEL_COLUMN && s.n == 64 && s.k == 512 && s.full_n == 256 &&
                strcmp(s.layer_name, layer) == 0,
            "column 1 of 4: %lldx%lld of %lld", (long long)s.k, (long long)s.n, (long long)s.full_n);
    if (ok(nibble_host_checkpoint_shard_spec(ck, layer, 0, NIBBLE_PARALLEL_ROW, 3, 4, &s), "shard_spec row"))
      CHECK(s.parallel == NIBBLE_PARALLEL_ROW && s.k == 128 && s.n == 256 && s.full_k == 512,
            "row 3 of 4: %lldx%lld", (long long)s.k, (long long)s.n);
    const char* straddle[] = {layer, "row-parallel split of K 512 over 8 ranks", "group size 128", NULL};
    fails(nibble_host_checkpoint_shard_spec(ck, layer, 0, NIBBLE_PARALLEL_ROW, 0, 8, &s),
          NIBBLE_HOST_ERR_UNSUPPORTED, "row over 8 ranks (K_part 64 < G 128)", straddle);
    const char* uneven[] = {layer, "column-parallel split of N 256 over 3 ranks", "not divisible", NULL};
    fails(nibble_host_checkpoint_shard_spec(ck, layer, 0, NIBBLE_PARALLEL_COLUMN, 2, 3, &s),
          NIBBLE_HOST_ERR_UNSUPPORTED, "column over 3 ranks", uneven);
    const char* bad_rank[] = {"rank 4 of world 4", NULL};
    fails(nibble_host_checkpoint_shard_spec(ck, layer, 0, NIBBLE_PARALLEL_ROW, 4, 4, &s),
          NIBBLE_HOST_ERR_INVALID_ARGUMENT, "rank 4 of 4", bad_rank);
    const char* no_split[] = {"parallel NONE", NULL};
    fails(nibble_host_checkpoint_shard_spec(ck, layer, 0, NIBBLE_PARALLEL_NONE, 0, 1, &s),
          NIBBLE_HOST_ERR_INVALID_ARGUMENT, "shard_spec without a split", no_split);

    /* prepare refuses the same split, before reading weights, with the same reason */
    nibble_host_layer_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.parallel = NIBBLE_PARALLEL_ROW;
    o.rank = 1;
    o.world = 8;
    nibble_host_linear* lin = NULL;
    fails(nibble_host_prepare(reg, ck, layer, &o, &lin, NULL), NIBBLE_HOST_ERR_UNSUPPORTED,
          "prepare row over 8", straddle);
    CHECK(lin == NULL, "no layer for a refused split");
    o.parallel = NIBBLE_PARALLEL_NONE;
    o.world = 2;
    const char* none_world[] = {"parallel NONE", NULL};
    fails(nibble_host_prepare(reg, ck, layer, &o, &lin, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT,
          "world 2 without a split", none_world);
    /* a caller built before the split fields: the whole layer */
    o.struct_size = (uint32_t)offsetof(nibble_host_layer_options, parallel);
    if (ok(nibble_host_prepare(reg, ck, layer, &o, &lin, NULL), "options of the first release")) {
      ok(nibble_host_linear_spec(lin, &s), "spec");
      CHECK(s.parallel == NIBBLE_PARALLEL_NONE && s.n == 256, "whole layer: parallel %d, N %lld",
            (int)s.parallel, (long long)s.n);
      nibble_host_linear_free(lin);
    }
    /* the selection of a partition decides on the partition's spec */
    o.struct_size = sizeof o;
    o.parallel = NIBBLE_PARALLEL_COLUMN;
    o.rank = 0;
    o.world = 2;
    nibble_host_selection* sel = NULL;
    if (ok(nibble_host_select(reg, ck, layer, &o, &sel), "select a partition")) {
      CHECK(nibble_host_selection_backend(sel) != NULL, "a backend for the partition: %s",
            nibble_host_selection_trace(sel));
      nibble_host_selection_free(sel);
    }
    for (int32_t world = 2; world <= 4; world += 2) {
      const double col = split_error(reg, ck, layer, NIBBLE_PARALLEL_COLUMN, world);
      const double row = split_error(reg, ck, layer, NIBBLE_PARALLEL_ROW, world);
      /* column: the same products per output; row: each rank's y rounded to f16 once before the sum */
      CHECK(col <= 1e-3, "column over %d ranks: worst error %g of max |y|", world, col);
      CHECK(row <= 4e-3, "row over %d ranks: worst error %g of max |y|", world, row);
    }
  }

  /* ---- apply on cpu_w4a16 against test_good_b (double accumulation), after freeing registry and
   *      checkpoint: the prepared layers keep what they need ---- */
  /* ---- the reference dequantization: x * W in double matches the double-accumulation backend ---- */
  enum { M = 3, K = 512, N = 256 };
  static uint16_t x[M * K], y_cpu[M * N], y_ref[M * N], big[(M + 1) * K * 2];
  static float w_kn[K * N];
  for (int i = 0; i < M * K; ++i) x[i] = f32_to_f16((float)((i * 7) % 17 - 8) / 8.0f);
  const DLDataType f16 = {kDLFloat, 16, 1}, f32 = {kDLFloat, 32, 1};
  {
    int64_t ws[2] = {K, N};
    DLTensor tw = tensor2d(w_kn, ws, NULL, f32);
    ok(nibble_host_checkpoint_dequantize(ck, layer, &tw), "dequantize");
    int64_t wrong[2] = {N, K};
    const char* n[] = {"layer 'model.layers.0.self_attn.q_proj': tensor 'weight': expected shape [512, 256], found [256, 512]", NULL};
    tw = tensor2d(w_kn, wrong, NULL, f32);
    fails(nibble_host_checkpoint_dequantize(ck, layer, &tw), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "dequantize [N, K]", n);
  }

  nibble_host_linear* cpu = prepare_on(reg, ck, layer, "cpu_w4a16");
  nibble_host_linear* ref = prepare_on(reg, ck, layer, "test_good_b");
  nibble_host_registry_free(reg);
  nibble_host_checkpoint_free(ck);
  if (!cpu || !ref) return 1;
  {
    DLDevice dev;
    ok(nibble_host_linear_device(cpu, &dev), "device");
    CHECK(dev.device_type == kDLCPU && dev.device_id == 0, "device %d:%d", (int)dev.device_type, dev.device_id);
    char kernel[128];
    nibble_host_linear_kernel(cpu, 3, kernel, sizeof kernel);
    CHECK(kernel[0] != '\0', "cpu_w4a16 names its kernel");
    nibble_linear_spec s2;
    s2.struct_size = sizeof s2;
    ok(nibble_host_linear_spec(cpu, &s2), "linear spec");
    CHECK(strcmp(s2.layer_name, layer) == 0 && s2.k == 512, "%s", s2.layer_name);
  }
  int64_t xs[2] = {M, K}, ys[2] = {M, N};
  DLTensor tx = tensor2d(x, xs, NULL, f16), ty = tensor2d(y_cpu, ys, NULL, f16), tr = tensor2d(y_ref, ys, NULL, f16);
  ok(nibble_host_linear_apply(cpu, &tx, &ty, NULL), "apply cpu");
  ok(nibble_host_linear_apply(ref, &tx, &tr, NULL), "apply ref");
  double max_ref = 0, max_err = 0;
  for (int i = 0; i < M * N; ++i) {
    const double a = f16_to_f32(y_cpu[i]), b = f16_to_f32(y_ref[i]);
    max_ref = fmax(max_ref, fabs(b));
    max_err = fmax(max_err, fabs(a - b));
  }
  CHECK(max_ref > 0 && max_err <= 4e-3 * max_ref, "cpu_w4a16 vs the double reference: max err %g of max |y| %g", max_err,
        max_ref);
  double deq_err = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += (double)f16_to_f32(x[m * K + k]) * (double)w_kn[k * N + n];
      deq_err = fmax(deq_err, fabs(acc - f16_to_f32(y_ref[m * N + n])));
    }
  CHECK(deq_err <= 1e-3 * max_ref, "x * dequantized W vs the reference backend: max err %g", deq_err);
  {
    /* managed tensors, borrowed */
    DLManagedTensor mx = {tx, NULL, NULL}, my = {ty, NULL, NULL};
    ok(nibble_host_linear_apply_managed(cpu, &mx, &my, NULL), "apply managed");
    int64_t zs[2] = {0, K}, zy[2] = {0, N};
    DLTensor zx = tensor2d(NULL, zs, NULL, f16), zyt = tensor2d(NULL, zy, NULL, f16);
    ok(nibble_host_linear_apply(cpu, &zx, &zyt, NULL), "M = 0 does nothing");
  }

  /* ---- every bad tensor: an error naming the layer, the tensor, the expected and the found ---- */
  {
    const DLDataType bf16 = {kDLBfloat, 16, 1};
    DLTensor t;
    const char* n1[] = {"layer 'model.layers.0.self_attn.q_proj': tensor 'x': expected dtype float16", "found float32", NULL};
    t = tensor2d(x, xs, NULL, f32);
    fails(nibble_host_linear_apply(cpu, &t, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "x f32", n1);
    const char* n2[] = {"tensor 'y': expected dtype float16", "found bfloat16", NULL};
    t = tensor2d(y_cpu, ys, NULL, bf16);
    fails(nibble_host_linear_apply(cpu, &tx, &t, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "y bf16", n2);
    const char* n3[] = {"tensor 'x': expected device cpu", "found cuda:0", NULL};
    t = tensor2d(x, xs, NULL, f16);
    t.device.device_type = kDLCUDA;
    fails(nibble_host_linear_apply(cpu, &t, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "x on cuda", n3);
    int64_t bad_k[2] = {M, K - 1};
    const char* n4[] = {"tensor 'x': expected shape [M, 512], found [3, 511]", NULL};
    t = tensor2d(x, bad_k, NULL, f16);
    fails(nibble_host_linear_apply(cpu, &t, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "x K", n4);
    int64_t bad_m[2] = {M - 1, N};
    const char* n5[] = {"tensor 'y': expected shape [3, 256] (M of x), found [2, 256]", NULL};
    t = tensor2d(y_cpu, bad_m, NULL, f16);
    fails(nibble_host_linear_apply(cpu, &tx, &t, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "y M", n5);
    int64_t shape_t[2] = {M, K}, strides_t[2] = {1, M}; /* a transposed [K, M] buffer: column-major */
    const char* n6[] = {"tensor 'x': expected a contiguous row-major tensor (strides [512, 1]), found strides [1, 3]",
                        "never copies", NULL};
    t = tensor2d(x, shape_t, strides_t, f16);
    fails(nibble_host_linear_apply(cpu, &t, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "x strided", n6);
    int64_t padded[2] = {K + 8, 1};
    const char* n7[] = {"found strides [520, 1]", NULL};
    t = tensor2d(x, shape_t, padded, f16);
    fails(nibble_host_linear_apply(cpu, &t, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "x padded rows", n7);
    int64_t one[2] = {1, K}, any_stride[2] = {12345, 1}; /* the stride of a size-1 dimension does not matter */
    int64_t one_y[2] = {1, N};
    t = tensor2d(x, one, any_stride, f16);
    DLTensor t1 = tensor2d(y_cpu, one_y, NULL, f16);
    ok(nibble_host_linear_apply(cpu, &t, &t1, NULL), "M = 1 with any row stride");
    const char* n8[] = {"tensor 'x': expected 2 dimensions [M, 512], found 3 dimension(s) [1, 3, 512]", NULL};
    int64_t three[3] = {1, M, K};
    t = tensor2d(x, three, NULL, f16);
    t.ndim = 3;
    fails(nibble_host_linear_apply(cpu, &t, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "x rank 3", n8);
    const char* n9[] = {"tensor 'x': expected data aligned to 2 bytes", NULL};
    t = tensor2d(x, xs, NULL, f16);
    t.byte_offset = 1;
    fails(nibble_host_linear_apply(cpu, &t, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "x misaligned", n9);
    const char* n10[] = {"tensor 'y' overlaps tensor 'x'", NULL};
    DLTensor ox = tensor2d(big, xs, NULL, f16), oy = tensor2d(big + K, ys, NULL, f16);
    fails(nibble_host_linear_apply(cpu, &ox, &oy, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "overlap", n10);
    const char* n11[] = {"tensor 'y' is NULL", NULL};
    fails(nibble_host_linear_apply(cpu, &tx, NULL, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "y NULL", n11);
    const char* n12[] = {"'linear' is NULL", NULL};
    fails(nibble_host_linear_apply(NULL, &tx, &ty, NULL), NIBBLE_HOST_ERR_INVALID_ARGUMENT, "linear NULL", n12);
  }
  nibble_host_linear_free(cpu);
  nibble_host_linear_free(ref);
  nibble_host_error_free(NULL);
  printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}
