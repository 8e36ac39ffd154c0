// How the work of one apply call is cut up and handed out to the members of the thread team:
// ranges of tiles (16 columns each), within K slices when there are too few tiles for the team,
// per NUMA node when the weights are placed on several.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu_weights.h"

namespace nibble::cpu {

/// Tiles [t0, t1) of K slice `slice`.
struct WorkRange {
  int64_t slice = 0, t0 = 0, t1 = 0;
};

/// K slices for a call: 1 while the team has at least `min_quanta` quanta of `quantum` tiles per
/// member, else enough slices that it has (at most 16, at most one per segment).
int64_t k_slices(const CpuWeights& w, int64_t quantum, int64_t min_quanta, int members);
/// The first segment of each of `slices` K slices of about equal lines, and the end: [slices + 1].
/// Fewer where segments are too long to cut that finely.
std::vector<int64_t> slice_bounds(const CpuWeights& w, int64_t slices);

/// The tiles of each node, [nodes + 1] bounds: in proportion to the node's CPUs in `cpus`, cut at
/// multiples of `quantum`; one node: {0, tiles}.
std::vector<int64_t> node_tiles(int64_t tiles, const std::vector<int>& cpus, int64_t quantum);

/// The hand-out of one call's work, shared by the members: each node's tiles, in every slice,
/// go to the members on that node first; a member whose node has nothing left (or who is on no
/// node: the caller, when the workers are placed) takes from the other nodes.
///
/// Bandwidth-bound forms (fixed_shares) have each member first take a fixed share of 15/16 of its
/// node's work as one range (one stream, which the prefetchers follow to the end), the rest
/// guided: about half of what is left per member, in whole chunks, so that a member the OS
/// delays holds the call up by at most that much. The shares are claimed in turn, not tied to a
/// member's index, so that any number of members computes them all. Compute-bound forms, and
/// calls split in K, take everything guided.
class WorkQueue {
 public:
  struct Params {
    int64_t tiles = 0;
    int64_t slices = 1;
    int64_t chunk = 1;                ///< guided ranges are whole multiples of it (but at a slice's end)
    bool fixed_shares = false;        ///< only with slices == 1
    std::vector<int64_t> node_tiles;  ///< node_tiles(); empty: one node
  };
  /// `members_on_node[j]`: how many members of the call run on node j.
  WorkQueue(const Params& p, const std::vector<int>& members_on_node);
  /// The next range for a member on `node` (-1: none); false once all work is taken.
  bool next(int node, WorkRange& r);

 private:
  struct alignas(64) Pool {
    int64_t t0 = 0, n = 0;  // the node's tiles [t0, t0 + n); items u in [0, slices n): slice u / n
    int64_t share = 0;      // items per fixed share
    int members = 0;
    std::atomic<int64_t> next_share{0}, next{0};
  };
  bool take(Pool& pool, WorkRange& r, bool own);
  Params p_;
  std::unique_ptr<Pool[]> pools_;
  int nodes_ = 1;
};

}  // namespace nibble::cpu
