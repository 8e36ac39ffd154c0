#include "numa_placement.h"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "thread_team.h"

namespace nibble::cpu {

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    while (!item.empty() && (item.back() == '\n' || item.back() == ' ')) item.pop_back();
    if (item.empty()) continue;
    char* end = nullptr;
    const long lo = std::strtol(item.c_str(), &end, 10);
    long hi = lo;
    if (end == item.c_str() || lo < 0) return {};
    if (*end == '-') {
      const char* rest = end + 1;
      hi = std::strtol(rest, &end, 10);
      if (end == rest || hi < lo) return {};
    }
    if (*end) return {};
    for (long c = lo; c <= hi && c < 65536; ++c) out.push_back(int(c));
  }
  return out;
}

std::vector<NumaNode> numa_nodes(const std::string& sysfs, const std::vector<int>& allowed) {
  std::vector<NumaNode> nodes;
  DIR* dir = opendir(sysfs.c_str());
  if (!dir) return nodes;
  while (const dirent* e = readdir(dir)) {
    const char* name = e->d_name;
    if (std::strncmp(name, "node", 4) != 0 || !name[4]) continue;
    char* end = nullptr;
    const long id = std::strtol(name + 4, &end, 10);
    if (*end || id < 0) continue;
    std::ifstream f(sysfs + "/" + name + "/cpulist");
    std::string text;
    std::getline(f, text);
    NumaNode n{int(id), {}};
    for (int c : parse_cpu_list(text))
      if (allowed.empty() || std::find(allowed.begin(), allowed.end(), c) != allowed.end())
        n.cpus.push_back(c);
    if (!n.cpus.empty()) nodes.push_back(std::move(n));
  }
  closedir(dir);
  std::sort(nodes.begin(), nodes.end(), [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return nodes;
}

const std::vector<NumaNode>& process_numa_nodes() {
  static const std::vector<NumaNode> nodes = [] {
    std::vector<int> allowed;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) allowed.push_back(c);
    std::vector<NumaNode> n = numa_nodes("/sys/devices/system/node", allowed);
    if (n.size() > 1) {
      std::vector<std::vector<int>> placement;
      for (const auto& node : n) placement.push_back(node.cpus);
      ThreadTeam::process().set_placement(std::move(placement));
    }
    return n;
  }();
  return nodes;
}

std::vector<int> members_per_node(int threads) {
  const size_t n = std::max<size_t>(1, process_numa_nodes().size());
  std::vector<int> count(n, 0);
  if (n == 1) {
    count[0] = threads;
    return count;
  }
  for (int i = 1; i < threads; ++i) ++count[size_t(i - 1) % n];  // ThreadTeam::node_of
  return count;
}

std::string place_codes(const CpuWeights& w, const std::vector<int64_t>& node_tiles,
                        const std::vector<NumaNode>& nodes) {
  if (nodes.size() < 2 || node_tiles.size() != nodes.size() + 1 || w.q.empty()) return "";
  const auto base = uintptr_t(w.q.data());
  const size_t bytes = w.q.size() * sizeof(uint32_t);
  // The allocation's pages: 2 MiB ones from 2 MiB on (stream_alloc), else 4 KiB.
  const uintptr_t page = bytes >= (size_t(2) << 20) ? uintptr_t(2) << 20 : 4096;
  const auto tile_at = [&](int64_t t) { return base + uintptr_t(t * w.tile_words()) * sizeof(uint32_t); };
  for (size_t j = 0; j < nodes.size(); ++j) {
    const uintptr_t lo = (tile_at(node_tiles[j]) + page - 1) / page * page;
    const uintptr_t hi = j + 1 == nodes.size() ? (base + bytes) / page * page
                                               : (tile_at(node_tiles[j + 1]) + page - 1) / page * page;
    if (hi <= lo) continue;
    constexpr int kMaxNodes = 1024;
    unsigned long mask[kMaxNodes / (8 * sizeof(unsigned long))] = {};
    const int id = nodes[j].id;
    if (id >= kMaxNodes) continue;
    mask[size_t(id) / (8 * sizeof(unsigned long))] |= 1ul << (size_t(id) % (8 * sizeof(unsigned long)));
    constexpr int kMpolPreferred = 1, kMpolMfMove = 1 << 1;  // <linux/mempolicy.h>
    if (syscall(SYS_mbind, lo, hi - lo, kMpolPreferred, mask, kMaxNodes + 1, kMpolMfMove) != 0)
      return std::string("mbind: ") + std::strerror(errno);
  }
  return "";
}

}  // namespace nibble::cpu
