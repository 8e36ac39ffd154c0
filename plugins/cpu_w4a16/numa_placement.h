// NUMA placement for the CPU plugin: which nodes this process runs on, the team's workers spread
// over them, and each node's share of a layer's codes moved to that node, so that a worker reads
// the weights from its own node's memory. On a machine of one node (or where Linux does not say)
// none of this does anything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cpu_weights.h"

namespace nibble::cpu {

/// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}; an empty list for text that is not such a list.
std::vector<int> parse_cpu_list(const std::string& text);

/// One NUMA node this process may run on: its number and its CPUs that the process's affinity
/// allows.
struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
};
/// The nodes of `sysfs` (node<N>/cpulist files) with CPUs in `allowed` (empty: any), in order of
/// their numbers; nodes without such CPUs are left out.
std::vector<NumaNode> numa_nodes(const std::string& sysfs, const std::vector<int>& allowed);
/// The nodes of this machine for this process (/sys/devices/system/node, sched_getaffinity),
/// read once; set up the plugin's team to spread its workers over them where there are two or
/// more.
const std::vector<NumaNode>& process_numa_nodes();

/// Per node of process_numa_nodes(), how many of a call's `threads` members run there (member 0,
/// the caller, on none): the weights that placement gives each node.
std::vector<int> members_per_node(int threads);

/// Moves the codes of w's tiles [node_tiles[j], node_tiles[j + 1]) to node j of `nodes` (whole
/// pages only: a page shared by two ranges stays where it is). Returns "" or why it failed (the
/// weights are then left where they were, which costs speed only).
std::string place_codes(const CpuWeights& w, const std::vector<int64_t>& node_tiles,
                        const std::vector<NumaNode>& nodes);

}  // namespace nibble::cpu
