// Tests of how apply cuts up and hands out its work (work_split.h) and of the NUMA placement logic
// (numa_placement.h), plain C++ on any CPU (and under ThreadSanitizer): every tile of every K
// slice is handed out exactly once whatever the team, the nodes and the interleaving; slices cut
// at segments; a node's tiles go to its own members first; a fake sysfs tree gives the nodes; the
// codes' pages move with mbind (to this machine's one node, where it has one).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
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

// The members `running` (indices into member_nodes, any subset, any order) take ranges
// concurrently (threads) and record them; every (slice, tile) must be seen exactly once, however
// many members never call next.
void check_cover(const WorkQueue::Params& p, const std::vector<int>& member_nodes,
                 const std::vector<int>& running) {
  WorkQueue q(p, member_nodes);
  std::vector<std::atomic<int>> seen(size_t(p.tiles * p.slices));
  std::atomic<int> bad_ranges{0};
  std::atomic<int64_t> ranges{0};
  std::vector<std::thread> members;
  for (int member : running)
    members.emplace_back([&, member] {
      for (WorkRange r; q.next(member, r); ++ranges) {
        if (r.t0 >= r.t1 || r.t0 < 0 || r.t1 > p.tiles || r.slice < 0 || r.slice >= p.slices)
          ++bad_ranges;
        else
          for (int64_t t = r.t0; t < r.t1; ++t) seen[size_t(r.slice * p.tiles + t)].fetch_add(1);
      }
    });
  for (auto& t : members) t.join();
  CHECK(bad_ranges == 0);
  CHECK(ranges == int64_t(q.pieces()));
  int wrong = 0;
  for (auto& s : seen) wrong += s.load() != 1;
  CHECK_MESSAGE(wrong == 0,
                fmt::format("tiles {} slices {} chunk {} nodes {} members {} running {}: {} items not taken "
                            "exactly once",
                            p.tiles, p.slices, p.chunk, p.node_tiles.size(), member_nodes.size(),
                            running.size(), wrong));
}

void check_cover(const WorkQueue::Params& p, const std::vector<int>& member_nodes) {
  std::vector<int> all;
  for (int i = 0; i < int(member_nodes.size()); ++i) all.push_back(i);
  check_cover(p, member_nodes, all);
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

TEST_CASE("any subset of the members, in any order, takes every piece once (the others never come)") {
  for (int64_t tiles : {3, 64, 255})
    for (int64_t slices : {1, 4})
      for (int members : {1, 3, 6})
        for (bool nodes : {false, true}) {
          WorkQueue::Params p;
          p.tiles = tiles;
          p.slices = slices;
          p.chunk = 2;
          std::vector<int> on(size_t(members), 0);
          if (nodes) {
            p.node_tiles = node_tiles(tiles, {1, 1}, 2);
            on[0] = -1;
            for (int i = 1; i < members; ++i) on[size_t(i)] = (i - 1) % 2;
          }
          // Every non-empty subset of the members (bit i: member i runs), in reverse order.
          for (unsigned set = 1; set < (1u << members); ++set) {
            std::vector<int> running;
            for (int i = members - 1; i >= 0; --i)
              if (set >> i & 1u) running.push_back(i);
            check_cover(p, on, running);
          }
        }
}

TEST_CASE("one member alone takes its own run front to back, then the others' from their backs") {
  WorkQueue::Params p;
  p.tiles = 16;
  p.chunk = 1;
  WorkQueue q(p, {0, 0, 0, 0});  // four runs of 4 tiles: [0,4) [4,8) [8,12) [12,16)
  WorkRange r;
  std::vector<int64_t> order;
  while (q.next(1, r)) order.push_back(r.t0);
  REQUIRE(order.size() == 16);
  CHECK(std::vector<int64_t>(order.begin(), order.begin() + 4) == std::vector<int64_t>{4, 5, 6, 7});
  // Then the back half of a run of 4 (the first in the scan with the most): its tile 2 of 4, then
  // the rest of what it stole, front to back.
  CHECK(order[4] == 2);
  CHECK(order[5] == 3);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t t = 0; t < 16; ++t) CHECK(sorted[size_t(t)] == t);
}

TEST_CASE("ranges never cross a slice or a node's tiles; a member's own node comes first") {
  WorkQueue::Params ps;
  ps.tiles = 10;
  ps.slices = 4;
  ps.chunk = 3;
  WorkQueue qs(ps, {0});
  WorkRange r;
  while (qs.next(0, r)) CHECK(r.t1 <= ps.tiles);
  WorkQueue::Params p;
  p.tiles = 100;
  p.chunk = 7;
  p.node_tiles = {0, 40, 100};
  WorkQueue q(p, {1, 0});
  REQUIRE(q.next(0, r));
  CHECK(r.t0 >= 40);
  REQUIRE(q.next(1, r));
  CHECK(r.t1 <= 40);
  // Member 1 (node 0) takes node 0's pieces before any of node 1's.
  int64_t last_node0 = -1, first_node1 = -1, n = 0;
  while (q.next(1, r)) {
    CHECK((r.t1 <= 40 || r.t0 >= 40));
    if (r.t1 <= 40) last_node0 = n;
    if (r.t0 >= 40 && first_node1 < 0) first_node1 = n;
    ++n;
  }
  CHECK(first_node1 > last_node0);
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

TEST_CASE("pieces: about 32 per member streaming; at least the asked-for number per member computing") {
  // Bandwidth-bound: tiles / (32 members), at least 1.
  CHECK(piece_tiles(8192, 2, false, 1, 1, 8) == 128);
  CHECK(piece_tiles(256, 16, false, 1, 1, 8) == 1);
  CHECK(piece_tiles(7, 16, false, 1, 1, 8) == 1);
  // Compute-bound (the AMX form: quantum 2, chunk 8): 4096 columns on 16 members make 8 pieces
  // each of 2 tiles (2 each of 8 tiles with 2 per member), on 2 members the whole chunk.
  CHECK(piece_tiles(256, 16, true, 2, 8, 8) == 2);
  CHECK(piece_tiles(256, 16, true, 2, 8, 2) == 8);
  CHECK(piece_tiles(256, 2, true, 2, 8, 8) == 8);
  CHECK(piece_tiles(3584, 16, true, 2, 8, 8) == 8);
  // Multiples of the quantum, never below it (gemm-avx512bf16: 4, 32), whatever is asked.
  CHECK(piece_tiles(256, 2, true, 4, 32, 8) == 16);
  CHECK(piece_tiles(200, 2, true, 4, 32, 8) == 12);
  CHECK(piece_tiles(10, 16, true, 4, 32, 8) == 4);
  CHECK(piece_tiles(1 << 20, 1, true, 4, 32, int64_t(1) << 62) == 4);
  // Whatever the layer and the team: a multiple of the quantum within [quantum, chunk].
  for (int members : {1, 3, 16})
    for (int64_t tiles : {1, 5, 256, 3584}) {
      const int64_t c = piece_tiles(tiles, members, true, 2, 8, 8);
      CHECK(c % 2 == 0);
      CHECK(c >= 2);
      CHECK(c <= 8);
    }
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
