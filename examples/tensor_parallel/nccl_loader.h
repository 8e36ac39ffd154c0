// NCCL through dlopen: nothing links it at build time, so the example builds where the CUDA toolkit
// is and runs wherever a libnccl.so.2 can be found (the CUDA installation, the copy PyTorch ships,
// or NIBBLE_NCCL_LIBRARY). Only declarations come from nccl.h.
#pragma once

#include <nccl.h>

#include <string>

namespace tp {

struct Nccl {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  std::string path;  // the file that was loaded
};

/// The first libnccl that loads with every function above, from: $NIBBLE_NCCL_LIBRARY; the
/// dynamic loader's search path (libnccl.so.2); the CUDA installation ($CUDA_HOME, /usr/local/cuda,
/// lib64 and lib); PyTorch's nvidia/nccl/lib in the site-packages of the usual Python prefixes.
/// nullptr with *where set to every place looked at and why each failed.
const Nccl* load_nccl(std::string* where);

}  // namespace tp
