// A host that forks after it has applied layers: the child must be able to apply them too (a
// plugin's worker threads do not survive a fork, and a lock held by one of them at the fork would
// hang the child), and give the same result, bit for bit; the parent goes on applying. Forks come
// while another thread of the parent applies, so that some land while a call is in flight.
//
// Under AddressSanitizer the forks wait for that thread to be between two calls: GCC 12's ASan
// runtime has no fork handler (LLVM's gained one in release 18), so a fork while another thread is
// inside ASan's allocator leaves its lock held in the child, which then hangs in ASan's malloc, not
// in nibble (CI saw it: the child's new team worker blocked on ASan's size-class mutex). The team's
// workers are still alive and spinning at each of those forks; the forks into a call in flight are
// the main build's run of this test.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define NIBBLE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NIBBLE_TEST_ASAN 1
#endif
#endif
#ifndef NIBBLE_TEST_ASAN
#define NIBBLE_TEST_ASAN 0
#endif

using namespace nibble;

std::string nibble::test::skip_reason() {
  if (test::env_or("NIBBLE_TEST_PLUGIN_DIRS").empty()) return "NIBBLE_TEST_PLUGIN_DIRS is not set";
  return {};
}

namespace {

// Applies every case once; the number that differ from what they gave before the threads started.
int mismatches(std::vector<test::SharedCase>& cases) {
  int bad = 0;
  for (auto& c : cases) {
    try {
      Tensor y = c.shared->apply(c.x);
      bad += std::memcmp(y.data(), c.expect.data(), y.nbytes()) != 0;
    } catch (const Error&) {
      ++bad;
    }
  }
  return bad;
}

// How a forked child ended: whether it hung (killed after the deadline) and its exit status (-1
// where it did not exit normally).
struct ChildEnd {
  bool hung = false;
  int code = -1;
};
ChildEnd wait_child(pid_t pid, int seconds) {
  int status = -1;
  pid_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while ((got = waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ChildEnd end;
  if (got != pid) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    end.hung = true;
    return end;
  }
  end.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return end;
}

}  // namespace

TEST_CASE("a forked child applies prepared layers, bit for bit as the parent did") {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  std::vector<test::SharedCase> cases = test::shared_cases(*reg);
  REQUIRE(!cases.empty());
  REQUIRE(mismatches(cases) == 0);
  constexpr bool between_calls = NIBBLE_TEST_ASAN;
  const std::string mode = between_calls ? "AddressSanitizer build: each fork waits until the other thread is between calls"
                                    : "each fork lands wherever the other thread's calls are";
  MESSAGE(mode);
  // hold: the round whose fork waits for the other thread (0: none); parked: the round it has
  // stopped for, between two calls.
  std::atomic<bool> stop{false};
  std::atomic<int> hold{0}, parked{0}, busy_bad{0};
  std::thread busy([&] {
    while (!stop) {
      if (const int round = hold.load(); round != 0) {
        parked = round;
        while (hold.load() == round) std::this_thread::yield();
      }
      busy_bad += mismatches(cases);
    }
  });
  for (int round = 0; round < 8; ++round) {
    if (between_calls) {
      hold = round + 1;
      while (parked.load() != round + 1) std::this_thread::yield();
    }
    const pid_t pid = fork();
    if (pid != 0) hold = 0;
    REQUIRE(pid >= 0);
    if (pid == 0) _exit(mismatches(cases) == 0 && mismatches(cases) == 0 ? 0 : 1);  // no doctest in the child
    const ChildEnd end = wait_child(pid, 60);
    CHECK_MESSAGE(!end.hung, "the child hung (killed after 60 s)");
    CHECK_MESSAGE(end.code == 0, "the child's results differ, or it failed");
    std::this_thread::sleep_for(std::chrono::milliseconds(round % 3));
  }
  stop = true;
  busy.join();
  CHECK(busy_bad == 0);
  CHECK(mismatches(cases) == 0);
}

// GNU libgomp cannot start OpenMP threads again in a child forked after its parent ran them (the
// child would wait for the parent's pool forever): the CPU plugin's oneDNN path and dense baseline
// must not be entered there. With every M sent to the oneDNN path (the option onednn_min_m = 1), a
// child forked after the parent ran it (and the dense baseline) must get the fused kernels' result,
// bit for bit, and a forced oneDNN path (NIBBLE_CPU_PATH=onednn) or the dense baseline an error
// that says why: never a hang.
namespace {
// Child exit codes of the case below.
enum ChildCode { kOk = 0, kFallbackDiffers = 2, kFallbackFailed, kForcedRan, kForcedWrongError, kDenseRan,
                 kDenseWrongError, kUnexpected, kNameWrong };
// The plugin's options are process-wide: back to their defaults however the case ends.
struct DefaultOptionsAfter {
  Backend& b;
  ~DefaultOptionsAfter() {
    try {
      b.set_option("onednn_min_m", "0");
      b.set_option("num_threads", "0");
    } catch (...) {
    }
  }
};
}  // namespace

TEST_CASE("a child forked after the CPU plugin's oneDNN path ran falls back to the fused kernels") {
  auto reg = test::hermetic_registry(test::env_or("NIBBLE_TEST_PLUGIN_DIRS"));
  std::shared_ptr<Backend> cpu;
  for (const auto& b : reg->backends())
    if (b->name() == "cpu_w4a16") cpu = b;
  const std::string expected = test::env_or("NIBBLE_TEST_CPU_PLUGIN");  // meson: "1" or "0"
  if (!cpu && expected != "1") {
    MESSAGE("no CPU plugin in NIBBLE_TEST_PLUGIN_DIRS (this build has none): nothing to check");
    CHECK(expected == "0");  // run by hand without saying so: not a pass
    return;
  }
  REQUIRE_MESSAGE(cpu, "the CPU plugin is built but not in NIBBLE_TEST_PLUGIN_DIRS");
  REQUIRE_MESSAGE(cpu->probe().available, "the CPU plugin is unavailable: " << cpu->probe().message);
  unsetenv("NIBBLE_CPU_PATH");
  DefaultOptionsAfter restore{*cpu};
  LinearSpec s;
  s.name = "fork.onednn";
  s.k = 512; s.n = 256; s.group_size = 128; s.weight_type = WeightType::uint4b8;
  s.act_dtype = DType::f16; s.scale_dtype = DType::f16;
  const CanonicalLinear w = random_canonical(s, 11);
  const int64_t m = 6;
  const Tensor x = random_activations(m, s.k, DType::f16, 12);
  cpu->set_option("num_threads", "2");  // an OpenMP region with threads to lose
  auto layer = cpu->prepare(w);
  cpu->set_option("onednn_min_m", "1000000");  // the fused kernels
  const std::string fused_name = layer->kernel_name(m);
  const Tensor fused = layer->apply(x);
  cpu->set_option("onednn_min_m", "1");  // the oneDNN path at every M
  REQUIRE(test::contains(layer->kernel_name(m), "onednn"));
  REQUIRE(!test::contains(fused_name, "onednn"));
  const Tensor onednn = layer->apply(x);  // OpenMP threads now run in this process
  // The dense baseline in bf16 where oneDNN runs it on this CPU (AVX-512), else in f32: either starts
  // OpenMP threads. A bf16 refusal must say why.
  std::shared_ptr<DenseLinear> dense;
  DType dense_dtype = DType::f32;
  LinearSpec ds = s;
  try {
    ds.act_dtype = DType::bf16;
    dense = cpu->dense(ds, random_activations(s.k, s.n, DType::bf16, 13));
    dense_dtype = DType::bf16;
  } catch (const Error& e) {
    REQUIRE_MESSAGE(e.code() == Errc::plugin_unsupported, e.what());
    REQUIRE_MESSAGE(test::contains(e.what(), "cannot create a bf16 matmul on this CPU"), e.what());
    MESSAGE("dense baseline in f32: " << e.what());
    ds.act_dtype = DType::f32;
    dense = cpu->dense(ds, random_activations(s.k, s.n, DType::f32, 13));
  }
  // Held to AVX2 (test fork_onednn_avx2), oneDNN has no bf16 matmul: the refusal above must have run.
  if (const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA"); isa && std::string(isa) == "AVX2")
    CHECK_MESSAGE(dense_dtype == DType::f32, "ONEDNN_MAX_CPU_ISA=AVX2, yet the bf16 dense baseline was built");
  const Tensor dx = random_activations(m, s.k, dense_dtype, 14);
  Tensor dy = random_activations(m, s.n, dense_dtype, 15);
  dense->apply_device(dx.data(), dy.mutable_data(), m);

  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // no doctest in the child: every outcome is an exit code
    int code = kOk;
    const auto first = [&](int c) { if (code == kOk) code = c; };
    try {
      if (layer->kernel_name(m) != fused_name) first(kNameWrong);
      try {
        const Tensor y = layer->apply(x);
        if (std::memcmp(y.data(), fused.data(), y.nbytes()) != 0) first(kFallbackDiffers);
      } catch (const Error&) {
        first(kFallbackFailed);
      }
      try {
        dense->apply_device(dx.data(), dy.mutable_data(), m);
        first(kDenseRan);
      } catch (const Error& e) {
        if (e.code() != Errc::plugin_unsupported || !test::contains(e.what(), "dense baseline cannot run"))
          first(kDenseWrongError);
      }
      setenv("NIBBLE_CPU_PATH", "onednn", 1);
      cpu->set_option("onednn_min_m", "0");  // the environment's demand in force
      try {
        (void)layer->apply(x);
        first(kForcedRan);
      } catch (const Error& e) {
        if (e.code() != Errc::plugin_unsupported || !test::contains(e.what(), "NIBBLE_CPU_PATH=onednn") ||
            !test::contains(e.what(), "forked"))
          first(kForcedWrongError);
      }
    } catch (...) {
      first(kUnexpected);
    }
    _exit(code);
  }
  const ChildEnd end = wait_child(pid, 20);
  REQUIRE_MESSAGE(!end.hung, "the child hung (killed after 20 s): it entered OpenMP after the fork");
  const int code = end.code;
  CHECK_MESSAGE(code != kNameWrong, "the child's kernel name is not the fused kernel's");
  CHECK_MESSAGE(code != kFallbackDiffers, "the child's fallback differs from the fused kernels' result");
  CHECK_MESSAGE(code != kFallbackFailed, "the child's call failed instead of falling back");
  CHECK_MESSAGE(code != kDenseRan, "the dense baseline ran OpenMP in the child");
  CHECK_MESSAGE(code != kDenseWrongError, "the dense baseline failed without saying why, or as another error");
  CHECK_MESSAGE(code != kForcedRan, "the forced oneDNN path ran in the child");
  CHECK_MESSAGE(code != kForcedWrongError, "the forced oneDNN path failed without saying why, or as another error");
  CHECK_MESSAGE(code != kUnexpected, "the child threw where nothing should");
  CHECK(code == kOk);
  // The parent keeps its OpenMP threads and its oneDNN path.
  const Tensor again = layer->apply(x);
  CHECK(std::memcmp(again.data(), onednn.data(), again.nbytes()) == 0);
}
