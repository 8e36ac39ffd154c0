// Registry: discovers backend plugins, loads them carefully, and selects one per layer under a
// policy, returning every candidate's verdict. Thread-safe: one registry may serve many threads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "nibble/canonical.h"
#include "nibble/plugin_abi.h"
#include "nibble/policy.h"
#include "nibble/spec.h"
#include "nibble/tensor.h"

namespace nibble {

class Backend;
class PreparedLinear;
class DenseLinear;
class DeviceBuffer;

/// A file in a plugin directory that could have been a plugin but was not loaded, and why. Only
/// shared objects count: a name ending in .so, .so.N, .dylib or .dll, or an ELF shared-object
/// header; executables, static libraries and other files are passed over without a record.
struct SkippedFile {
  enum class Kind {
    not_a_plugin,  ///< a shared object (by name or ELF header) that does not export the entry alias,
                   ///< or that cannot be read as one (never loaded)
    load_failed,   ///< exports the alias but dlopen failed (e.g. a missing dependency)
    refused,       ///< loaded, but its ABI version, struct size or contents are wrong
    duplicate,     ///< a plugin with the same name was found earlier in the search path
    unsafe,        ///< a directory or file the loader will not trust
  };
  std::filesystem::path path;
  Kind kind;
  std::string reason;
};
const char* skipped_kind_name(SkippedFile::Kind k) noexcept;

/// Result of a backend's probe().
struct ProbeResult {
  bool available = false;
  std::string message;  ///< device description, or why there is none
};

/// One candidate's verdict in a selection.
enum class Verdict {
  selected,
  viable,             ///< could run the layer, but another candidate came first
  denied,             ///< disabled by policy
  not_considered,     ///< outside a strict pin / prefer list
  no_device,          ///< probe() failed
  unsupported,        ///< capabilities exclude the layer (no code was run)
  cannot_implement,   ///< can_implement() refused
  load_failed,        ///< the plugin file could not be loaded
  prepare_failed,     ///< passed every check, but its process_weights failed (select_and_prepare)
};
const char* verdict_name(Verdict v) noexcept;

struct Candidate {
  std::string backend;  ///< plugin name, or the file name for load failures
  Verdict verdict;
  std::string reason;
};

/// The outcome of select(): the winner (null if none) and every candidate's verdict, in the order
/// they were considered.
struct Selection {
  std::string layer;
  std::shared_ptr<Backend> backend;
  std::vector<Candidate> candidates;
  /// Policy remarks (e.g. a preferred backend that does not exist) and why plugins may be missing
  /// (plugin directories not searched: relative NIBBLE_PLUGIN_PATH entries, world-writable ones).
  std::vector<std::string> notes;

  explicit operator bool() const noexcept { return backend != nullptr; }
  /// Multi-line human-readable trace.
  std::string trace() const;
};

/// A loaded plugin. Keeps its shared library loaded for as long as any Backend, PreparedLinear,
/// DenseLinear or DeviceBuffer made from it is alive. Every plugin status becomes an Error whose code
/// says which (Errc::plugin_unsupported, no_device, out_of_memory, device, invalid_argument; plugin
/// for an internal error or a broken promise) and whose message is the plugin's.
class Backend : public std::enable_shared_from_this<Backend> {
 public:
  const std::string& name() const noexcept { return name_; }
  const std::string& version() const noexcept { return version_; }
  const std::string& platform() const noexcept { return platform_; }
  const std::string& description() const noexcept { return description_; }
  int32_t priority() const noexcept { return priority_; }
  const nibble_capabilities& capabilities() const noexcept { return caps_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  uint32_t abi_version() const noexcept;
  /// sizeof(nibble_plugin_api) as the plugin was built (larger than the host's for a newer revision).
  uint32_t api_struct_size() const noexcept;
  /// Human-readable capability summary: "uint4,uint4b8 G{32,64,128,256,-1} f16,bf16,f32 act_order bias".
  std::string capabilities_summary() const;

  /// probe(), run once and cached.
  const ProbeResult& probe() const;
  /// Capability check (pure data): empty if the spec is inside the declared capabilities, else why not.
  std::string check_capabilities(const LinearSpec& spec) const;
  /// can_implement(): empty if ok, else the plugin's reason.
  std::string can_implement(const LinearSpec& spec) const;

  /// Validates `w`, then runs process_weights. Throws with the plugin's message on failure.
  std::shared_ptr<PreparedLinear> prepare(const CanonicalLinear& w, void* stream = nullptr);

  /// Device memory of this backend (host memory for CPU plugins).
  DeviceBuffer alloc(std::size_t bytes);
  void copy(void* dst, const void* src, std::size_t bytes, nibble_copy_kind kind, void* stream = nullptr);
  void sync(void* stream = nullptr);
  /// Sets a plugin option (e.g. "num_threads"). Throws if the plugin refuses it.
  void set_option(const std::string& key, const std::string& value);
  bool has_option_support() const noexcept;

  /// True if the plugin times work with device events (GPUs); CPU plugins leave it to the host clock.
  bool has_device_timer() const noexcept;
  /// Elapsed milliseconds of fn(0) .. fn(iters - 1) issued on `stream`, measured by the plugin's
  /// device events. fn may throw: the exception is caught before it reaches the plugin's frames,
  /// the remaining calls are skipped, and it is rethrown here once the plugin has returned. Throws
  /// Errc::plugin_unsupported where has_device_timer() is false.
  double time_device(const std::function<void(int32_t)>& fn, int32_t iters, void* stream = nullptr);

  /// The bandwidth the plugin's own streaming code reaches over `bytes`, in bytes per second, or
  /// nullopt if the plugin does not measure it (ABI revision 1.0). Throws if the measurement fails.
  std::optional<double> measure_bandwidth(std::size_t bytes, void* stream = nullptr);

  /// True if the plugin has a dense 16-bit baseline (for benchmarks).
  bool has_dense() const noexcept;
  /// The dense baseline of `spec` for weight_kn (host [K, N] in spec.act_dtype). Throws
  /// Errc::plugin_unsupported where has_dense() is false, or the plugin's refusal.
  std::shared_ptr<DenseLinear> dense(const LinearSpec& spec, const Tensor& weight_kn, void* stream = nullptr);

  /// Internal: made by the registry (or by Backend::load for a single file).
  Backend(std::shared_ptr<void> library, const nibble_plugin_api* api, std::filesystem::path path);
  /// Loads one plugin file. Throws Errc::plugin with the reason it cannot be used.
  static std::shared_ptr<Backend> load(const std::filesystem::path& path);

 private:
  friend class DeviceBuffer;
  friend class PreparedLinear;
  friend class DenseLinear;
  friend class Registry;
  // process_weights on canonical weights already validated.
  std::shared_ptr<PreparedLinear> prepare_validated(const CanonicalLinear& w, void* stream);

  std::shared_ptr<void> library_;  // boost::dll::shared_library, type-erased
  const nibble_plugin_api* api_;
  std::filesystem::path path_;
  std::string name_, version_, platform_, description_;
  int32_t priority_;
  nibble_capabilities caps_;
  mutable std::once_flag probe_once_;
  mutable ProbeResult probe_;
};

/// Memory on a backend's device; freed by the same backend.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::shared_ptr<Backend> backend, void* ptr, std::size_t bytes)
      : backend_(std::move(backend)), ptr_(ptr), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept { DeviceBuffer t(std::move(o)); swap(t); return *this; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  /// Copies host bytes in / out (synchronously).
  void upload(const void* src, std::size_t bytes);
  void download(void* dst, std::size_t bytes) const;

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(backend_, o.backend_); std::swap(ptr_, o.ptr_); std::swap(bytes_, o.bytes_);
  }
  std::shared_ptr<Backend> backend_;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Weights prepared by one backend for one layer.
class PreparedLinear {
 public:
  PreparedLinear(std::shared_ptr<Backend> backend, LinearSpec spec, nibble_prepared* handle)
      : backend_(std::move(backend)), spec_(std::move(spec)), handle_(handle) {}
  PreparedLinear(const PreparedLinear&) = delete;
  PreparedLinear& operator=(const PreparedLinear&) = delete;
  ~PreparedLinear();

  const LinearSpec& spec() const noexcept { return spec_; }
  Backend& backend() const noexcept { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const noexcept { return backend_; }
  const nibble_prepared* handle() const noexcept { return handle_; }

  /// y = x * W (+ bias) on device pointers (x [m, k], y [m, n] in spec().act_dtype). Asynchronous on
  /// devices with streams. Throws naming the layer on failure.
  void apply_device(const void* x, void* y, int64_t m, void* stream = nullptr) const;
  /// Convenience for host tensors: copies x in, applies, copies y back. x must be [m, k] of the
  /// activation dtype; returns [m, n].
  Tensor apply(const Tensor& x) const;
  /// The kernel variant the backend would use for m rows (empty if it does not say).
  std::string kernel_name(int64_t m) const;

 private:
  std::shared_ptr<Backend> backend_;
  LinearSpec spec_;
  nibble_prepared* handle_;
};

/// A backend's dense 16-bit baseline of one weight (for benchmarks): the same y = x * W as a
/// PreparedLinear, through the plugin's vendor library. Released by the same plugin.
class DenseLinear {
 public:
  DenseLinear(std::shared_ptr<Backend> backend, LinearSpec spec, nibble_dense* handle)
      : backend_(std::move(backend)), spec_(std::move(spec)), handle_(handle) {}
  DenseLinear(const DenseLinear&) = delete;
  DenseLinear& operator=(const DenseLinear&) = delete;
  ~DenseLinear();

  const LinearSpec& spec() const noexcept { return spec_; }
  /// y = x * W on device pointers (x [m, k], y [m, n] in spec().act_dtype), as apply_device.
  void apply_device(const void* x, void* y, int64_t m, void* stream = nullptr) const;

 private:
  std::shared_ptr<Backend> backend_;
  LinearSpec spec_;
  nibble_dense* handle_;
};

/// A layer prepared by the first candidate of a selection whose process_weights succeeded.
struct PreparedSelection {
  std::shared_ptr<PreparedLinear> prepared;  ///< null if no candidate could take the layer
  Selection selection;                       ///< every verdict, prepare failures included

  explicit operator bool() const noexcept { return prepared != nullptr; }
};

struct DiscoveryOptions {
  /// Directories searched first (before the defaults); tests use this to stay hermetic.
  std::vector<std::filesystem::path> dirs;
  bool use_default_dirs = true;  ///< the install directory of the plugins
  bool use_env = true;           ///< NIBBLE_PLUGIN_PATH (colon-separated)
};

class Registry {
 public:
  /// Scans the plugin directories and loads every plugin found. Never throws for a bad plugin: it
  /// becomes a SkippedFile with the reason.
  static std::shared_ptr<Registry> discover(const DiscoveryOptions& options = {});

  /// The directories searched, in order.
  const std::vector<std::filesystem::path>& search_path() const noexcept { return dirs_; }
  const std::vector<std::shared_ptr<Backend>>& backends() const noexcept { return backends_; }
  const std::vector<SkippedFile>& skipped() const noexcept { return skipped_; }
  /// Remarks about the search path (a directory that does not exist is not one of them).
  const std::vector<std::string>& warnings() const noexcept { return warnings_; }
  /// Why a plugin a user expects may be missing: the warnings, every directory or file refused as
  /// unsafe, and, where no backend was found at all, the directories searched. Every Selection
  /// carries these as notes, so that "no backend" says why wherever it is printed.
  std::vector<std::string> search_remarks() const;
  /// The backend with this name, or null.
  std::shared_ptr<Backend> find(const std::string& name) const;
  /// Comma-separated names of every backend found ("cpu_w4a16, cuda_w4a16").
  std::string backend_names() const;
  /// The message for a backend asked for by name that does not exist: the backends that do, the
  /// directories searched and search_remarks() (e.g. a relative NIBBLE_PLUGIN_PATH entry, ignored).
  /// `asked_by`, where not empty, says who asked ("pinned by policy.toml").
  std::string missing_backend(const std::string& name, const std::string& asked_by = {}) const;

  /// Chooses a backend for `spec` under `policy`. Never throws for "nothing fits": the Selection is
  /// then empty and lists why. Throws Errc::no_backend only for a pin of a backend that does not
  /// exist (the message lists the backends that do).
  Selection select(const LinearSpec& spec, const Policy& policy = {}) const;
  /// select() that throws Errc::no_backend with the full trace when nothing fits.
  std::shared_ptr<Backend> select_or_throw(const LinearSpec& spec, const Policy& policy = {}) const;
  /// select(), then process_weights on the selected backend; where that fails, on the next viable
  /// candidate (a strict policy has no viable candidate outside its pin / prefer list), each
  /// failure recorded in the trace as Verdict::prepare_failed with the plugin's message. Never
  /// throws for "nothing could take it" (the result is then empty); throws for a malformed `w`
  /// and, as select(), for a pin of a backend that does not exist.
  PreparedSelection select_and_prepare(const CanonicalLinear& w, const Policy& policy = {},
                                       void* stream = nullptr) const;

  /// The default install directory of plugins.
  static std::filesystem::path default_plugin_dir();

 private:
  std::vector<std::filesystem::path> dirs_;
  std::vector<std::shared_ptr<Backend>> backends_;
  std::vector<SkippedFile> skipped_;
  std::vector<std::string> warnings_;
};

}  // namespace nibble
