// The wrappers around one loaded plugin: Backend (decisions, weights, device memory, timing, the
// dense baseline), and the objects it makes (PreparedLinear, DenseLinear, DeviceBuffer), each
// released by the plugin that made it. Every plugin status is turned into an Error here.
#include <fmt/format.h>

#include <exception>

#include "nibble/registry.h"
#include "registry_internal.h"

namespace nibble {

namespace detail {

const char* status_name(int32_t st) noexcept {
  switch (st) {
    case NIBBLE_OK: return "ok";
    case NIBBLE_ERR_INVALID_ARGUMENT: return "invalid argument";
    case NIBBLE_ERR_UNSUPPORTED: return "unsupported";
    case NIBBLE_ERR_NO_DEVICE: return "no device";
    case NIBBLE_ERR_OUT_OF_MEMORY: return "out of memory";
    case NIBBLE_ERR_DEVICE: return "device error";
    case NIBBLE_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
  }
}

Errc errc_of_status(int32_t st) noexcept {
  switch (st) {
    case NIBBLE_ERR_INVALID_ARGUMENT: return Errc::invalid_argument;
    case NIBBLE_ERR_UNSUPPORTED: return Errc::plugin_unsupported;
    case NIBBLE_ERR_NO_DEVICE: return Errc::no_device;
    case NIBBLE_ERR_OUT_OF_MEMORY: return Errc::out_of_memory;
    case NIBBLE_ERR_DEVICE: return Errc::device;
    default: return Errc::plugin;
  }
}

}  // namespace detail

namespace {

using detail::kMsgCap;
using detail::Msg;
using detail::status_name;

// The Error of a failed plugin call: "<context> failed (<status>): <plugin's message>".
Error plugin_error(int32_t st, const std::string& context, const Msg& msg) {
  return Error(detail::errc_of_status(st),
               fmt::format("{} failed ({}): {}", context, status_name(st), msg.str("no message")));
}

// The callback handed to a plugin's time_device. A C plugin's frames cannot be unwound through,
// so an exception from the host's function stops here, is kept, and the remaining calls are
// skipped; Backend::time_device rethrows it once the plugin has returned.
struct TimedCalls {
  const std::function<void(int32_t)>* fn;
  std::exception_ptr error;
};
void timed_call(void* ctx, int32_t i) noexcept {
  auto* calls = static_cast<TimedCalls*>(ctx);
  if (calls->error) return;
  try {
    (*calls->fn)(i);
  } catch (...) {
    calls->error = std::current_exception();
  }
}

nibble_tensor act_tensor(const void* data, const LinearSpec& s, int64_t m, int64_t cols) {
  return nibble_tensor{const_cast<void*>(data), int32_t(s.act_dtype), 2, {m, cols, 0, 0}};
}

}  // namespace

// ---- Backend ------------------------------------------------------------------------------------

Backend::Backend(std::shared_ptr<void> library, const nibble_plugin_api* api, std::filesystem::path path)
    : library_(std::move(library)), api_(api), path_(std::move(path)) {
  name_ = detail::safe_str(api->name);
  version_ = detail::safe_str(api->version, "?");
  platform_ = detail::safe_str(api->platform, "?");
  description_ = detail::safe_str(api->description);
  priority_ = api->priority;
  caps_ = api->caps;
}

uint32_t Backend::abi_version() const noexcept { return api_->abi_version; }
uint32_t Backend::api_struct_size() const noexcept { return api_->struct_size; }
bool Backend::has_option_support() const noexcept { return api_->set_option != nullptr; }
bool Backend::has_device_timer() const noexcept { return api_->time_device != nullptr; }
bool Backend::has_dense() const noexcept {
  return api_->dense_prepare && api_->dense_apply && api_->dense_release;
}

std::string Backend::capabilities_summary() const {
  std::vector<std::string> wt, dt, gs;
  for (int32_t t = 1; t < 32; ++t)
    if ((caps_.weight_types & NIBBLE_WT_BIT(t)) && nibble_weight_type_bits(t)) wt.push_back(weight_type_name(WeightType(t)));
  for (auto d : {DType::f16, DType::bf16, DType::f32})
    if (caps_.act_dtypes & NIBBLE_DTYPE_BIT(int(d))) dt.emplace_back(dtype_name(d));
  for (uint32_t i = 0; i < caps_.num_group_sizes; ++i) gs.push_back(std::to_string(caps_.group_sizes[i]));
  std::string s = fmt::format("{} G{{{}}} {}", fmt::join(wt, ","), fmt::join(gs, ","), fmt::join(dt, ","));
  if (caps_.act_order) s += " act_order";
  if (caps_.bias) s += " bias";
  if (caps_.k_multiple > 1) s += fmt::format(" K%{}", caps_.k_multiple);
  if (caps_.n_multiple > 1) s += fmt::format(" N%{}", caps_.n_multiple);
  if (caps_.min_device_level) s += fmt::format(" level>={}", caps_.min_device_level);
  return s;
}

const ProbeResult& Backend::probe() const {
  std::call_once(probe_once_, [this] {
    Msg msg;
    const int32_t st = api_->probe(msg, kMsgCap);
    probe_.available = st == NIBBLE_OK;
    probe_.message = msg.str(probe_.available ? "available" : status_name(st));
  });
  return probe_;
}

std::string Backend::check_capabilities(const LinearSpec& s) const {
  const auto& c = caps_;
  if (!(c.formats & NIBBLE_FORMAT_BIT(int(s.format))))
    return fmt::format("format {} not supported", format_name(s.format));
  if (s.bits < 0 || s.bits > 31 || !(c.bits & (1u << s.bits))) {
    std::vector<int> widths;
    for (int b = 1; b < 32; ++b)
      if (c.bits & (1u << b)) widths.push_back(b);
    return fmt::format("{}-bit weights not supported (it runs {} bits)", s.bits, fmt::join(widths, ", "));
  }
  if (int(s.weight_type) <= 0 || int(s.weight_type) > 31 || !(c.weight_types & NIBBLE_WT_BIT(int(s.weight_type))))
    return fmt::format("weight type {} not supported", weight_type_name(s.weight_type));
  if (int(s.act_dtype) < 0 || int(s.act_dtype) > 31 || !(c.act_dtypes & NIBBLE_DTYPE_BIT(int(s.act_dtype))))
    return fmt::format("activation dtype {} not supported", dtype_name(s.act_dtype));
  bool g_ok = false;
  std::vector<int32_t> gs;
  for (uint32_t i = 0; i < c.num_group_sizes; ++i) {
    gs.push_back(c.group_sizes[i]);
    g_ok |= c.group_sizes[i] == s.group_size;
  }
  if (!g_ok) return fmt::format("group size {} not in {{{}}}", s.group_size, fmt::join(gs, ", "));
  if (s.act_order && !c.act_order) return "act order (g_idx) not supported";
  if (s.has_bias && !c.bias) return "bias not supported";
  if (c.k_multiple > 1 && s.k % c.k_multiple)
    return fmt::format("K {} not a multiple of {}", s.k, c.k_multiple);
  if (c.n_multiple > 1 && s.n % c.n_multiple)
    return fmt::format("N {} not a multiple of {}", s.n, c.n_multiple);
  return {};
}

std::string Backend::can_implement(const LinearSpec& spec) const {
  const nibble_linear_spec s = spec.to_abi();
  Msg msg;
  const int32_t st = api_->can_implement(&s, msg, kMsgCap);
  if (st == NIBBLE_OK) return {};
  return msg.str(status_name(st));
}

std::shared_ptr<PreparedLinear> Backend::prepare(const CanonicalLinear& w, void* stream) {
  validate(w);
  return prepare_validated(w, stream);
}

std::shared_ptr<PreparedLinear> Backend::prepare_validated(const CanonicalLinear& w, void* stream) {
  const nibble_linear_spec s = w.spec.to_abi();
  const nibble_canonical_weights cw = w.to_abi();
  nibble_prepared* handle = nullptr;
  Msg msg;
  const int32_t st = api_->process_weights(&s, &cw, stream, &handle, msg, kMsgCap);
  if (st != NIBBLE_OK) {
    if (handle) api_->release(handle);
    throw plugin_error(st, fmt::format("layer '{}': backend {}: process_weights", w.spec.name, name_), msg);
  }
  if (!handle)
    throw Error(Errc::plugin, fmt::format("layer '{}': backend {}: process_weights returned success "
                                          "but no handle", w.spec.name, name_));
  return std::make_shared<PreparedLinear>(shared_from_this(), w.spec, handle);
}

DeviceBuffer Backend::alloc(std::size_t bytes) {
  void* p = nullptr;
  Msg msg;
  const int32_t st = api_->device_alloc(bytes ? bytes : 1, &p, msg, kMsgCap);
  if (st != NIBBLE_OK) throw plugin_error(st, fmt::format("backend {}: device_alloc({} bytes)", name_, bytes), msg);
  if (!p)
    throw Error(Errc::plugin, fmt::format("backend {}: device_alloc({} bytes) returned success but no memory",
                                          name_, bytes));
  return DeviceBuffer(shared_from_this(), p, bytes);
}

void Backend::copy(void* dst, const void* src, std::size_t bytes, nibble_copy_kind kind, void* stream) {
  Msg msg;
  const int32_t st = api_->device_copy(dst, src, bytes, kind, stream, msg, kMsgCap);
  if (st != NIBBLE_OK) throw plugin_error(st, fmt::format("backend {}: device_copy({} bytes)", name_, bytes), msg);
}

void Backend::sync(void* stream) {
  Msg msg;
  const int32_t st = api_->device_sync(stream, msg, kMsgCap);
  if (st != NIBBLE_OK) throw plugin_error(st, fmt::format("backend {}: device_sync", name_), msg);
}

void Backend::set_option(const std::string& key, const std::string& value) {
  if (!api_->set_option)
    throw Error(Errc::plugin_unsupported,
                fmt::format("backend {} takes no options (asked for {}={})", name_, key, value));
  Msg msg;
  const int32_t st = api_->set_option(key.c_str(), value.c_str(), msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw Error(st == NIBBLE_ERR_UNSUPPORTED ? Errc::plugin_unsupported : Errc::invalid_argument,
                fmt::format("backend {}: option {}={} refused: {}", name_, key, value, msg.str(status_name(st))));
}

double Backend::time_device(const std::function<void(int32_t)>& fn, int32_t iters, void* stream) {
  if (!has_device_timer())
    throw Error(Errc::plugin_unsupported, fmt::format("backend {} has no device timer (time it with the host clock "
                                                      "around a synchronized call)", name_));
  TimedCalls calls{&fn, nullptr};
  double ms = 0;
  Msg msg;
  const int32_t st = api_->time_device(timed_call, &calls, iters, stream, &ms, msg, kMsgCap);
  if (calls.error) std::rethrow_exception(calls.error);
  if (st != NIBBLE_OK) throw plugin_error(st, fmt::format("backend {}: time_device({} calls)", name_, iters), msg);
  return ms;
}

std::optional<double> Backend::measure_bandwidth(std::size_t bytes, void* stream) {
  if (!NIBBLE_API_HAS(api_, measure_bandwidth)) return std::nullopt;
  double bps = 0;
  Msg msg;
  const int32_t st = api_->measure_bandwidth(bytes, stream, &bps, msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw plugin_error(st, fmt::format("backend {}: measure_bandwidth({} bytes)", name_, bytes), msg);
  return bps;
}

std::shared_ptr<DenseLinear> Backend::dense(const LinearSpec& spec, const Tensor& weight_kn, void* stream) {
  if (!has_dense())
    throw Error(Errc::plugin_unsupported, fmt::format("backend {} has no dense baseline", name_));
  if (weight_kn.dtype() != spec.act_dtype || weight_kn.shape() != Shape{spec.k, spec.n})
    throw Error(Errc::invalid_argument,
                fmt::format("layer '{}': dense baseline: tensor 'weight': expected {} [{}, {}], found {} {}", spec.name,
                            dtype_name(spec.act_dtype), spec.k, spec.n, dtype_name(weight_kn.dtype()),
                            shape_str(weight_kn.shape())));
  const nibble_linear_spec s = spec.to_abi();
  nibble_dense* handle = nullptr;
  Msg msg;
  const int32_t st = api_->dense_prepare(&s, weight_kn.data(), stream, &handle, msg, kMsgCap);
  if (st != NIBBLE_OK) {
    if (handle) api_->dense_release(handle);
    throw plugin_error(st, fmt::format("layer '{}': backend {}: dense_prepare", spec.name, name_), msg);
  }
  if (!handle)
    throw Error(Errc::plugin, fmt::format("layer '{}': backend {}: dense_prepare returned success but no handle",
                                          spec.name, name_));
  return std::make_shared<DenseLinear>(shared_from_this(), spec, handle);
}

// ---- DeviceBuffer / PreparedLinear / DenseLinear ------------------------------------------------

DeviceBuffer::~DeviceBuffer() {
  if (backend_ && ptr_) backend_->api_->device_free(ptr_);
}

void DeviceBuffer::upload(const void* src, std::size_t bytes) {
  backend_->copy(ptr_, src, bytes, NIBBLE_COPY_HOST_TO_DEVICE);
  backend_->sync();
}

void DeviceBuffer::download(void* dst, std::size_t bytes) const {
  backend_->copy(dst, ptr_, bytes, NIBBLE_COPY_DEVICE_TO_HOST);
  backend_->sync();
}

PreparedLinear::~PreparedLinear() {
  if (handle_) backend_->api_->release(handle_);
}

void PreparedLinear::apply_device(const void* x, void* y, int64_t m, void* stream) const {
  nibble_tensor tx = act_tensor(x, spec_, m, spec_.k), ty = act_tensor(y, spec_, m, spec_.n);
  Msg msg;
  const int32_t st = backend_->api_->apply(handle_, &tx, &ty, stream, msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw plugin_error(st, fmt::format("layer '{}': backend {}: apply(M={})", spec_.name, backend_->name(), m), msg);
}

Tensor PreparedLinear::apply(const Tensor& x) const {
  if (x.ndim() != 2 || x.dim(1) != spec_.k || x.dtype() != spec_.act_dtype)
    throw Error(Errc::invalid_argument,
                fmt::format("layer '{}': tensor 'x': expected {} [M, {}], found {} {}", spec_.name,
                            dtype_name(spec_.act_dtype), spec_.k, dtype_name(x.dtype()), shape_str(x.shape())));
  const int64_t m = x.dim(0);
  Tensor y = Tensor::zeros(spec_.act_dtype, {m, spec_.n});
  DeviceBuffer dx = backend_->alloc(x.nbytes()), dy = backend_->alloc(y.nbytes());
  dx.upload(x.data(), x.nbytes());
  apply_device(dx.get(), dy.get(), m);
  backend_->sync();
  dy.download(y.mutable_data(), y.nbytes());
  return y;
}

std::string PreparedLinear::kernel_name(int64_t m) const {
  if (!backend_->api_->describe_kernel) return {};
  Msg msg;
  if (backend_->api_->describe_kernel(handle_, m, msg, kMsgCap) != NIBBLE_OK) return {};
  return msg.str("");
}

DenseLinear::~DenseLinear() {
  if (handle_) backend_->api_->dense_release(handle_);
}

void DenseLinear::apply_device(const void* x, void* y, int64_t m, void* stream) const {
  nibble_tensor tx = act_tensor(x, spec_, m, spec_.k), ty = act_tensor(y, spec_, m, spec_.n);
  Msg msg;
  const int32_t st = backend_->api_->dense_apply(handle_, &tx, &ty, stream, msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw plugin_error(st, fmt::format("layer '{}': backend {}: dense_apply(M={})", spec_.name, backend_->name(), m),
                       msg);
}

}  // namespace nibble
