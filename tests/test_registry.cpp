// Registry: discovery and careful loading of the in-tree test plugins, selection under policy,
// plugin faults, library lifetime and concurrent use.
#include <dlfcn.h>
#include <unistd.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>

#include "test_util.h"

using namespace nibble;
namespace fs = std::filesystem;

std::string nibble::test::skip_reason() { return {}; }

namespace {

fs::path plugin_dir() { return test::env_or("NIBBLE_TEST_PLUGIN_DIR"); }

std::shared_ptr<Registry> test_registry() { return test::hermetic_registry(plugin_dir().string()); }

const SkippedFile* skipped(const Registry& r, const std::string& file) {
  for (const auto& s : r.skipped())
    if (s.path.filename() == file) return &s;
  return nullptr;
}

const Candidate* verdict(const Selection& s, const std::string& name) {
  for (const auto& c : s.candidates)
    if (c.backend == name) return &c;
  return nullptr;
}

LinearSpec spec(const std::string& name = "model.layers.0.self_attn.q_proj", int g = 128) {
  LinearSpec s;
  s.name = name;
  s.k = 256; s.n = 64; s.group_size = g;
  s.weight_type = WeightType::uint4b8; s.act_dtype = DType::f16; s.scale_dtype = DType::f16;
  return s;
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

}  // namespace

TEST_CASE("discovery loads good plugins and records every other file with its reason") {
  REQUIRE(!plugin_dir().empty());
  auto reg = test_registry();
  for (const char* name : {"test_good_a", "test_good_b", "test_no_device", "test_process_fails",
                           "test_null_handle", "test_lying_caps", "test_larger_struct"})
    CHECK_MESSAGE(reg->find(name) != nullptr, name);
  CHECK(reg->find("test_wrong_abi") == nullptr);

  const SkippedFile* s = skipped(*reg, "test_wrong_abi.so");
  REQUIRE(s);
  CHECK(s->kind == SkippedFile::Kind::refused);
  CHECK(contains(s->reason, "ABI version 99 but this host speaks version 1"));

  s = skipped(*reg, "test_small_struct.so");
  REQUIRE(s);
  CHECK(s->kind == SkippedFile::Kind::refused);
  CHECK(contains(s->reason, "smaller than the"));

  // Built against the previous ABI's header: refused by version, nothing else read.
  s = skipped(*reg, "test_old_abi.so");
  REQUIRE(s);
  CHECK(s->kind == SkippedFile::Kind::refused);
  CHECK(contains(s->reason, "ABI version 0 but this host speaks version 1"));

  s = skipped(*reg, "test_null_entry.so");
  REQUIRE(s);
  CHECK(contains(s->reason, "entry returned NULL"));

  // Never loaded: its initializer would abort this process.
  s = skipped(*reg, "not_a_plugin.so");
  REQUIRE(s);
  CHECK(s->kind == SkippedFile::Kind::not_a_plugin);
  CHECK(contains(s->reason, "does not export nibble_plugin_entry"));

  s = skipped(*reg, "garbage.so");
  REQUIRE(s);
  CHECK(s->kind == SkippedFile::Kind::not_a_plugin);
}

TEST_CASE("a plugin whose dependency is missing becomes a reason naming the library") {
  const fs::path src = plugin_dir() / "depends" / "test_missing_dep.so";
  REQUIRE(fs::exists(src));
  const fs::path tmp = fs::temp_directory_path() / ("nibble_missing_dep_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  fs::copy_file(src, tmp / "test_missing_dep.so", fs::copy_options::overwrite_existing);
  auto reg = test::hermetic_registry(tmp.string());
  fs::remove_all(tmp);
  CHECK(reg->backends().empty());
  const SkippedFile* s = skipped(*reg, "test_missing_dep.so");
  REQUIRE(s);
  CHECK(s->kind == SkippedFile::Kind::load_failed);
  CHECK(contains(s->reason, "missing library libnibble_test_ghost.so"));
}

TEST_CASE("world-writable plugin directories and files are never loaded") {
  const fs::path tmp = fs::temp_directory_path() / ("nibble_unsafe_" + std::to_string(::getpid()));
  fs::create_directories(tmp / "open");
  fs::create_directories(tmp / "closed");
  fs::copy_file(plugin_dir() / "test_good_b.so", tmp / "open" / "test_good_b.so");
  fs::copy_file(plugin_dir() / "test_good_a.so", tmp / "closed" / "test_good_a.so");
  fs::permissions(tmp / "open", fs::perms::all);                                    // drwxrwxrwx
  fs::permissions(tmp / "closed" / "test_good_a.so", fs::perms::others_write, fs::perm_options::add);
  auto reg = test::hermetic_registry((tmp / "open").string() + ":" + (tmp / "closed").string());
  fs::remove_all(tmp);
  CHECK(reg->backends().empty());
  REQUIRE(reg->skipped().size() == 2);
  for (const auto& sk : reg->skipped()) {
    CHECK(sk.kind == SkippedFile::Kind::unsafe);
    CHECK(contains(sk.reason, "world-writable"));
  }
}

TEST_CASE("a newer minor revision (larger struct) is accepted") {
  auto reg = test_registry();
  auto b = reg->find("test_larger_struct");
  REQUIRE(b);
  CHECK(b->api_struct_size() > sizeof(nibble_plugin_api));
}

TEST_CASE("selection walks candidates by priority and records every verdict") {
  auto reg = test_registry();
  Selection sel = reg->select(spec());
  REQUIRE(sel);
  CHECK(sel.backend->name() == "test_good_a");
  CHECK(verdict(sel, "test_lying_caps")->verdict == Verdict::cannot_implement);
  CHECK(contains(verdict(sel, "test_lying_caps")->reason, "implements nothing"));
  CHECK(verdict(sel, "test_no_device")->verdict == Verdict::no_device);
  CHECK(verdict(sel, "test_no_device")->reason == "no test device present");
  CHECK(verdict(sel, "test_good_b")->verdict == Verdict::viable);
  CHECK(verdict(sel, "test_wrong_abi.so")->verdict == Verdict::load_failed);
  // The order is the priority order.
  CHECK(sel.candidates[0].backend == "test_lying_caps");
  CHECK(sel.candidates[1].backend == "test_no_device");

  // G = 64 is outside test_good_a's declared capabilities: refused without running its code.
  Selection g64 = reg->select(spec("x", 64));
  REQUIRE(g64);
  CHECK(g64.backend->name() == "test_good_b");
  CHECK(verdict(g64, "test_good_a")->verdict == Verdict::unsupported);
  CHECK(verdict(g64, "test_good_a")->reason == "group size 64 not in {128}");
}

TEST_CASE("a plugin that declares only 4 bits is refused for 2-, 3- and 8-bit layers, with the reason") {
  // The test plugins declare bits = 1 << 4 and the uint4 types, as a plugin written before the
  // other widths would: never asked to run another width, each refusal names the width and theirs.
  auto reg = test_registry();
  for (const auto& [bits, wt] : {std::pair{8, WeightType::uint8b128}, std::pair{3, WeightType::uint3b4},
                                 std::pair{2, WeightType::uint2}}) {
    LinearSpec s = spec();
    s.bits = bits;
    s.weight_type = wt;
    Selection sel = reg->select(s);
    CHECK_FALSE(sel);
    for (const char* name : {"test_good_a", "test_good_b"}) {
      const auto* v = verdict(sel, name);
      REQUIRE_MESSAGE(v, name);
      CHECK(v->verdict == Verdict::unsupported);
      CHECK(v->reason == fmt::format("{}-bit weights not supported (it runs 4 bits)", bits));
    }
    CHECK(contains(sel.trace(), fmt::format("{}-bit weights not supported", bits)));
  }
  // The same plugins run the 4-bit layer.
  CHECK(reg->select(spec()));
}

TEST_CASE("policy: prefer, deny, pin, strict and per-layer overrides") {
  auto reg = test_registry();
  Policy p;
  p.global.prefer = {"test_good_b"};
  CHECK(reg->select(spec(), p).backend->name() == "test_good_b");

  Policy deny;
  deny.global.deny = {"test_good_a"};
  Selection d = reg->select(spec(), deny);
  CHECK(d.backend->name() == "test_good_b");
  CHECK(verdict(d, "test_good_a")->verdict == Verdict::denied);

  Policy pin;
  pin.pin_strict("test_good_b");
  Selection ps = reg->select(spec(), pin);
  CHECK(ps.backend->name() == "test_good_b");
  CHECK(verdict(ps, "test_good_a")->verdict == Verdict::not_considered);

  // A non-strict pin falls back to the next candidate.
  Policy soft;
  soft.global.pin = "test_no_device";
  Selection sp = reg->select(spec(), soft);
  CHECK(sp.backend->name() == "test_good_a");
  CHECK(sp.candidates[0].backend == "test_no_device");

  // Strict: nothing past the preferred list, so nothing fits, and the error lists why.
  Policy strict;
  strict.global.prefer = {"test_no_device", "test_process_fails"};
  strict.global.strict = true;
  strict.global.deny = {"test_process_fails"};
  Selection none = reg->select(spec(), strict);
  CHECK_FALSE(none);
  try {
    reg->select_or_throw(spec(), strict);
    FAIL("expected no_backend");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::no_backend);
    const std::string m = e.what();
    CHECK(contains(m, "model.layers.0.self_attn.q_proj"));
    CHECK(contains(m, "no test device present"));
    CHECK(contains(m, "denied by policy"));
    CHECK(contains(m, "test_good_a"));
    CHECK(contains(m, "not considered"));
  }

  // Pinning a backend that does not exist names the ones that do.
  Policy ghost;
  ghost.pin_strict("nope");
  try {
    reg->select(spec(), ghost);
    FAIL("expected no_backend");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "backend 'nope'"));
    CHECK(contains(e.what(), "test_good_a"));
    CHECK(contains(e.what(), "test_good_b"));
  }

  // Per-layer override by glob and by regex.
  Policy layered = Policy::parse_toml(R"(
prefer = ["test_good_a"]
[[layer]]
match = "*.mlp.*"
pin = "test_good_b"
strict = true
[[layer]]
match = "re:.*\\.layers\\.3\\..*"
deny = ["test_good_a"]
)", "inline");
  CHECK(reg->select(spec("model.layers.0.self_attn.q_proj"), layered).backend->name() == "test_good_a");
  CHECK(reg->select(spec("model.layers.0.mlp.down_proj"), layered).backend->name() == "test_good_b");
  CHECK(reg->select(spec("model.layers.3.self_attn.o_proj"), layered).backend->name() == "test_good_b");
  // An unknown preferred backend is a note, not an error.
  Policy unknown;
  unknown.global.prefer = {"does_not_exist"};
  Selection u = reg->select(spec(), unknown);
  CHECK(u);
  REQUIRE(u.notes.size() == 1);
  CHECK(contains(u.notes[0], "does_not_exist"));
}

TEST_CASE("policy TOML errors name the key") {
  auto err = [](const std::string& text) {
    try { Policy::parse_toml(text, "p.toml"); } catch (const Error& e) { return std::string(e.what()); }
    return std::string();
  };
  CHECK(contains(err("prefer = 3"), "'prefer' must be a list of backend names"));
  CHECK(contains(err("pefer = [\"a\"]"), "unknown key 'pefer'"));
  CHECK(contains(err("[[layer]]\npin = \"a\""), "layer[0] needs 'match'"));
  CHECK(contains(err("[[layer]]\nmatch = \"re:([\""), "layer[0].match: invalid regular expression 're:(['"));
  CHECK(contains(err("strict = \"yes\""), "'strict' must be true or false"));
  CHECK(contains(err("prefer = ["), "TOML syntax error at line 1"));
}

TEST_CASE("plugin faults are errors for that call, with the plugin's message") {
  auto reg = test_registry();
  CanonicalLinear w = random_canonical(spec(), 5);
  try {
    reg->find("test_process_fails")->prepare(w);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::device);  // the plugin's NIBBLE_ERR_DEVICE
    CHECK(contains(e.what(), "layer 'model.layers.0.self_attn.q_proj'"));
    CHECK(contains(e.what(), "simulated device failure while uploading weights"));
  }
  try {
    reg->find("test_null_handle")->prepare(w);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "returned success but no handle"));
  }
}

TEST_CASE("a plugin library stays loaded while anything made from it is alive") {
  const std::string path = (plugin_dir() / "test_good_b.so").string();
  auto loaded = [&] {
    void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (h) dlclose(h);
    return h != nullptr;
  };
  LinearSpec s = spec("keepalive", 64);
  CanonicalLinear w = random_canonical(s, 9);
  Tensor x = random_activations(2, s.k, DType::f16, 10);
  std::shared_ptr<PreparedLinear> prepared;
  {
    auto reg = test_registry();
    prepared = reg->find("test_good_b")->prepare(w);
  }
  CHECK(loaded());
  Tensor y = prepared->apply(x);  // would crash if the library had been unloaded
  CHECK(compare_to_reference(y, reference_linear(w, x), reference_magnitude(w, x), DType::f16).ok);
  prepared.reset();
  CHECK_FALSE(loaded());
}

TEST_CASE("many threads selecting, preparing and applying agree with one thread") {
  auto reg = test_registry();
  LinearSpec s = spec("threads", 64);
  CanonicalLinear w = random_canonical(s, 21);
  Tensor x = random_activations(3, s.k, DType::f16, 22);
  auto shared = reg->select_or_throw(s)->prepare(w);
  const Tensor expect = shared->apply(x);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        auto b = reg->select_or_throw(s);
        auto own = b->prepare(w);
        for (const auto* p : {own.get(), shared.get()}) {
          Tensor y = p->apply(x);
          if (std::memcmp(y.data(), expect.data(), y.nbytes()) != 0) ++mismatches;
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(mismatches == 0);
}

namespace {

// A function the test plugin exports for the test to read its state (the plugin must be loaded).
template <class Fn>
Fn* plugin_symbol(const std::string& file, const char* name) {
  const std::string path = (plugin_dir() / file).string();
  void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  REQUIRE_MESSAGE(h, path, " is not loaded");
  void* f = dlsym(h, name);
  dlclose(h);
  REQUIRE_MESSAGE(f, name, " not exported by ", path);
  return reinterpret_cast<Fn*>(f);
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

bool any_contains(const std::vector<std::string>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& s) { return contains(s, needle); });
}

}  // namespace

TEST_CASE("a throwing timing callback is rethrown after the plugin's time_device has returned") {
  auto reg = test_registry();
  auto b = reg->find("test_good_b");
  REQUIRE(b);
  REQUIRE(b->has_device_timer());
  auto* returns = plugin_symbol<int()>("test_good_b.so", "nibble_test_timer_returns");
  const int before = returns();
  int calls = 0;
  try {
    // The plugin's time_device is noexcept: an exception crossing it would end this process.
    b->time_device([&](int32_t i) {
      ++calls;
      if (i == 1) throw Error(Errc::invalid_argument, "host callback failed at call 1");
    }, 5);
    FAIL("expected the callback's exception");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()) == "host callback failed at call 1");
  }
  CHECK(calls == 2);  // the calls after the throw were skipped
  CHECK(returns() == before + 1);
  // Any exception type comes through as itself.
  CHECK_THROWS_AS(b->time_device([](int32_t) { throw std::out_of_range("x"); }, 1), std::out_of_range);
  CHECK(returns() == before + 2);
  int good = 0;
  CHECK(b->time_device([&](int32_t) { ++good; }, 3) >= 0.0);
  CHECK(good == 3);
  // Without a device timer: an error saying so, not a silent host-clock number.
  auto a = reg->find("test_good_a");
  REQUIRE(!a->has_device_timer());
  try {
    a->time_device([](int32_t) {}, 1);
    FAIL("expected plugin_unsupported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::plugin_unsupported);
    CHECK(contains(e.what(), "test_good_a has no device timer"));
  }
}

TEST_CASE("the dense baseline is an object the plugin releases when it goes") {
  auto reg = test_registry();
  auto b = reg->find("test_good_b");
  REQUIRE(b->has_dense());
  CHECK_FALSE(reg->find("test_good_a")->has_dense());
  auto* live = plugin_symbol<int()>("test_good_b.so", "nibble_test_live_dense");
  LinearSpec s = spec("dense", 64);
  CanonicalLinear w = random_canonical(s, 3);
  // Scales of 2^-6 make every dequantized weight exact in f16, so the dense weight is the layer.
  for (int64_t i = 0; i < w.scales.numel(); ++i) w.scales.mutable_data_as<uint16_t>()[i] = float_to_f16(0.015625f);
  const Tensor x = random_activations(3, s.k, DType::f16, 4);
  {
    std::shared_ptr<DenseLinear> d = b->dense(s, dequantize(w).to(DType::f16));
    CHECK(live() == 1);
    DeviceBuffer dx = b->alloc(x.nbytes()), dy = b->alloc(std::size_t(3 * s.n) * 2);
    dx.upload(x.data(), x.nbytes());
    d->apply_device(dx.get(), dy.get(), 3);
    Tensor y = Tensor::zeros(DType::f16, {3, s.n});
    dy.download(y.mutable_data(), y.nbytes());
    CHECK(compare_to_reference(y, reference_linear(w, x), reference_magnitude(w, x), DType::f16).ok);
  }
  CHECK(live() == 0);
  // A weight of the wrong shape is refused before the plugin sees it, naming the tensor.
  try {
    b->dense(s, Tensor::zeros(DType::f16, {s.n, s.k}));
    FAIL("expected invalid_argument");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(contains(e.what(), "layer 'dense': dense baseline: tensor 'weight': expected f16 [256, 64], found f16 [64, 256]"));
  }
  try {
    reg->find("test_good_a")->dense(s, dequantize(w).to(DType::f16));
    FAIL("expected plugin_unsupported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::plugin_unsupported);
  }
}

TEST_CASE("each plugin status becomes its own error code") {
  auto reg = test_registry();
  auto b = reg->find("test_process_fails");
  CanonicalLinear w = random_canonical(spec(), 5);
  const std::pair<int32_t, Errc> cases[] = {
      {NIBBLE_ERR_INVALID_ARGUMENT, Errc::invalid_argument}, {NIBBLE_ERR_UNSUPPORTED, Errc::plugin_unsupported},
      {NIBBLE_ERR_NO_DEVICE, Errc::no_device},               {NIBBLE_ERR_OUT_OF_MEMORY, Errc::out_of_memory},
      {NIBBLE_ERR_DEVICE, Errc::device},                     {NIBBLE_ERR_INTERNAL, Errc::plugin},
      {1234, Errc::plugin}};
  for (auto [status, code] : cases) {
    ScopedEnv env("NIBBLE_TEST_FAULT_STATUS", std::to_string(status));
    try {
      b->prepare(w);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK_MESSAGE(e.code() == code, "status ", status, " gave ", errc_name(e.code()));
      CHECK(contains(e.what(), "simulated device failure while uploading weights"));
    }
  }
}

TEST_CASE("select_and_prepare falls back past a backend whose process_weights fails") {
  auto reg = test_registry();
  CanonicalLinear w = random_canonical(spec(), 6);
  const Tensor x = random_activations(2, w.spec.k, DType::f16, 7);

  Policy prefer;
  prefer.global.prefer = {"test_process_fails", "test_null_handle"};
  CHECK(reg->select(w.spec, prefer).backend->name() == "test_process_fails");
  PreparedSelection ps = reg->select_and_prepare(w, prefer);
  REQUIRE(ps);
  CHECK(ps.selection.backend->name() == "test_good_a");
  CHECK(ps.prepared->backend().name() == "test_good_a");
  CHECK(verdict(ps.selection, "test_process_fails")->verdict == Verdict::prepare_failed);
  CHECK(contains(verdict(ps.selection, "test_process_fails")->reason, "simulated device failure"));
  CHECK(verdict(ps.selection, "test_null_handle")->verdict == Verdict::prepare_failed);
  CHECK(contains(verdict(ps.selection, "test_null_handle")->reason, "returned success but no handle"));
  CHECK(verdict(ps.selection, "test_good_a")->verdict == Verdict::selected);
  CHECK(verdict(ps.selection, "test_good_b")->verdict == Verdict::viable);
  CHECK(contains(verdict(ps.selection, "test_good_b")->reason, "test_good_a came first"));
  CHECK(contains(ps.selection.trace(), "prepare failed"));
  CHECK(compare_to_reference(ps.prepared->apply(x), reference_linear(w, x), reference_magnitude(w, x), DType::f16).ok);

  // A strict pin has no other viable candidate: nothing is prepared, and the trace says why.
  Policy strict;
  strict.pin_strict("test_process_fails");
  PreparedSelection none = reg->select_and_prepare(w, strict);
  CHECK_FALSE(none);
  CHECK(none.selection.backend == nullptr);
  CHECK(verdict(none.selection, "test_process_fails")->verdict == Verdict::prepare_failed);
  CHECK(verdict(none.selection, "test_good_a")->verdict == Verdict::not_considered);
  CHECK(contains(none.selection.trace(), "simulated device failure while uploading weights"));

  // A malformed layer is an error of the call, never a reason to try the next backend.
  CanonicalLinear bad = random_canonical(spec(), 8);
  bad.scales = Tensor::zeros(DType::f16, {1, 1});
  CHECK_THROWS_AS(reg->select_and_prepare(bad, prefer), Error);
}

TEST_CASE("why plugins are missing reaches every selection trace") {
  const fs::path tmp = fs::temp_directory_path() / ("nibble_remarks_" + std::to_string(::getpid()));
  fs::create_directories(tmp / "open");
  fs::copy_file(plugin_dir() / "test_good_b.so", tmp / "open" / "test_good_b.so");
  fs::permissions(tmp / "open", fs::perms::all);
  DiscoveryOptions o;
  o.use_default_dirs = false;
  std::shared_ptr<Registry> reg;
  {
    ScopedEnv env("NIBBLE_PLUGIN_PATH", "relative/plugins:" + (tmp / "open").string());
    reg = Registry::discover(o);
  }
  fs::remove_all(tmp);
  CHECK(reg->backends().empty());
  const Selection sel = reg->select(spec());
  CHECK_FALSE(sel);
  CHECK(any_contains(sel.notes, "NIBBLE_PLUGIN_PATH entry 'relative/plugins' ignored"));
  CHECK(any_contains(sel.notes, "world-writable"));
  CHECK(any_contains(sel.notes, "no plugins in the search path"));
  const std::string trace = sel.trace();
  CHECK(contains(trace, "must be absolute paths"));
  CHECK(contains(trace, "(no backends were found)"));
  // A pin then names the reasons too.
  Policy pin;
  pin.pin_strict("cpu_w4a16");
  try {
    reg->select(spec(), pin);
    FAIL("expected no_backend");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "relative/plugins"));
    CHECK(contains(e.what(), "world-writable"));
  }
}

TEST_CASE("only files that could be plugins are recorded as skipped") {
  const fs::path tmp = fs::temp_directory_path() / ("nibble_candidates_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  fs::copy_file(plugin_dir() / "test_good_b.so", tmp / "test_good_b.so");
  fs::copy_file(plugin_dir() / "not_a_plugin.so", tmp / "not_a_plugin.so.1");     // versioned name
  fs::copy_file(plugin_dir() / "not_a_plugin.so", tmp / "shared_without_suffix");  // ELF shared object
  fs::copy_file(fs::read_symlink("/proc/self/exe"), tmp / "test_executable");      // an executable
  { std::ofstream(tmp / "libkernels.a") << "!<arch>\n"; }
  { std::ofstream(tmp / "README") << "not a plugin\n"; }
  { std::ofstream(tmp / "notes.so.txt") << "text\n"; }
  auto reg = test::hermetic_registry(tmp.string());
  fs::remove_all(tmp);
  REQUIRE(reg->backends().size() == 1);
  CHECK(reg->backends()[0]->name() == "test_good_b");
  std::vector<std::string> names;
  for (const auto& s : reg->skipped()) names.push_back(s.path.filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"not_a_plugin.so.1", "shared_without_suffix"});
  for (const auto& s : reg->skipped()) CHECK(contains(s.reason, "does not export nibble_plugin_entry"));
}
