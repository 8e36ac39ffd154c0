// Tests of how apply cuts up and hands out its work (work_split.h) and of the NUMA placement logic
// (numa_placement.h), plain C++ on any CPU (and under ThreadSanitizer): every tile of every K
// slice is handed out exactly once whatever the team, the nodes and the interleaving; slices cut
// at segments; a node's tiles go to its own members first; a fake sysfs tree gives the nodes; the
// codes' pages move with mbind (to this machine's one node, where it has one).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "numa_placement.h"
#include "test_util.h"
#include "work_split.h"

using namespace nibble::cpu;

std::string nibble::test::skip_reason() { return {}; }

namespace {

// A layer of `tiles` tiles and `segments` segments of `seg_lines` lines (the fields the split reads).
CpuWeights layer(int64_t tiles, int64_t segments, int64_t seg_lines) {
  CpuWeights w;
  w.tiles = tiles;
  w.n = tiles * kTileN;
  w.lines = segments * seg_lines;
  for (int64_t s = 0; s <= segments; ++s) w.seg_line.push_back(s * seg_lines);
  w.seg_group.assign(size_t(segments), 0);
  return w;
}

// Members take ranges concurrently (threads) and record them; every (slice, tile) must be seen once.
void check_cover(const WorkQueue::Params& p, const std::vector<int>& nodes_of_members) {
  std::vector<int> per_node;
  for (int n : nodes_of_members)
    if (n >= 0) {
      if (per_node.size() <= size_t(n)) per_node.resize(size_t(n) + 1, 0);
      ++per_node[size_t(n)];
    }
  if (!p.node_tiles.empty()) per_node.resize(p.node_tiles.size() - 1, 0);
  WorkQueue q(p, per_node);
  std::vector<std::atomic<int>> seen(size_t(p.tiles * p.slices));
  std::atomic<int> bad_ranges{0};
  std::vector<std::thread> members;
  for (int node : nodes_of_members)
    members.emplace_back([&, node] {
      for (WorkRange r; q.next(node, r);) {
        if (r.t0 >= r.t1 || r.t0 < 0 || r.t1 > p.tiles || r.slice < 0 || r.slice >= p.slices)
          ++bad_ranges;
        else
          for (int64_t t = r.t0; t < r.t1; ++t) seen[size_t(r.slice * p.tiles + t)].fetch_add(1);
      }
    });
  for (auto& t : members) t.join();
  CHECK(bad_ranges == 0);
  int wrong = 0;
  for (auto& s : seen) wrong += s.load() != 1;
  CHECK_MESSAGE(
      wrong == 0,
      fmt::format("tiles {} slices {} chunk {} fixed {} members {}: {} items not taken exactly once", p.tiles,
                  p.slices, p.chunk, p.fixed_shares, nodes_of_members.size(), wrong));
}

}  // namespace

TEST_CASE("every tile of every slice is handed out once: any team, chunk, slices and nodes") {
  for (int64_t tiles : {1, 5, 64, 257})
    for (int64_t slices : {1, 3})
      for (int64_t chunk : {1, 4, 32})
        for (int members : {1, 2, 7}) {
          WorkQueue::Params p;
          p.tiles = tiles;
          p.slices = slices;
          p.chunk = chunk;
          p.fixed_shares = slices == 1;
          check_cover(p, std::vector<int>(size_t(members), 0));
          // Two nodes: the caller on none, workers alternating; and a node with no member at all.
          p.node_tiles = node_tiles(tiles, {1, 1}, 2);
          std::vector<int> on(size_t(members), 0);
          on[0] = -1;
          for (int i = 1; i < members; ++i) on[size_t(i)] = (i - 1) % 2;
          check_cover(p, on);
          check_cover(p, std::vector<int>(size_t(members), 1));
        }
}

TEST_CASE("fixed shares: one long range per member first, 15/16 of the tiles; ranges never cross a slice") {
  WorkQueue::Params p;
  p.tiles = 256;
  p.chunk = 1;
  p.fixed_shares = true;
  WorkQueue q(p, {4});
  WorkRange r;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(q.next(0, r));
    CHECK(r.t1 - r.t0 == 256 * 15 / 16 / 4);
  }
  WorkQueue::Params ps;
  ps.tiles = 10;
  ps.slices = 4;
  ps.chunk = 3;
  WorkQueue qs(ps, {1});
  while (qs.next(0, r)) CHECK(r.t1 <= ps.tiles);
}

TEST_CASE("members take their own node's tiles while there are any") {
  WorkQueue::Params p;
  p.tiles = 100;
  p.node_tiles = {0, 40, 100};
  WorkQueue q(p, {1, 1});
  WorkRange r;
  REQUIRE(q.next(1, r));
  CHECK(r.t0 >= 40);
  REQUIRE(q.next(0, r));
  CHECK(r.t1 <= 40);
}

TEST_CASE("K slices: only where the tiles are few for the team, cut at segments of about equal lines") {
  const CpuWeights big = layer(256, 32, 16), small = layer(4, 32, 16), tiny = layer(1, 2, 16);
  CHECK(k_slices(big, 1, 8, 16) == 1);
  CHECK(k_slices(big, 1, 8, 1) == 1);
  CHECK(k_slices(small, 1, 8, 1) == 1);
  CHECK(k_slices(small, 1, 8, 2) == 4);
  CHECK(k_slices(small, 1, 8, 16) == 16);  // at most 16
  CHECK(k_slices(tiny, 1, 8, 16) == 2);    // at most one per segment
  const std::vector<int64_t> b = slice_bounds(small, 4);
  CHECK(b == std::vector<int64_t>{0, 8, 16, 24, 32});
  CHECK(slice_bounds(tiny, 5) == std::vector<int64_t>{0, 1, 2});
}

TEST_CASE("node tiles in proportion to the members, at multiples of the quantum") {
  CHECK(node_tiles(100, {3}, 8) == std::vector<int64_t>{0, 100});
  CHECK(node_tiles(100, {1, 1}, 2) == std::vector<int64_t>{0, 50, 100});
  CHECK(node_tiles(100, {3, 1}, 8) == std::vector<int64_t>{0, 72, 100});
  CHECK(node_tiles(100, {0, 2}, 8) == std::vector<int64_t>{0, 0, 100});
}

TEST_CASE("NUMA nodes from sysfs: CPU lists, the affinity mask, nodes without CPUs left out") {
  CHECK(parse_cpu_list("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(parse_cpu_list("").empty());
  CHECK(parse_cpu_list("3-1").empty());
  CHECK(parse_cpu_list("a").empty());
  const auto root = std::filesystem::temp_directory_path() / fmt::format("nibble-numa-{}", getpid());
  for (auto [node, cpus] : {std::pair{"node0", "0-3"}, std::pair{"node1", "4-7"}, std::pair{"node2", ""}}) {
    std::filesystem::create_directories(root / node);
    std::ofstream(root / node / "cpulist") << cpus << "\n";
  }
  std::filesystem::create_directories(root / "possible_not_a_node");
  auto nodes = numa_nodes(root.string(), {});
  REQUIRE(nodes.size() == 2);
  CHECK(nodes[0].id == 0);
  CHECK(nodes[1].cpus == std::vector<int>{4, 5, 6, 7});
  nodes = numa_nodes(root.string(), {1, 2});  // the process may run on CPUs 1 and 2 only
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].cpus == std::vector<int>{1, 2});
  std::filesystem::remove_all(root);
  CHECK(numa_nodes("/nonexistent", {}).empty());
}

TEST_CASE("the codes' pages move with mbind (two ranges, both to this machine's first node)") {
  const auto& nodes = process_numa_nodes();
  if (nodes.empty()) {
    MESSAGE("no /sys/devices/system/node here: nothing to move");
    return;
  }
  CpuWeights w = layer(64, 8, 512);  // 64 tiles x 4096 lines x 64 B = 16 MiB of codes
  w.q.assign(size_t(w.tiles * w.lines * kTileN), 1);
  const std::vector<NumaNode> two = {nodes[0], nodes[0]};
  CHECK(place_codes(w, {0, 32, 64}, two) == "");
  int node = -1;
  constexpr unsigned long kFlags = 1 | 2;  // MPOL_F_NODE | MPOL_F_ADDR: the node of the page at addr
  REQUIRE(syscall(SYS_get_mempolicy, &node, nullptr, 0, w.q.data() + w.q.size() / 2, kFlags) == 0);
  CHECK(node == nodes[0].id);
}
