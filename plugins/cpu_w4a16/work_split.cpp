#include "work_split.h"

#include <algorithm>

namespace nibble::cpu {

int64_t k_slices(const CpuWeights& w, int64_t quantum, int64_t min_quanta, int members) {
  const int64_t quanta = std::max<int64_t>(1, w.tiles / std::max<int64_t>(1, quantum));
  if (members <= 1 || quanta >= min_quanta * members) return 1;
  const int64_t want = (min_quanta * members + quanta - 1) / quanta;
  return std::clamp<int64_t>(want, 1, std::min<int64_t>(16, w.segments()));
}

int64_t piece_tiles(int64_t tiles, int members, bool compute_bound, int64_t quantum, int64_t chunk,
                    int64_t per_member) {
  const int64_t m = std::max(1, members);
  if (!compute_bound) return std::max<int64_t>(1, tiles / (m * 32));
  quantum = std::max<int64_t>(1, quantum);
  chunk = std::max(quantum, chunk);
  const int64_t want = tiles / (m * std::clamp<int64_t>(per_member, 1, 1 << 20)) / quantum * quantum;
  return std::clamp(want, quantum, chunk);
}

std::vector<int64_t> slice_bounds(const CpuWeights& w, int64_t slices) {
  std::vector<int64_t> b = {0};
  const int64_t segs = w.segments();
  for (int64_t s = 1; s < slices; ++s) {
    const int64_t line = w.lines * s / slices;
    // The first segment that starts at or after the slice's share of the lines.
    const int64_t sg =
        std::lower_bound(w.seg_line.begin(), w.seg_line.begin() + segs, line) - w.seg_line.begin();
    if (sg > b.back() && sg < segs) b.push_back(sg);
  }
  b.push_back(segs);
  return b;
}

std::vector<int64_t> node_tiles(int64_t tiles, const std::vector<int>& cpus, int64_t quantum) {
  std::vector<int64_t> b = {0};
  int64_t total = 0;
  for (int c : cpus) total += std::max(0, c);
  if (cpus.size() <= 1 || total == 0) return {0, tiles};
  int64_t acc = 0;
  for (size_t j = 0; j + 1 < cpus.size(); ++j) {
    acc += std::max(0, cpus[j]);
    const int64_t cut = (tiles * acc / total + quantum / 2) / quantum * quantum;
    b.push_back(std::clamp(cut, b.back(), tiles));
  }
  b.push_back(tiles);
  return b;
}

WorkQueue::WorkQueue(const Params& p, const std::vector<int>& member_nodes) : p_(p) {
  if (p_.node_tiles.size() < 2) p_.node_tiles = {0, p_.tiles};
  p_.chunk = std::max<int64_t>(1, p_.chunk);
  p_.slices = std::max<int64_t>(1, p_.slices);
  const int nodes = int(p_.node_tiles.size()) - 1;
  std::vector<std::vector<size_t>> owners(static_cast<size_t>(nodes));
  for (size_t i = 0; i < member_nodes.size(); ++i)
    if (member_nodes[i] >= 0 && member_nodes[i] < nodes) owners[size_t(member_nodes[i])].push_back(i);
  uint32_t first = 0;
  size_t orphans = 0;
  for (int j = 0; j < nodes; ++j) {
    Pool pool;
    pool.t0 = p_.node_tiles[size_t(j)];
    pool.n = std::max<int64_t>(0, p_.node_tiles[size_t(j) + 1] - pool.t0);
    pool.per_slice = (pool.n + p_.chunk - 1) / p_.chunk;
    pool.first = first;
    // K <= 2^31 and N <= 2^31 (can_implement), at most 16 slices: fewer than 2^32 pieces.
    pool.count = uint32_t(pool.per_slice * p_.slices);
    first += pool.count;
    pools_.push_back(pool);
    orphans += owners[size_t(j)].empty() && pool.count > 0;
  }
  nruns_ = member_nodes.size() + orphans;
  runs_ = std::make_unique<Run[]>(nruns_);
  size_t orphan = member_nodes.size();
  for (int j = 0; j < nodes; ++j) {
    const Pool& pool = pools_[size_t(j)];
    const std::vector<size_t>& own = owners[size_t(j)];
    if (own.empty()) {
      if (pool.count == 0) continue;
      runs_[orphan].node = j;
      runs_[orphan++].span.store(pack(pool.first, pool.first + pool.count), std::memory_order_relaxed);
      continue;
    }
    for (size_t r = 0; r < own.size(); ++r) {
      Run& run = runs_[own[r]];
      run.node = j;
      run.span.store(pack(uint32_t(pool.first + uint64_t(pool.count) * r / own.size()),
                          uint32_t(pool.first + uint64_t(pool.count) * (r + 1) / own.size())),
                     std::memory_order_relaxed);
    }
  }
}

size_t WorkQueue::pool_of(uint32_t piece) const {
  size_t j = 0;
  while (j + 1 < pools_.size() && piece >= pools_[j].first + pools_[j].count) ++j;
  return j;
}

WorkRange WorkQueue::range_of(uint32_t piece) const {
  const Pool& pool = pools_[pool_of(piece)];
  const int64_t local = int64_t(piece - pool.first), slice = local / pool.per_slice;
  const int64_t t0 = pool.t0 + (local % pool.per_slice) * p_.chunk;
  return {slice, t0, std::min(pool.t0 + pool.n, t0 + p_.chunk)};
}

bool WorkQueue::steal(size_t thief, uint32_t& piece) {
  const int node = runs_[thief].node;
  for (;;) {
    // The run with the most pieces left, of the thief's node's pieces if any run has some.
    size_t best = nruns_, best_here = nruns_;
    uint32_t most = 0, most_here = 0;
    for (size_t v = 0; v < nruns_; ++v) {
      if (v == thief) continue;
      const uint64_t s = runs_[v].span.load(std::memory_order_acquire);
      const uint32_t front = uint32_t(s), back = uint32_t(s >> 32);
      if (back <= front) continue;
      if (back - front > most) most = back - front, best = v;
      if (node >= 0 && back - front > most_here && pool_of(front) == size_t(node))
        most_here = back - front, best_here = v;
    }
    const size_t v = best_here < nruns_ ? best_here : best;
    if (v == nruns_) return false;
    uint64_t s = runs_[v].span.load(std::memory_order_acquire);
    const uint32_t front = uint32_t(s), back = uint32_t(s >> 32);
    if (back <= front) continue;
    const uint32_t take = (back - front + 1) / 2;  // a run of one piece is taken whole
    if (!runs_[v].span.compare_exchange_strong(s, pack(front, back - take), std::memory_order_acq_rel))
      continue;
    piece = back - take;
    runs_[thief].span.store(pack(back - take + 1, back), std::memory_order_release);
    return true;
  }
}

bool WorkQueue::next(int member, WorkRange& r) {
  Run& own = runs_[size_t(member)];
  uint64_t s = own.span.load(std::memory_order_acquire);
  uint32_t piece = 0;
  for (;;) {
    const uint32_t front = uint32_t(s), back = uint32_t(s >> 32);
    if (front >= back) {
      if (!steal(size_t(member), piece)) return false;
      break;
    }
    if (own.span.compare_exchange_weak(s, pack(front + 1, back), std::memory_order_acq_rel)) {
      piece = front;
      break;
    }
  }
  r = range_of(piece);
  return true;
}

}  // namespace nibble::cpu
