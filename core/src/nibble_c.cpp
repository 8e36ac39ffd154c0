// The C API (nibble_c.h) over the C++ host API: errors, policies, the registry, checkpoints,
// selection and preparing layers. Applying them to DLPack tensors is in nibble_c_tensors.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "nibble/shard.h"
#include "nibble/version.h"
#include "nibble_c_internal.h"

using namespace nibble;
using capi::guarded;
using capi::require;

namespace nibble::capi {

namespace {

// Handed out when even an error object cannot be allocated; nibble_host_error_free ignores it.
nibble_host_error out_of_memory_error{NIBBLE_HOST_ERR_OUT_OF_MEMORY, "out of host memory", nullptr};

static_assert(int(Errc::invalid_argument) + 1 == NIBBLE_HOST_ERR_INVALID_ARGUMENT);
static_assert(int(Errc::internal) + 1 == NIBBLE_HOST_ERR_INTERNAL);
static_assert(int(Verdict::prepare_failed) == NIBBLE_HOST_VERDICT_PREPARE_FAILED);
static_assert(int(LayerScheme::Kind::unsupported) == NIBBLE_HOST_LAYER_UNSUPPORTED);

}  // namespace

nibble_host_error* error_of_current_exception() noexcept {
  try {
    try {
      throw;
    } catch (const NoBackend& e) {
      auto sel = std::make_unique<nibble_host_selection>(nibble_host_selection{e.selection, e.selection.trace()});
      return new nibble_host_error{NIBBLE_HOST_ERR_NO_BACKEND, e.what(), std::move(sel)};
    } catch (const Error& e) {
      return new nibble_host_error{int32_t(e.code()) + 1, e.what(), nullptr};
    } catch (const std::bad_alloc&) {
      return &out_of_memory_error;
    } catch (const std::exception& e) {
      return new nibble_host_error{NIBBLE_HOST_ERR_INTERNAL, e.what(), nullptr};
    } catch (...) {
      return new nibble_host_error{NIBBLE_HOST_ERR_INTERNAL, "unknown exception", nullptr};
    }
  } catch (...) {  // the error object itself could not be made
    return &out_of_memory_error;
  }
}

}  // namespace nibble::capi

namespace {

std::optional<DType> act_dtype_arg(int32_t d, const char* function) {
  if (d == 0) return std::nullopt;
  if (d == NIBBLE_DTYPE_F16 || d == NIBBLE_DTYPE_BF16 || d == NIBBLE_DTYPE_F32) return DType(d);
  throw Error(Errc::invalid_argument,
              fmt::format("{}: act_dtype: expected 0 (the model's), F16 ({}), BF16 ({}) or F32 ({}), found {}", function,
                          int(NIBBLE_DTYPE_F16), int(NIBBLE_DTYPE_BF16), int(NIBBLE_DTYPE_F32), d));
}

// Element `index` of a handle's list, or an error naming the function and the list's length.
template <class V>
const typename V::value_type& at_index(const V& v, std::size_t index, const char* function, const char* what) {
  if (index >= v.size())
    throw Error(Errc::invalid_argument, fmt::format("{}: index {} past the {} {}", function, index, v.size(), what));
  return v[index];
}

const char* str_arg(const char* s, const char* function, const char* argument) {
  return &require(s, function, argument);
}

// The entry of a quantized layer, or an error that says how the layer is stored instead.
const LayerEntry& quantized_layer(const Checkpoint& ck, const char* name, const char* function) {
  const LayerEntry* e = ck.find_layer(str_arg(name, function, "layer"));
  if (!e) throw Error(Errc::not_found, fmt::format("{}: layer '{}' is not a linear layer of {}", function, name, ck.dir().string()));
  if (e->scheme.kind == LayerScheme::Kind::unquantized)
    throw Error(Errc::unsupported, fmt::format("layer '{}' is not quantized: {}", name, e->scheme.reason));
  if (e->scheme.kind == LayerScheme::Kind::unsupported)
    throw Error(Errc::unsupported, fmt::format("layer '{}' is quantized in a way nibble does not run: {}", name, e->scheme.reason));
  return *e;
}

constexpr nibble_host_layer_options kDefaultLayerOptions{
    sizeof(nibble_host_layer_options), nullptr, 0, 0, 0, nullptr, NIBBLE_PARALLEL_NONE, 0, 0};

// The tensor-parallel split asked for: none, or a checked column / row and rank, world.
struct Split {
  Parallel how = Parallel::none;
  int rank = 0, world = 1;
};

Split split_arg(int32_t parallel, int32_t rank, int32_t world, const char* function) {
  if (parallel == NIBBLE_PARALLEL_NONE) {
    if (rank != 0 || world > 1)
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: rank {} of world {} given with parallel NONE: expected COLUMN ({}) "
                              "or ROW ({}) to split the layer, or rank 0 and world 0 or 1",
                              function, rank, world, int(NIBBLE_PARALLEL_COLUMN), int(NIBBLE_PARALLEL_ROW)));
    return {};
  }
  if (parallel != NIBBLE_PARALLEL_COLUMN && parallel != NIBBLE_PARALLEL_ROW)
    throw Error(Errc::invalid_argument,
                fmt::format("{}: parallel: expected NONE (0), COLUMN ({}) or ROW ({}), found {}", function,
                            int(NIBBLE_PARALLEL_COLUMN), int(NIBBLE_PARALLEL_ROW), parallel));
  if (world < 1 || rank < 0 || rank >= world)
    throw Error(Errc::invalid_argument,
                fmt::format("{}: rank {} of world {}: expected 0 <= rank < world", function, rank, world));
  return {Parallel(parallel), rank, world};
}

// The caller's policy, plus a deny of every backend whose memory is not options.device_type.
struct LayerRequest {
  nibble_host_layer_options options;
  Policy policy;
  std::vector<std::string> wrong_device;  // the backends denied for their device
};

LayerRequest layer_request(const Registry& reg, const nibble_host_layer_options* options, const char* function) {
  LayerRequest r{capi::read_sized(options, kDefaultLayerOptions, function, "options"), {}, {}};
  if (r.options.device_id < 0)
    throw Error(Errc::invalid_argument, fmt::format("{}: device_id {} is negative", function, r.options.device_id));
  if (r.options.policy) r.policy = r.options.policy->policy;
  if (r.options.device_type != 0)
    for (const auto& b : reg.backends())
      if (capi::dlpack_device_of(*b) != r.options.device_type) {
        r.policy.global.deny.push_back(b->name());
        r.wrong_device.push_back(b->name());
      }
  return r;
}

// Says why the backends of another device were denied.
void explain_device_denials(const LayerRequest& r, Selection& sel) {
  for (Candidate& c : sel.candidates)
    if (c.verdict == Verdict::denied &&
        std::find(r.wrong_device.begin(), r.wrong_device.end(), c.backend) != r.wrong_device.end())
      c.reason = fmt::format("its memory is not where the tensors are (device type {} asked for)",
                             capi::device_type_name(r.options.device_type));
}

}  // namespace

extern "C" {}  // namespace

extern "C" {

// ---- version and errors -----------------------------------------------------------------------

uint32_t nibble_host_api_version(void) { return NIBBLE_HOST_API_VERSION; }
const char* nibble_host_version(void) { return nibble::version(); }

const char* nibble_host_status_name(int32_t status) {
  if (status == NIBBLE_HOST_OK) return "ok";
  if (status < 1 || status > NIBBLE_HOST_ERR_INTERNAL) return "unknown status";
  return errc_name(Errc(status - 1));
}

int32_t nibble_host_error_status(const nibble_host_error* e) { return e ? e->status : NIBBLE_HOST_OK; }
const char* nibble_host_error_message(const nibble_host_error* e) { return e ? e->message.c_str() : ""; }
const nibble_host_selection* nibble_host_error_selection(const nibble_host_error* e) {
  return e ? e->selection.get() : nullptr;
}
void nibble_host_error_free(nibble_host_error* e) {
  if (e != &capi::out_of_memory_error) delete e;
}

// ---- policy -----------------------------------------------------------------------------------

nibble_host_error* nibble_host_policy_new(nibble_host_policy** out) {
  return guarded([&] { require(out, "nibble_host_policy_new", "out") = new nibble_host_policy{}; });
}

nibble_host_error* nibble_host_policy_from_environment(nibble_host_policy** out) {
  return guarded([&] {
    auto p = std::make_unique<nibble_host_policy>(nibble_host_policy{Policy::from_environment()});
    require(out, "nibble_host_policy_from_environment", "out") = p.release();
  });
}

nibble_host_error* nibble_host_policy_from_file(const char* path, nibble_host_policy** out) {
  return guarded([&] {
    auto p = std::make_unique<nibble_host_policy>(
        nibble_host_policy{Policy::load_file(str_arg(path, "nibble_host_policy_from_file", "path"))});
    require(out, "nibble_host_policy_from_file", "out") = p.release();
  });
}

nibble_host_error* nibble_host_policy_from_toml(const char* text, const char* origin, nibble_host_policy** out) {
  return guarded([&] {
    auto p = std::make_unique<nibble_host_policy>(nibble_host_policy{
        Policy::parse_toml(str_arg(text, "nibble_host_policy_from_toml", "text"), origin ? origin : "policy")});
    if (origin) p->policy.source = origin;
    require(out, "nibble_host_policy_from_toml", "out") = p.release();
  });
}

nibble_host_error* nibble_host_policy_pin(nibble_host_policy* policy, const char* backend, int32_t strict) {
  return guarded([&] {
    Policy& p = require(policy, "nibble_host_policy_pin", "policy").policy;
    const std::string name = str_arg(backend, "nibble_host_policy_pin", "backend");
    if (strict) {
      p.pin_strict(name);
    } else {
      p.global.pin = name;
      for (auto& o : p.layers) o.rules.pin.reset();
    }
  });
}

void nibble_host_policy_free(nibble_host_policy* policy) { delete policy; }

// ---- registry ---------------------------------------------------------------------------------

nibble_host_error* nibble_host_registry_discover(const nibble_host_discovery* options, nibble_host_registry** out) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_registry_discover";
    require(out, fn, "out");
    const nibble_host_discovery o = capi::read_sized(options, nibble_host_discovery{sizeof(nibble_host_discovery),
                                                                                     nullptr, 0, 1, 1}, fn, "options");
    DiscoveryOptions d;
    d.use_default_dirs = o.use_default_dirs != 0;
    d.use_env = o.use_env != 0;
    if (o.num_dirs && !o.dirs) throw Error(Errc::invalid_argument, fmt::format("{}: num_dirs is {} but dirs is NULL", fn, o.num_dirs));
    for (std::size_t i = 0; i < o.num_dirs; ++i) {
      if (!o.dirs[i]) throw Error(Errc::invalid_argument, fmt::format("{}: dirs[{}] is NULL", fn, i));
      d.dirs.emplace_back(o.dirs[i]);
    }
    auto r = std::make_unique<nibble_host_registry>();
    r->registry = Registry::discover(d);
    for (const auto& b : r->registry->backends()) r->capabilities.push_back(b->capabilities_summary());
    r->remarks = r->registry->search_remarks();
    *out = r.release();
  });
}

void nibble_host_registry_free(nibble_host_registry* registry) { delete registry; }

size_t nibble_host_registry_num_backends(const nibble_host_registry* r) {
  return r ? r->registry->backends().size() : 0;
}

nibble_host_error* nibble_host_registry_backend(const nibble_host_registry* r, size_t index,
                                                nibble_host_backend_info* info) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_registry_backend";
    const Backend& b = *at_index(require(r, fn, "registry").registry->backends(), index, fn, "backends");
    const ProbeResult& pr = b.probe();
    capi::write_sized(info,
                      nibble_host_backend_info{0, b.name().c_str(), b.version().c_str(), b.platform().c_str(),
                                               b.description().c_str(), b.path().c_str(), r->capabilities[index].c_str(),
                                               b.priority(), pr.available ? 1 : 0, pr.message.c_str(),
                                               capi::dlpack_device_of(b)},
                      fn, "info");
  });
}

size_t nibble_host_registry_num_skipped(const nibble_host_registry* r) { return r ? r->registry->skipped().size() : 0; }

nibble_host_error* nibble_host_registry_skipped(const nibble_host_registry* r, size_t index, nibble_host_skipped* info) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_registry_skipped";
    const SkippedFile& s = at_index(require(r, fn, "registry").registry->skipped(), index, fn, "skipped files");
    capi::write_sized(info, nibble_host_skipped{0, s.path.c_str(), skipped_kind_name(s.kind), s.reason.c_str()}, fn,
                      "info");
  });
}

size_t nibble_host_registry_num_remarks(const nibble_host_registry* r) { return r ? r->remarks.size() : 0; }
const char* nibble_host_registry_remark(const nibble_host_registry* r, size_t index) {
  return r && index < r->remarks.size() ? r->remarks[index].c_str() : nullptr;
}

// ---- checkpoint -------------------------------------------------------------------------------

nibble_host_error* nibble_host_checkpoint_open(const char* dir, nibble_host_checkpoint** out) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_checkpoint_open";
    require(out, fn, "out");
    auto c = std::make_unique<nibble_host_checkpoint>(nibble_host_checkpoint{Checkpoint::open(str_arg(dir, fn, "dir"))});
    *out = c.release();
  });
}

void nibble_host_checkpoint_free(nibble_host_checkpoint* checkpoint) { delete checkpoint; }

const char* nibble_host_checkpoint_quantization(const nibble_host_checkpoint* c) {
  return c ? c->checkpoint->config().summary().c_str() : "";
}
int32_t nibble_host_checkpoint_model_dtype(const nibble_host_checkpoint* c) {
  return c ? int32_t(c->checkpoint->config().model_dtype()) : NIBBLE_DTYPE_INVALID;
}
size_t nibble_host_checkpoint_num_layers(const nibble_host_checkpoint* c) { return c ? c->checkpoint->layers().size() : 0; }

nibble_host_error* nibble_host_checkpoint_layer(const nibble_host_checkpoint* c, size_t index,
                                                nibble_host_layer_info* info) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_checkpoint_layer";
    const LayerEntry& e = at_index(require(c, fn, "checkpoint").checkpoint->layers(), index, fn, "layers");
    const LayerScheme& s = e.scheme;
    nibble_host_layer_info li{0, e.name.c_str(), int32_t(s.kind), s.reason.c_str(), e.k, e.n, 0, 0, 0, 0,
                              NIBBLE_FORMAT_UNKNOWN, ""};
    if (s.kind != LayerScheme::Kind::unquantized) {  // a 16-bit layer has no quantization to describe
      li.bits = s.bits;
      li.group_size = s.group_size;
      li.symmetric = s.symmetric ? 1 : 0;
      li.act_order = s.act_order ? 1 : 0;
      li.format = int32_t(s.format);
      li.packing = packing_name(s.packing);
    }
    capi::write_sized(info, li, fn, "info");
  });
}

nibble_host_error* nibble_host_checkpoint_find_layer(const nibble_host_checkpoint* c, const char* name, size_t* index) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_checkpoint_find_layer";
    const Checkpoint& ck = *require(c, fn, "checkpoint").checkpoint;
    const LayerEntry* e = ck.find_layer(str_arg(name, fn, "name"));
    if (!e) throw Error(Errc::not_found, fmt::format("layer '{}' is not a linear layer of {}", name, ck.dir().string()));
    require(index, fn, "index") = std::size_t(e - ck.layers().data());
  });
}

nibble_host_error* nibble_host_checkpoint_spec(const nibble_host_checkpoint* c, const char* layer, int32_t act_dtype,
                                               nibble_linear_spec* spec) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_checkpoint_spec";
    const Checkpoint& ck = *require(c, fn, "checkpoint").checkpoint;
    const LayerEntry& e = quantized_layer(ck, layer, fn);
    nibble_linear_spec s = ck.spec_of(e, act_dtype_arg(act_dtype, fn)).to_abi();
    s.layer_name = e.name.c_str();  // the checkpoint's copy of the name: it lives as long as the handle
    capi::write_sized(spec, s, fn, "spec");
  });
}

nibble_host_error* nibble_host_checkpoint_shard_spec(const nibble_host_checkpoint* c, const char* layer,
                                                     int32_t act_dtype, int32_t parallel, int32_t rank,
                                                     int32_t world, nibble_linear_spec* spec) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_checkpoint_shard_spec";
    const Checkpoint& ck = *require(c, fn, "checkpoint").checkpoint;
    const LayerEntry& e = quantized_layer(ck, layer, fn);
    const Split split = split_arg(parallel, rank, world, fn);
    if (split.how == Parallel::none)
      throw Error(Errc::invalid_argument,
                  fmt::format("{}: layer '{}': parallel NONE: expected COLUMN ({}) or ROW ({})", fn, e.name,
                              int(NIBBLE_PARALLEL_COLUMN), int(NIBBLE_PARALLEL_ROW)));
    nibble_linear_spec s =
        shard_spec(ck.spec_of(e, act_dtype_arg(act_dtype, fn)), split.how, split.rank, split.world).to_abi();
    s.layer_name = e.name.c_str();
    capi::write_sized(spec, s, fn, "spec");
  });
}

// ---- selection --------------------------------------------------------------------------------

nibble_host_error* nibble_host_select(const nibble_host_registry* registry, const nibble_host_checkpoint* checkpoint,
                                      const char* layer, const nibble_host_layer_options* options,
                                      nibble_host_selection** out) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_select";
    require(out, fn, "out");
    const Registry& reg = *require(registry, fn, "registry").registry;
    const Checkpoint& ck = *require(checkpoint, fn, "checkpoint").checkpoint;
    const LayerRequest r = layer_request(reg, options, fn);
    const LayerEntry& e = quantized_layer(ck, layer, fn);
    const Split split = split_arg(r.options.parallel, r.options.rank, r.options.world, fn);
    LinearSpec spec = ck.spec_of(e, act_dtype_arg(r.options.act_dtype, fn));
    if (split.how != Parallel::none) spec = shard_spec(spec, split.how, split.rank, split.world);
    Selection sel = reg.select(spec, r.policy);
    explain_device_denials(r, sel);
    std::string trace = sel.trace();
    *out = new nibble_host_selection{std::move(sel), std::move(trace)};
  });
}

void nibble_host_selection_free(nibble_host_selection* selection) { delete selection; }

const char* nibble_host_selection_layer(const nibble_host_selection* s) { return s ? s->selection.layer.c_str() : ""; }
const char* nibble_host_selection_backend(const nibble_host_selection* s) {
  return s && s->selection.backend ? s->selection.backend->name().c_str() : nullptr;
}
size_t nibble_host_selection_num_candidates(const nibble_host_selection* s) { return s ? s->selection.candidates.size() : 0; }

nibble_host_error* nibble_host_selection_candidate(const nibble_host_selection* s, size_t index,
                                                   nibble_host_candidate* candidate) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_selection_candidate";
    const Candidate& c = at_index(require(s, fn, "selection").selection.candidates, index, fn, "candidates");
    capi::write_sized(candidate,
                      nibble_host_candidate{0, c.backend.c_str(), int32_t(c.verdict), verdict_name(c.verdict), c.reason.c_str()},
                      fn, "candidate");
  });
}

size_t nibble_host_selection_num_notes(const nibble_host_selection* s) { return s ? s->selection.notes.size() : 0; }
const char* nibble_host_selection_note(const nibble_host_selection* s, size_t index) {
  return s && index < s->selection.notes.size() ? s->selection.notes[index].c_str() : nullptr;
}
const char* nibble_host_selection_trace(const nibble_host_selection* s) { return s ? s->trace.c_str() : ""; }

// ---- prepared layers --------------------------------------------------------------------------

nibble_host_error* nibble_host_prepare(const nibble_host_registry* registry, const nibble_host_checkpoint* checkpoint,
                                       const char* layer, const nibble_host_layer_options* options,
                                       nibble_host_linear** out, nibble_host_selection** selection) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_prepare";
    require(out, fn, "out");
    const Registry& reg = *require(registry, fn, "registry").registry;
    const Checkpoint& ck = *require(checkpoint, fn, "checkpoint").checkpoint;
    const LayerRequest r = layer_request(reg, options, fn);
    const nibble_host_layer_options& o = r.options;
    const LayerEntry& e = quantized_layer(ck, layer, fn);
    const Split split = split_arg(o.parallel, o.rank, o.world, fn);
    if (split.how != Parallel::none)  // refuse an impossible split before any weight is read
      shard_spec(ck.spec_of(e, act_dtype_arg(o.act_dtype, fn)), split.how, split.rank, split.world);
    CanonicalLinear w = ck.load(e.name, act_dtype_arg(o.act_dtype, fn));
    if (split.how != Parallel::none) w = shard(w, split.how, split.rank, split.world);
    PreparedSelection ps = reg.select_and_prepare(w, r.policy, o.stream);
    explain_device_denials(r, ps.selection);
    if (!ps) {
      std::string msg = fmt::format("no backend can run layer '{}' ({}):\n{}", e.name, w.spec.summary(), ps.selection.trace());
      throw capi::NoBackend(std::move(msg), std::move(ps.selection));
    }
    const int32_t type = capi::dlpack_device_of(ps.prepared->backend());
    auto lin = std::make_unique<nibble_host_linear>(
        nibble_host_linear{ps.prepared, DLDevice{DLDeviceType(type), type == kDLCPU ? 0 : o.device_id}});
    if (selection) {
      std::string trace = ps.selection.trace();
      *selection = new nibble_host_selection{std::move(ps.selection), std::move(trace)};
    }
    *out = lin.release();
  });
}

void nibble_host_linear_free(nibble_host_linear* linear) { delete linear; }

nibble_host_error* nibble_host_linear_spec(const nibble_host_linear* linear, nibble_linear_spec* spec) {
  return guarded([&] {
    constexpr const char* fn = "nibble_host_linear_spec";
    capi::write_sized(spec, require(linear, fn, "linear").prepared->spec().to_abi(), fn, "spec");
  });
}

const char* nibble_host_linear_backend(const nibble_host_linear* linear) {
  return linear ? linear->prepared->backend().name().c_str() : "";
}

}  // extern "C"
