// Tensor parallelism over W GPUs, one process per rank, checked against the unsplit layers.
//
//   tensor_parallel --model DIR [--world W] [--m M] [--iters N] [--plugin-dir DIR]
//   tensor_parallel --find-nccl       (where NCCL is found, or every place looked at; no GPU needed)
//
// Started without --rank it is the launcher: it finds a GPU (none: SKIP, exit 77) and NCCL (none:
// FAIL naming every place it looked), makes the NCCL unique id, writes it to a file and starts W
// copies of itself with --rank r --nccl-id FILE, then waits for them. Each rank prepares only its
// partition of every quantized layer of DIR on GPU `rank` through the C API (nibble_host_prepare
// with parallel/rank/world; the core's sharding slices the weights before anything reaches the
// device) on cuda_w4a16, and runs it as a Llama block does: q/k/v/gate/up column-parallel followed
// by an all-gather, o/down row-parallel (x's slice of K) followed by an all-reduce (a layer of
// another name runs both ways). Rank 0 also prepares each layer unsplit, and checks the combined
// y against it and against the reference (x times nibble's dequantized weight, in double),
// printing per layer the errors, PASS or FAIL and the time per call at this W.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "nccl_loader.h"
#include "nibble/nibble_c.h"

namespace {

constexpr int kSkip = 77;

struct Args {
  std::string model, plugin_dir, nccl_id;
  int world = 1, rank = -1, m = 16, iters = 20;
  bool find_nccl = false;
};

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "FAIL: %s\n", msg.c_str());
  std::exit(1);
}

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(e));
}

void nccl_ok(const tp::Nccl& n, ncclResult_t r, const char* what) {
  if (r != ncclSuccess) die(std::string(what) + ": " + n.error_string(r));
}

// The message of a failed C API call (and frees it); "" for success.
std::string message_of(nibble_host_error* e) {
  if (!e) return {};
  std::string m =
      std::string(nibble_host_status_name(nibble_host_error_status(e))) + ": " + nibble_host_error_message(e);
  nibble_host_error_free(e);
  return m;
}

void nibble_ok(nibble_host_error* e, const char* what) {
  if (e) die(std::string(what) + ": " + message_of(e));
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(k + " needs a value");
      return argv[++i];
    };
    if (k == "--model")
      a.model = value();
    else if (k == "--plugin-dir")
      a.plugin_dir = value();
    else if (k == "--world")
      a.world = std::atoi(value().c_str());
    else if (k == "--m")
      a.m = std::atoi(value().c_str());
    else if (k == "--iters")
      a.iters = std::atoi(value().c_str());
    else if (k == "--rank")
      a.rank = std::atoi(value().c_str());
    else if (k == "--nccl-id")
      a.nccl_id = value();
    else if (k == "--find-nccl")
      a.find_nccl = true;
    else
      die("unknown argument '" + k +
          "' (usage: --model DIR [--world W] [--m M] [--iters N] [--plugin-dir DIR])");
  }
  if (a.model.empty() && !a.find_nccl) die("--model DIR is required");
  if (a.world < 1 || a.m < 1 || a.iters < 1) die("--world, --m and --iters must be positive");
  return a;
}

// ---- the launcher -------------------------------------------------------------------------------

int launch(const Args& a, int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return kSkip;
  }
  if (a.world > devices)
    die("--world " + std::to_string(a.world) + " needs one GPU per rank; this machine has " +
        std::to_string(devices));
  std::string where;
  const tp::Nccl* nccl = tp::load_nccl(&where);
  if (!nccl)
    die("no NCCL library could be loaded (set NIBBLE_NCCL_LIBRARY to a libnccl.so.2); looked in:" + where);
  int version = 0;
  nccl->get_version(&version);
  std::printf("NCCL %d from %s; W = %d ranks on %d of %d GPUs\n", version, nccl->path.c_str(), a.world,
              a.world, devices);
  std::fflush(stdout);
  // The id holds the address of a bootstrap thread of this process, which lives until the ranks
  // have connected: the launcher waits for them below.
  ncclUniqueId id;
  nccl_ok(*nccl, nccl->get_unique_id(&id), "ncclGetUniqueId");
  char path[] = "/tmp/nibble-tp-id-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0 || write(fd, &id, sizeof id) != ssize_t(sizeof id))
    die(std::string("writing the NCCL id to ") + path);
  close(fd);
  std::vector<pid_t> pids;
  for (int r = 0; r < a.world; ++r) {
    std::vector<std::string> args(argv, argv + argc);
    args.insert(args.end(), {"--rank", std::to_string(r), "--nccl-id", path});
    std::vector<char*> cargs;
    for (auto& s : args) cargs.push_back(s.data());
    cargs.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) die("fork failed");
    if (pid == 0) {
      execv("/proc/self/exe", cargs.data());
      std::perror("execv /proc/self/exe");
      _exit(127);
    }
    pids.push_back(pid);
  }
  int worst = 0;
  for (std::size_t r = 0; r < pids.size(); ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc) std::fprintf(stderr, "rank %zu exited with %d\n", r, rc);
    if (rc && !worst) worst = rc;
  }
  unlink(path);
  return worst;
}

// ---- a rank -------------------------------------------------------------------------------------

enum class Split { column, row };

const char* split_name(Split s) { return s == Split::column ? "column" : "row"; }

bool ends_with(const std::string& s, const char* suffix) {
  const std::size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// A Llama block's split of each projection; a layer of another name runs both ways.
std::vector<Split> splits_of(const std::string& name) {
  for (const char* c : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})
    if (ends_with(name, c)) return {Split::column};
  for (const char* r : {"o_proj", "down_proj"})
    if (ends_with(name, r)) return {Split::row};
  return {Split::column, Split::row};
}

// Deterministic activations, the same on every rank: multiples of 1/16 in [-1, 1] (exact in f16).
std::vector<__half> activations(int64_t m, int64_t k) {
  std::vector<__half> x(std::size_t(m * k));
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (auto& v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = __float2half(float(int((s >> 33) % 33) - 16) / 16.0f);
  }
  return x;
}

DLTensor device_tensor(void* data, int64_t* shape, int device) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{kDLCUDA, device};
  t.ndim = 2;
  t.dtype = DLDataType{kDLFloat, 16, 1};
  t.shape = shape;
  return t;
}

struct Reference {
  std::vector<double> y, mag;  // x W and |x| |W| in double, [M, N]
};

// y and the magnitude from nibble's dequantized weight (float32 [K, N], rounded once), threaded over N.
Reference reference(nibble_host_checkpoint* ck, const char* layer, const std::vector<__half>& x, int64_t m,
                    int64_t k, int64_t n) {
  std::vector<float> w(std::size_t(k * n));
  int64_t shape[2] = {k, n};
  DLTensor t{};
  t.data = w.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = shape;
  nibble_ok(nibble_host_checkpoint_dequantize(ck, layer, &t), "dequantize");
  std::vector<double> xd(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xd[i] = __half2float(x[i]);
  Reference r{std::vector<double>(std::size_t(m * n)), std::vector<double>(std::size_t(m * n))};
  const int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t_i = 0; t_i < threads; ++t_i)
    pool.emplace_back([&, t_i] {
      const int64_t n0 = n * t_i / threads, n1 = n * (t_i + 1) / threads;
      std::vector<double> acc(std::size_t(n1 - n0)), mag(std::size_t(n1 - n0));
      for (int64_t i = 0; i < m; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        std::fill(mag.begin(), mag.end(), 0.0);
        for (int64_t kk = 0; kk < k; ++kk) {
          const double xv = xd[std::size_t(i * k + kk)];
          if (xv == 0) continue;
          const float* wr = &w[std::size_t(kk * n)];
          for (int64_t j = n0; j < n1; ++j) {
            acc[std::size_t(j - n0)] += xv * wr[j];
            mag[std::size_t(j - n0)] += std::fabs(xv * wr[j]);
          }
        }
        for (int64_t j = n0; j < n1; ++j) {
          r.y[std::size_t(i * n + j)] = acc[std::size_t(j - n0)];
          r.mag[std::size_t(i * n + j)] = mag[std::size_t(j - n0)];
        }
      }
    });
  for (auto& th : pool) th.join();
  return r;
}

// Worst |y - ref| / tolerance under nibble's rule for f16 (reference.h): 2^-11 |ref| + 2^-10 mag,
// plus, for a row-parallel sum, the rounding of each of the W - 1 partial sums the all-reduce makes
// in f16 (2^-11 of at most mag each).
double worst_ratio(const std::vector<__half>& y, const Reference& r, int extra_roundings) {
  double worst = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double tol = std::ldexp(std::fabs(r.y[i]), -11) +
                       (std::ldexp(1.0, -10) + extra_roundings * std::ldexp(1.0, -11)) * r.mag[i] + 1e-30;
    worst = std::max(worst, std::fabs(double(__half2float(y[i])) - r.y[i]) / tol);
  }
  return worst;
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Microseconds per call of f() on `stream`, after a warm-up call.
  template <class F>
  double per_call_us(cudaStream_t stream, int iters, F&& f) {
    f();
    cuda_ok(cudaEventRecord(a, stream), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) f();
    cuda_ok(cudaEventRecord(b, stream), "cudaEventRecord");
    cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return 1000.0 * ms / iters;
  }
};

int run_rank(const Args& a) {
  std::string where;
  const tp::Nccl* nccl = tp::load_nccl(&where);
  if (!nccl) die("rank " + std::to_string(a.rank) + ": no NCCL library could be loaded; looked in:" + where);
  ncclUniqueId id;
  const int fd = open(a.nccl_id.c_str(), O_RDONLY);
  if (fd < 0 || read(fd, &id, sizeof id) != ssize_t(sizeof id)) die("reading the NCCL id from " + a.nccl_id);
  close(fd);
  const int dev = a.rank;
  cuda_ok(cudaSetDevice(dev), "cudaSetDevice");
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  ncclComm_t comm;
  nccl_ok(*nccl, nccl->comm_init_rank(&comm, a.world, id, a.rank), "ncclCommInitRank");

  nibble_host_registry* reg = nullptr;
  const char* dirs[1] = {a.plugin_dir.c_str()};
  nibble_host_discovery d{sizeof d, a.plugin_dir.empty() ? nullptr : dirs, a.plugin_dir.empty() ? 0u : 1u,
                          a.plugin_dir.empty() ? 1 : 0, a.plugin_dir.empty() ? 1 : 0};
  nibble_ok(nibble_host_registry_discover(&d, &reg), "discover");
  nibble_host_policy* pol = nullptr;
  nibble_ok(nibble_host_policy_new(&pol), "policy");
  nibble_ok(nibble_host_policy_pin(pol, "cuda_w4a16", 1), "pin cuda_w4a16");
  nibble_host_checkpoint* ck = nullptr;
  nibble_ok(nibble_host_checkpoint_open(a.model.c_str(), &ck), "open the checkpoint");

  int passed = 0, failed = 0, not_run = 0;
  Timer timer;
  int32_t* flag = nullptr;  // every rank's verdict on a partition, all-reduced (min) so all go on together
  cuda_ok(cudaMalloc(&flag, sizeof(int32_t)), "cudaMalloc");
  for (std::size_t li = 0; li < nibble_host_checkpoint_num_layers(ck); ++li) {
    nibble_host_layer_info info{};
    info.struct_size = sizeof info;
    nibble_ok(nibble_host_checkpoint_layer(ck, li, &info), "layer info");
    if (info.status != NIBBLE_HOST_LAYER_QUANTIZED) continue;
    const std::string name = info.name;
    const int64_t k = info.k, n = info.n, m = a.m;
    for (Split split : splits_of(name)) {
      nibble_host_layer_options o{};
      o.struct_size = sizeof o;
      o.policy = pol;
      o.act_dtype = NIBBLE_DTYPE_F16;
      o.device_type = kDLCUDA;
      o.device_id = dev;
      o.stream = stream;
      o.parallel = split == Split::column ? NIBBLE_PARALLEL_COLUMN : NIBBLE_PARALLEL_ROW;
      o.rank = a.rank;
      o.world = a.world;
      nibble_host_linear* part = nullptr;
      const std::string why = message_of(nibble_host_prepare(reg, ck, name.c_str(), &o, &part, nullptr));
      int32_t ok_here = part ? 1 : 0, ok_all = 0;
      cuda_ok(cudaMemcpyAsync(flag, &ok_here, sizeof ok_here, cudaMemcpyHostToDevice, stream), "upload");
      nccl_ok(*nccl, nccl->all_reduce(flag, flag, 1, ncclInt32, ncclMin, comm, stream),
              "ncclAllReduce (verdicts)");
      cuda_ok(cudaMemcpyAsync(&ok_all, flag, sizeof ok_all, cudaMemcpyDeviceToHost, stream), "download");
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      if (!ok_all) {
        if (a.rank == 0 || !part)
          std::printf("NOT RUN W=%d %s %s-parallel: rank %d: %s\n", a.world, name.c_str(), split_name(split),
                      a.rank, part ? "another rank could not prepare its partition" : why.c_str());
        nibble_host_linear_free(part);
        ++not_run;
        continue;
      }
      nibble_linear_spec ps{};
      ps.struct_size = sizeof ps;
      nibble_ok(nibble_host_linear_spec(part, &ps), "partition spec");
      const int64_t pk = ps.k, pn = ps.n;

      const std::vector<__half> x = activations(m, k);
      std::vector<__half> xs(std::size_t(m * pk));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < pk; ++j)
          xs[std::size_t(i * pk + j)] = x[std::size_t(i * k + (split == Split::row ? a.rank * pk : 0) + j)];
      __half *dx = nullptr, *dy = nullptr, *dall = nullptr;
      cuda_ok(cudaMalloc(&dx, xs.size() * sizeof(__half)), "cudaMalloc x");
      cuda_ok(cudaMalloc(&dy, std::size_t(m * pn) * sizeof(__half)), "cudaMalloc y");
      cuda_ok(cudaMalloc(&dall, std::size_t(m * n) * sizeof(__half)), "cudaMalloc combined y");
      cuda_ok(cudaMemcpyAsync(dx, xs.data(), xs.size() * sizeof(__half), cudaMemcpyHostToDevice, stream),
              "upload x");
      int64_t sx[2] = {m, pk}, sy[2] = {m, pn};
      DLTensor tx = device_tensor(dx, sx, dev), ty = device_tensor(dy, sy, dev);
      auto apply = [&] { nibble_ok(nibble_host_linear_apply(part, &tx, &ty, stream), "apply"); };
      auto combine = [&] {
        if (split == Split::column)  // rank-major [W, M, N/W] into dall
          nccl_ok(*nccl, nccl->all_gather(dy, dall, std::size_t(m * pn), ncclHalf, comm, stream),
                  "ncclAllGather");
        else
          nccl_ok(*nccl, nccl->all_reduce(dy, dall, std::size_t(m * n), ncclHalf, ncclSum, comm, stream),
                  "ncclAllReduce");
      };
      apply();
      combine();
      std::vector<__half> got(std::size_t(m * n)), staged(std::size_t(m * n));
      cuda_ok(cudaMemcpyAsync(staged.data(), dall, staged.size() * sizeof(__half), cudaMemcpyDeviceToHost,
                              stream),
              "download");
      cuda_ok(cudaStreamSynchronize(stream), "sync");
      if (split == Split::column) {
        for (int r = 0; r < a.world; ++r)
          for (int64_t i = 0; i < m; ++i)
            std::memcpy(&got[std::size_t(i * n + r * pn)], &staged[std::size_t((r * m + i) * pn)],
                        std::size_t(pn) * sizeof(__half));
      } else {
        got = staged;
      }
      // Timing: every rank runs the same calls, so the collectives pair up.
      const double apply_us = timer.per_call_us(stream, a.iters, apply);
      const double total_us = timer.per_call_us(stream, a.iters, [&] {
        apply();
        combine();
      });

      if (a.rank == 0) {
        nibble_host_layer_options wo = o;
        wo.parallel = NIBBLE_PARALLEL_NONE;
        wo.rank = 0;
        wo.world = 0;
        nibble_host_linear* whole = nullptr;
        nibble_ok(nibble_host_prepare(reg, ck, name.c_str(), &wo, &whole, nullptr),
                  "prepare the unsplit layer");
        __half *wx = nullptr, *wy = nullptr;
        cuda_ok(cudaMalloc(&wx, x.size() * sizeof(__half)), "cudaMalloc");
        cuda_ok(cudaMalloc(&wy, std::size_t(m * n) * sizeof(__half)), "cudaMalloc");
        cuda_ok(cudaMemcpyAsync(wx, x.data(), x.size() * sizeof(__half), cudaMemcpyHostToDevice, stream),
                "upload");
        int64_t swx[2] = {m, k}, swy[2] = {m, n};
        DLTensor twx = device_tensor(wx, swx, dev), twy = device_tensor(wy, swy, dev);
        auto apply_whole = [&] {
          nibble_ok(nibble_host_linear_apply(whole, &twx, &twy, stream), "apply unsplit");
        };
        apply_whole();
        std::vector<__half> unsplit(std::size_t(m * n));
        cuda_ok(cudaMemcpyAsync(unsplit.data(), wy, unsplit.size() * sizeof(__half), cudaMemcpyDeviceToHost,
                                stream),
                "download");
        cuda_ok(cudaStreamSynchronize(stream), "sync");
        const double whole_us = timer.per_call_us(stream, a.iters, apply_whole);
        const Reference ref = reference(ck, name.c_str(), x, m, k, n);
        double max_diff = 0, max_y = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          max_diff = std::max(max_diff, double(std::fabs(__half2float(got[i]) - __half2float(unsplit[i]))));
          max_y = std::max(max_y, std::fabs(ref.y[i]));
        }
        const double r_split = worst_ratio(got, ref, split == Split::row ? a.world - 1 : 0);
        const double r_whole = worst_ratio(unsplit, ref, 0);
        const bool ok = r_split <= 1 && r_whole <= 1 && std::isfinite(max_diff);
        (ok ? passed : failed)++;
        std::printf(
            "%s W=%d %s %s-parallel [%lld x %lld] part [%lld x %lld] M=%lld: max |combined - unsplit| %.3g "
            "(max |y| %.3g); vs reference: combined %.2fx, unsplit %.2fx tolerance\n",
            ok ? "PASS" : "FAIL", a.world, name.c_str(), split_name(split), (long long)k, (long long)n,
            (long long)pk, (long long)pn, (long long)m, max_diff, max_y, r_split, r_whole);
        std::printf(
            "TIME W=%d %s %s-parallel M=%lld: apply %.2f us, apply + %s %.2f us per call; unsplit on one GPU "
            "%.2f us\n",
            a.world, name.c_str(), split_name(split), (long long)m, apply_us,
            split == Split::column ? "all-gather" : "all-reduce", total_us, whole_us);
        std::fflush(stdout);
        cudaFree(wx);
        cudaFree(wy);
        nibble_host_linear_free(whole);
      }
      cudaFree(dx);
      cudaFree(dy);
      cudaFree(dall);
      nibble_host_linear_free(part);
    }
  }
  cudaFree(flag);
  nccl->comm_destroy(comm);
  nibble_host_checkpoint_free(ck);
  nibble_host_policy_free(pol);
  nibble_host_registry_free(reg);
  if (a.rank != 0) return 0;
  std::printf("W=%d %s: %d passed, %d failed, %d not run\n", a.world, a.model.c_str(), passed, failed,
              not_run);
  return failed ? 1 : (passed ? 0 : 2);
}

}  // namespace

int find_nccl() {
  std::string where;
  const tp::Nccl* nccl = tp::load_nccl(&where);
  if (!nccl) {
    std::printf("no NCCL library could be loaded; looked in:%s\n", where.c_str());
    return 1;
  }
  int version = 0;
  nccl->get_version(&version);
  std::printf("NCCL %d from %s\n", version, nccl->path.c_str());
  return 0;
}

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.find_nccl) return find_nccl();
  return a.rank < 0 ? launch(a, argc, argv) : run_rank(a);
}
