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

/// Pieces per member a compute-bound form aims for (NIBBLE_CPU_GEMM_PIECES overrides it). The
/// members take pieces dynamically, so a call ends at most about one piece after its fair share:
/// with 2 pieces per member a member that comes late or runs slowly leaves the call up to 1.5x its
/// ideal time, with 8 about 1.1x (docs/benchmarks.md, "Pieces of the GEMM forms").
constexpr int64_t kGemmPiecesPerMember = 8;

/// Tiles per piece of a call: a bandwidth-bound form (one tile per pass, weights streamed) about 32
/// pieces per member, so that a member's run is one long stream and a late member's back half is
/// worth stealing; a compute-bound form (`quantum` tiles per pass, weights reused from cache) at
/// least `per_member` pieces per member, each a multiple of `quantum` and at most `chunk` tiles
/// (its cache blocking), at least `quantum`.
int64_t piece_tiles(int64_t tiles, int members, bool compute_bound, int64_t quantum, int64_t chunk,
                    int64_t per_member);

/// The tiles of each node, [nodes + 1] bounds: in proportion to the node's CPUs in `cpus`, cut at
/// multiples of `quantum`; one node: {0, tiles}.
std::vector<int64_t> node_tiles(int64_t tiles, const std::vector<int>& cpus, int64_t quantum);

/// The hand-out of one call's work to the members of a dynamic job (ThreadTeam::run_dynamic).
///
/// The work is cut into pieces of `chunk` tiles of one K slice, numbered node by node (each node's
/// tiles, slice after slice). Every member owns a run of consecutive pieces of its node and takes
/// them front to back, one at a time: its weights are one stream through memory that the kernel's
/// prefetch follows from piece to piece (the last tile's prefetch runs into the next tile). A
/// member whose run is used up steals the back half of the run with the most pieces left, on its
/// own node first, then on any, and owns that from then on. So a member the OS runs late or slowly
/// gives its pieces to the others instead of holding the call up by its whole share, and the
/// pieces of a member that never comes (a worker that starts after the call is done, a smaller
/// team than asked for) or of a node without members are taken the same way.
class WorkQueue {
 public:
  struct Params {
    int64_t tiles = 0;
    int64_t slices = 1;
    int64_t chunk = 1;                ///< tiles per piece (a node's last piece of a slice may have fewer)
    std::vector<int64_t> node_tiles;  ///< node_tiles(); empty: one node
  };
  /// `member_nodes[i]`: the node member i runs on (ThreadTeam::node_of); -1 (or a node the layer's
  /// tiles are not cut for): none, and the member owns no run at first, it only steals.
  WorkQueue(const Params& p, const std::vector<int>& member_nodes);
  /// The next range for `member` (an index into member_nodes, each used by one thread at a time);
  /// false once every piece is taken.
  bool next(int member, WorkRange& r);
  /// Pieces in all: next() returns true that many times, over all members together.
  uint32_t pieces() const { return pools_.empty() ? 0 : pools_.back().first + pools_.back().count; }

 private:
  struct Pool {
    int64_t t0 = 0, n = 0;          // the node's tiles [t0, t0 + n)
    int64_t per_slice = 0;          // pieces per slice: ceil(n / chunk)
    uint32_t first = 0, count = 0;  // its pieces [first, first + count)
  };
  // Pieces [low 32 bits, high 32 bits) not yet taken, changed by compare-and-swap only where it
  // holds any: the owner takes from the front, others from the back. A run with none is changed
  // by its owner alone (a stolen half), so it needs no version.
  struct alignas(64) Run {
    std::atomic<uint64_t> span{0};
    int node = -1;  // its member's node (an orphan run: the node it holds), for the thieves' choice
  };
  static uint64_t pack(uint32_t front, uint32_t back) { return uint64_t(back) << 32 | front; }
  size_t pool_of(uint32_t piece) const;
  WorkRange range_of(uint32_t piece) const;
  bool steal(size_t thief, uint32_t& piece);

  Params p_;
  std::vector<Pool> pools_;
  std::unique_ptr<Run[]> runs_;  // one per member, then one per node without members
  size_t nruns_ = 0;
};

}  // namespace nibble::cpu
