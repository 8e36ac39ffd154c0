// Finding libnccl at run time (see nccl_loader.h).
#include "nccl_loader.h"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <vector>

namespace tp {
namespace {

std::vector<std::string> candidates() {
  std::vector<std::string> c;
  if (const char* e = std::getenv("NIBBLE_NCCL_LIBRARY"); e && *e) c.emplace_back(e);
  c.emplace_back("libnccl.so.2");
  std::vector<std::string> cuda_roots;
  if (const char* e = std::getenv("CUDA_HOME"); e && *e) cuda_roots.emplace_back(e);
  cuda_roots.emplace_back("/usr/local/cuda");
  for (const auto& r : cuda_roots)
    for (const char* lib :
         {"/lib64/libnccl.so.2", "/lib/libnccl.so.2", "/targets/x86_64-linux/lib/libnccl.so.2"})
      c.push_back(r + lib);
  // PyTorch's wheel depends on nvidia-nccl-cu*, which installs nvidia/nccl/lib/libnccl.so.2.
  std::vector<std::string> prefixes = {"/usr/lib/python3*", "/usr/local/lib/python3*",
                                       "/opt/conda/lib/python3*", "/opt/*/lib/python3*"};
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* e = std::getenv(env); e && *e)
      prefixes.insert(prefixes.begin(), std::string(e) + "/lib/python3*");
  if (const char* h = std::getenv("HOME"); h && *h)
    prefixes.push_back(std::string(h) + "/.local/lib/python3*");
  for (const auto& p : prefixes)
    for (const char* sp : {"/site-packages", "/dist-packages"}) {
      const std::string pattern = p + sp + "/nvidia/nccl/lib/libnccl.so.2";
      glob_t g{};
      if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (std::size_t i = 0; i < g.gl_pathc; ++i) c.emplace_back(g.gl_pathv[i]);
      else
        c.push_back(pattern);  // named in the message even where nothing matched
      globfree(&g);
    }
  return c;
}

template <class F>
bool resolve(void* h, const char* name, F& f) {
  f = reinterpret_cast<F>(dlsym(h, name));
  return f != nullptr;
}

}  // namespace

const Nccl* load_nccl(std::string* where) {
  static Nccl nccl;  // process lifetime: the library is never closed
  static bool loaded = false;
  if (loaded) return &nccl;
  std::string tried;
  for (const auto& path : candidates()) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      tried += "\n  " + path + ": " + (e ? e : "not loadable");
      continue;
    }
    Nccl n;
    if (!resolve(h, "ncclGetVersion", n.get_version) || !resolve(h, "ncclGetUniqueId", n.get_unique_id) ||
        !resolve(h, "ncclCommInitRank", n.comm_init_rank) || !resolve(h, "ncclCommDestroy", n.comm_destroy) ||
        !resolve(h, "ncclGetErrorString", n.error_string) || !resolve(h, "ncclAllGather", n.all_gather) ||
        !resolve(h, "ncclAllReduce", n.all_reduce)) {
      tried += "\n  " + path + ": loaded, but lacks one of the NCCL functions used";
      dlclose(h);
      continue;
    }
    n.path = path;
    nccl = n;
    loaded = true;
    return &nccl;
  }
  if (where) *where = tried;
  return nullptr;
}

}  // namespace tp
