// nibble bench: kernel timings against the roofline and the plugin's dense baseline, measured in
// the same run (see docs/benchmarks.md for the method).
#pragma once

#include <string>
#include <vector>

#include "cli.h"

namespace nibble::cli {

struct BenchOptions {
  std::string backends;     ///< --backend a,b (default: the registry's choice)
  std::string shapes = "llama3-8b,llama3-70b";  ///< preset names or KxN,KxN
  std::string m_list = "1,2,4,8,16,32,64,128,256,1024";
  int group = 128;
  int bits = 4;             ///< weight bits (2, 3, 4, 8): the roofline counts K*N*bits/8 bytes of codes
  std::string dtype;        ///< default: bf16 on CPUs, f16 on GPUs
  bool asym = false;
  int iters = 0;            ///< 0: adaptive
  double rotate_mb = 256;   ///< weight copies rotated so their total exceeds this (beats any cache)
  double budget_s = 0.5;    ///< adaptive timing budget per point
  std::string json_path, svg_path;
  std::string from_json;    ///< --from-json FILE: draw --svg from a saved run instead of measuring
  bool no_dense = false;
  std::string threads;      ///< --threads 16,2: each thread count in turn (the backend's num_threads option)
  std::string command_line; ///< recorded with the results
};

int cmd_bench(const CommonOptions& o, const BenchOptions& b);

/// One measured point.
struct BenchPoint {
  std::string backend, shape, kernel;
  int64_t k = 0, n = 0, m = 0;
  int threads = 0;  ///< --threads value it ran with, 0: the backend's default
  double time_us = 0, roofline_us = 0, dense_us = 0;  ///< dense_us = 0: no baseline
  double gbps = 0, gflops = 0;
  bool checked = false, check_ok = false;
  double check_err_over_tol = 0;
};

/// Draws % of roofline against M, one panel per shape, one line per backend and baseline.
std::string bench_svg(const std::vector<BenchPoint>& points, const std::string& title);

}  // namespace nibble::cli
