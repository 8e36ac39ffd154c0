// Plugin discovery, careful loading, and selection under a policy.
#include "nibble/registry.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/dll/import.hpp>
#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <cstring>
#include <set>

#include "nibble/error.h"

namespace fs = std::filesystem;

namespace nibble {

namespace {

constexpr std::size_t kMsgCap = 2048;

struct Msg {
  char buf[kMsgCap] = {0};
  operator char*() noexcept { return buf; }
  std::string str(const char* fallback) const {
    std::string s(buf, strnlen(buf, kMsgCap));
    return s.empty() ? std::string(fallback) : s;
  }
};

const char* status_name(int32_t st) {
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

// Turns a dlopen failure into a reason that names the missing library when there is one.
std::string explain_load_failure(const fs::path& file, const std::string& what) {
  static const std::string kMissing = ": cannot open shared object file";
  auto pos = what.find(kMissing);
  if (pos != std::string::npos) {
    auto start = what.rfind(' ', pos);
    auto paren = what.rfind('(', pos);
    if (paren != std::string::npos && (start == std::string::npos || paren > start)) start = paren;
    std::string lib = what.substr(start == std::string::npos ? 0 : start + 1,
                                  pos - (start == std::string::npos ? 0 : start + 1));
    if (lib != file.string() && lib != file.filename().string())
      return fmt::format("missing library {} (needed by {}; install it or add its directory to "
                         "LD_LIBRARY_PATH)", lib, file.filename().string());
  }
  return fmt::format("dlopen failed: {}", what);
}

bool valid_name(const char* s) {
  if (!s || !*s || strnlen(s, 65) > 64) return false;
  for (const char* p = s; *p; ++p)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  return true;
}

std::string safe_str(const char* s, const char* fallback = "") {
  return s ? std::string(s, strnlen(s, 512)) : std::string(fallback);
}

struct LoadFailure {
  SkippedFile::Kind kind;
  std::string reason;
};

// The library as Boost.DLL keeps it: import_alias's function object holds a shared_ptr to it.
using EntryFunction = decltype(boost::dll::import_alias<const nibble_plugin_api*(uint32_t)>(
    std::declval<boost::dll::shared_library>(), ""));

std::shared_ptr<Backend> load_or_fail(const fs::path& path, LoadFailure& failure) {
  // 1. Read the symbol table without loading: a stranger's initializers must never run.
  try {
    boost::dll::library_info info(path, true);
    auto symbols = info.symbols();
    if (std::find(symbols.begin(), symbols.end(), NIBBLE_PLUGIN_ENTRY_NAME) == symbols.end()) {
      failure = {SkippedFile::Kind::not_a_plugin,
                 "does not export " NIBBLE_PLUGIN_ENTRY_NAME " (not a nibble plugin; not loaded)"};
      return nullptr;
    }
  } catch (const std::exception& e) {
    failure = {SkippedFile::Kind::not_a_plugin,
               fmt::format("not a loadable shared object ({}); not loaded", e.what())};
    return nullptr;
  }
  // 2. Load it, resolving every symbol now so that a missing one is a reason, not a later crash.
  boost::dll::shared_library lib;
  try {
    lib.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    failure = {SkippedFile::Kind::load_failed, explain_load_failure(path, e.what())};
    return nullptr;
  }
  // 3. Ask the entry for the API struct and check it before trusting any field.
  std::shared_ptr<EntryFunction> entry;
  try {
    entry = std::make_shared<EntryFunction>(
        boost::dll::import_alias<const nibble_plugin_api*(uint32_t)>(lib, NIBBLE_PLUGIN_ENTRY_NAME));
  } catch (const std::exception& e) {
    failure = {SkippedFile::Kind::refused, fmt::format("cannot import {}: {}", NIBBLE_PLUGIN_ENTRY_NAME, e.what())};
    return nullptr;
  }
  const nibble_plugin_api* api = (*entry)(NIBBLE_ABI_VERSION);
  if (!api) {
    failure = {SkippedFile::Kind::refused, "its entry returned NULL (it declined this host)"};
    return nullptr;
  }
  if (api->abi_version != NIBBLE_ABI_VERSION) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("ABI version {} but this host speaks version {}; rebuild the plugin "
                           "against nibble {}'s plugin_abi.h",
                           api->abi_version, NIBBLE_ABI_VERSION, NIBBLE_VERSION_STRING)};
    return nullptr;
  }
  if (api->struct_size < NIBBLE_PLUGIN_API_V1_SIZE) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("API struct of {} bytes is smaller than the {} bytes of ABI version {}; "
                           "the plugin was built against a broken or foreign header",
                           api->struct_size, NIBBLE_PLUGIN_API_V1_SIZE, NIBBLE_ABI_VERSION)};
    return nullptr;
  }
  if (!valid_name(api->name)) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("invalid plugin name '{}' (expected 1-64 characters of [a-z0-9_])", safe_str(api->name, "(null)"))};
    return nullptr;
  }
  std::vector<const char*> missing;
  if (!api->probe) missing.push_back("probe");
  if (!api->can_implement) missing.push_back("can_implement");
  if (!api->process_weights) missing.push_back("process_weights");
  if (!api->apply) missing.push_back("apply");
  if (!api->release) missing.push_back("release");
  if (!api->device_alloc) missing.push_back("device_alloc");
  if (!api->device_free) missing.push_back("device_free");
  if (!api->device_copy) missing.push_back("device_copy");
  if (!api->device_sync) missing.push_back("device_sync");
  if (!missing.empty()) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("plugin '{}' leaves required entry points NULL: {}", api->name, fmt::join(missing, ", "))};
    return nullptr;
  }
  if (api->caps.num_group_sizes > NIBBLE_MAX_GROUP_SIZES) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("plugin '{}' declares {} group sizes (at most {})", api->name,
                           api->caps.num_group_sizes, NIBBLE_MAX_GROUP_SIZES)};
    return nullptr;
  }
  return std::make_shared<Backend>(std::static_pointer_cast<void>(entry), api, path);
}

bool world_writable(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX);
}

}  // namespace

const char* skipped_kind_name(SkippedFile::Kind k) noexcept {
  switch (k) {
    case SkippedFile::Kind::not_a_plugin: return "not a plugin";
    case SkippedFile::Kind::load_failed: return "load failed";
    case SkippedFile::Kind::refused: return "refused";
    case SkippedFile::Kind::duplicate: return "duplicate";
    case SkippedFile::Kind::unsafe: return "unsafe";
  }
  return "skipped";
}

const char* verdict_name(Verdict v) noexcept {
  switch (v) {
    case Verdict::selected: return "selected";
    case Verdict::viable: return "viable";
    case Verdict::denied: return "denied";
    case Verdict::not_considered: return "not considered";
    case Verdict::no_device: return "no device";
    case Verdict::unsupported: return "unsupported";
    case Verdict::cannot_implement: return "cannot implement";
    case Verdict::load_failed: return "load failed";
  }
  return "?";
}

// ---- Backend ------------------------------------------------------------------------------------

Backend::Backend(std::shared_ptr<void> library, const nibble_plugin_api* api, fs::path path)
    : library_(std::move(library)), api_(api), path_(std::move(path)) {
  name_ = safe_str(api->name);
  version_ = safe_str(api->version, "?");
  platform_ = safe_str(api->platform, "?");
  description_ = safe_str(api->description);
  priority_ = api->priority;
  caps_ = api->caps;
}

std::shared_ptr<Backend> Backend::load(const fs::path& path) {
  LoadFailure failure{};
  auto b = load_or_fail(path, failure);
  if (!b) throw Error(Errc::plugin, fmt::format("{}: {}", path.string(), failure.reason));
  return b;
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
  const nibble_linear_spec s = w.spec.to_abi();
  const nibble_canonical_weights cw = w.to_abi();
  nibble_prepared* handle = nullptr;
  Msg msg;
  const int32_t st = api_->process_weights(&s, &cw, stream, &handle, msg, kMsgCap);
  if (st != NIBBLE_OK) {
    if (handle) api_->release(handle);
    throw Error(Errc::plugin, fmt::format("layer '{}': backend {}: process_weights failed ({}): {}",
                                          w.spec.name, name_, status_name(st), msg.str("no message")));
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
  if (st != NIBBLE_OK || !p)
    throw Error(Errc::device, fmt::format("backend {}: device_alloc({} bytes) failed ({}): {}", name_,
                                          bytes, status_name(st), msg.str("no message")));
  return DeviceBuffer(shared_from_this(), p, bytes);
}

void Backend::copy(void* dst, const void* src, std::size_t bytes, nibble_copy_kind kind, void* stream) {
  Msg msg;
  const int32_t st = api_->device_copy(dst, src, bytes, kind, stream, msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw Error(Errc::device, fmt::format("backend {}: device_copy failed ({}): {}", name_,
                                          status_name(st), msg.str("no message")));
}

void Backend::sync(void* stream) {
  Msg msg;
  const int32_t st = api_->device_sync(stream, msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw Error(Errc::device, fmt::format("backend {}: device_sync failed ({}): {}", name_,
                                          status_name(st), msg.str("no message")));
}

void Backend::set_option(const std::string& key, const std::string& value) {
  if (!api_->set_option)
    throw Error(Errc::unsupported, fmt::format("backend {} takes no options (asked for {}={})", name_, key, value));
  Msg msg;
  const int32_t st = api_->set_option(key.c_str(), value.c_str(), msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw Error(Errc::invalid_argument, fmt::format("backend {}: option {}={} refused: {}", name_, key,
                                                    value, msg.str(status_name(st))));
}

// ---- DeviceBuffer / PreparedLinear --------------------------------------------------------------

DeviceBuffer::~DeviceBuffer() {
  if (backend_ && ptr_) backend_->api().device_free(ptr_);
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
  if (handle_) backend_->api().release(handle_);
}

void PreparedLinear::apply_device(const void* x, void* y, int64_t m, void* stream) const {
  nibble_tensor tx{const_cast<void*>(x), int32_t(spec_.act_dtype), 2, {m, spec_.k, 0, 0}};
  nibble_tensor ty{y, int32_t(spec_.act_dtype), 2, {m, spec_.n, 0, 0}};
  Msg msg;
  const int32_t st = backend_->api().apply(handle_, &tx, &ty, stream, msg, kMsgCap);
  if (st != NIBBLE_OK)
    throw Error(Errc::plugin, fmt::format("layer '{}': backend {}: apply(M={}) failed ({}): {}", spec_.name,
                                          backend_->name(), m, status_name(st), msg.str("no message")));
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
  if (!backend_->api().describe_kernel) return {};
  Msg msg;
  if (backend_->api().describe_kernel(handle_, m, msg, kMsgCap) != NIBBLE_OK) return {};
  return msg.str("");
}

// ---- Registry -----------------------------------------------------------------------------------

fs::path Registry::default_plugin_dir() { return fs::path(NIBBLE_PLUGIN_DIR); }

std::shared_ptr<Registry> Registry::discover(const DiscoveryOptions& options) {
  auto reg = std::make_shared<Registry>();
  std::vector<fs::path> dirs;
  for (const auto& d : options.dirs) dirs.push_back(fs::absolute(d));
  if (options.use_env) {
    if (const char* env = std::getenv("NIBBLE_PLUGIN_PATH")) {
      std::string s = env;
      std::size_t start = 0;
      while (start <= s.size()) {
        std::size_t end = s.find(':', start);
        if (end == std::string::npos) end = s.size();
        std::string entry = s.substr(start, end - start);
        if (!entry.empty()) {
          if (fs::path(entry).is_absolute()) dirs.emplace_back(entry);
          else reg->warnings_.push_back(fmt::format(
                   "NIBBLE_PLUGIN_PATH entry '{}' ignored: plugin directories must be absolute paths "
                   "(nibble never loads plugins relative to the working directory)", entry));
        }
        start = end + 1;
      }
    }
  }
  if (options.use_default_dirs) {
    dirs.push_back(default_plugin_dir());
    // Relocatable installs: <dir of libnibble>/nibble/plugins.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&Registry::default_plugin_dir), &info) && info.dli_fname) {
      std::error_code ec;
      fs::path lib = fs::canonical(info.dli_fname, ec);
      if (!ec) dirs.push_back(lib.parent_path() / "nibble" / "plugins");
    }
  }
  std::set<fs::path> seen_dirs;
  for (const fs::path& d : dirs) {
    std::error_code ec;
    fs::path canon = fs::weakly_canonical(d, ec);
    if (ec) canon = d;
    if (!seen_dirs.insert(canon).second) continue;
    reg->dirs_.push_back(d);
    if (!fs::is_directory(d, ec)) continue;
    if (world_writable(d)) {
      reg->skipped_.push_back({d, SkippedFile::Kind::unsafe,
                               "directory is world-writable (anyone could plant a plugin); not searched"});
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      if (f.extension() != ".so") {
        reg->skipped_.push_back({f, SkippedFile::Kind::not_a_plugin, "not a shared module (*.so); not loaded"});
        continue;
      }
      if (world_writable(f)) {
        reg->skipped_.push_back({f, SkippedFile::Kind::unsafe, "file is world-writable; not loaded"});
        continue;
      }
      LoadFailure failure{};
      auto b = load_or_fail(f, failure);
      if (!b) {
        reg->skipped_.push_back({f, failure.kind, failure.reason});
        continue;
      }
      if (auto prev = reg->find(b->name())) {
        reg->skipped_.push_back({f, SkippedFile::Kind::duplicate,
                                 fmt::format("a plugin named '{}' was already loaded from {}", b->name(),
                                             prev->path().string())});
        continue;
      }
      reg->backends_.push_back(std::move(b));
    }
  }
  return reg;
}

std::shared_ptr<Backend> Registry::find(const std::string& name) const {
  for (const auto& b : backends_)
    if (b->name() == name) return b;
  return nullptr;
}

std::string Registry::backend_names() const {
  std::vector<std::string> names;
  for (const auto& b : backends_) names.push_back(b->name());
  return names.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(names, ", "));
}

Selection Registry::select(const LinearSpec& spec, const Policy& policy) const {
  const PolicyRules rules = policy.rules_for(spec.name);
  const bool strict = rules.strict.value_or(false);
  Selection sel;
  sel.layer = spec.name;
  const std::string origin = policy.source.empty() ? std::string("policy") : policy.source;

  if (rules.pin && !find(*rules.pin)) {
    std::vector<std::string> dirs;
    for (const auto& d : dirs_) dirs.push_back(d.string());
    throw Error(Errc::no_backend,
                fmt::format("backend '{}' (pinned by {}) does not exist; backends found: {} "
                            "(searched: {})", *rules.pin, origin, backend_names(), fmt::join(dirs, ":")));
  }
  for (const auto& p : rules.prefer)
    if (!find(p)) sel.notes.push_back(fmt::format("preferred backend '{}' does not exist", p));

  // Order: pin, then the prefer list, then priority (high first), then name.
  auto rank = [&](const Backend& b) -> std::pair<int, int> {
    if (rules.pin && b.name() == *rules.pin) return {0, 0};
    auto it = std::find(rules.prefer.begin(), rules.prefer.end(), b.name());
    if (it != rules.prefer.end()) return {1, int(it - rules.prefer.begin())};
    return {2, -b.priority()};
  };
  std::vector<std::shared_ptr<Backend>> order = backends_;
  std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    auto ra = rank(*a), rb = rank(*b);
    if (ra != rb) return ra < rb;
    return a->name() < b->name();
  });

  auto allowed_by_strict = [&](const Backend& b) {
    if (!strict) return true;
    if (rules.pin) return b.name() == *rules.pin;
    if (!rules.prefer.empty())
      return std::find(rules.prefer.begin(), rules.prefer.end(), b.name()) != rules.prefer.end();
    return true;
  };

  for (const auto& b : order) {
    Candidate c{b->name(), Verdict::viable, {}};
    if (std::find(rules.deny.begin(), rules.deny.end(), b->name()) != rules.deny.end()) {
      c.verdict = Verdict::denied;
      c.reason = fmt::format("denied by {}", origin);
    } else if (!allowed_by_strict(*b)) {
      c.verdict = Verdict::not_considered;
      c.reason = rules.pin ? fmt::format("strict pin to {} ({})", *rules.pin, origin)
                           : fmt::format("strict: only {} ({})", fmt::join(rules.prefer, ", "), origin);
    } else if (auto why = b->check_capabilities(spec); !why.empty()) {
      c.verdict = Verdict::unsupported;
      c.reason = why;
    } else if (const auto& pr = b->probe(); !pr.available) {
      c.verdict = Verdict::no_device;
      c.reason = pr.message;
    } else if (auto why2 = b->can_implement(spec); !why2.empty()) {
      c.verdict = Verdict::cannot_implement;
      c.reason = why2;
    } else if (!sel.backend) {
      c.verdict = Verdict::selected;
      c.reason = b->probe().message;
      sel.backend = b;
    } else {
      c.reason = fmt::format("could run it; {} came first", sel.backend->name());
    }
    sel.candidates.push_back(std::move(c));
  }
  for (const auto& s : skipped_)
    if (s.kind == SkippedFile::Kind::load_failed || s.kind == SkippedFile::Kind::refused)
      sel.candidates.push_back({s.path.filename().string(), Verdict::load_failed, s.reason});
  return sel;
}

std::shared_ptr<Backend> Registry::select_or_throw(const LinearSpec& spec, const Policy& policy) const {
  Selection sel = select(spec, policy);
  if (sel.backend) return sel.backend;
  throw Error(Errc::no_backend, fmt::format("no backend can run layer '{}' ({}):\n{}", spec.name,
                                            spec.summary(), sel.trace()));
}

std::string Selection::trace() const {
  std::string s;
  for (const auto& n : notes) s += fmt::format("  note: {}\n", n);
  for (const auto& c : candidates)
    s += fmt::format("  {:<16} {:<16} {}\n", c.backend, verdict_name(c.verdict), c.reason);
  if (candidates.empty()) s += "  (no backends were found)\n";
  return s;
}

}  // namespace nibble
