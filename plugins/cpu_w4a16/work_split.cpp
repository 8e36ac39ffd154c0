#include "work_split.h"

#include <algorithm>

namespace nibble::cpu {

int64_t k_slices(const CpuWeights& w, int64_t quantum, int64_t min_quanta, int members) {
  const int64_t quanta = std::max<int64_t>(1, w.tiles / std::max<int64_t>(1, quantum));
  if (members <= 1 || quanta >= min_quanta * members) return 1;
  const int64_t want = (min_quanta * members + quanta - 1) / quanta;
  return std::clamp<int64_t>(want, 1, std::min<int64_t>(16, w.segments()));
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

WorkQueue::WorkQueue(const Params& p, const std::vector<int>& members_on_node) : p_(p) {
  if (p_.node_tiles.size() < 2) p_.node_tiles = {0, p_.tiles};
  nodes_ = int(p_.node_tiles.size()) - 1;
  pools_ = std::make_unique<Pool[]>(size_t(nodes_));
  const int64_t chunk = std::max<int64_t>(1, p_.chunk);
  for (int j = 0; j < nodes_; ++j) {
    Pool& pool = pools_[size_t(j)];
    pool.t0 = p_.node_tiles[size_t(j)];
    pool.n = p_.node_tiles[size_t(j) + 1] - pool.t0;
    pool.members = size_t(j) < members_on_node.size() ? members_on_node[size_t(j)] : 0;
    if (p_.fixed_shares && p_.slices == 1 && pool.members > 0)
      pool.share = pool.n * 15 / 16 / pool.members / chunk * chunk;
    pool.next.store(pool.share * pool.members, std::memory_order_relaxed);
  }
}

bool WorkQueue::take(Pool& pool, WorkRange& r, bool own) {
  if (own && pool.share > 0) {
    const int64_t i = pool.next_share.fetch_add(1, std::memory_order_relaxed);
    if (i < pool.members) {
      r = {0, pool.t0 + i * pool.share, pool.t0 + (i + 1) * pool.share};
      return true;
    }
  }
  const int64_t items = pool.n * p_.slices, chunk = std::max<int64_t>(1, p_.chunk);
  const int64_t takers = std::max(1, pool.members);
  int64_t u0 = pool.next.load(std::memory_order_relaxed), u1;
  do {
    const int64_t chunks_left = (items - u0 + chunk - 1) / chunk;
    if (chunks_left <= 0) return false;
    u1 = std::min(items, u0 + std::max<int64_t>(1, chunks_left / (2 * takers)) * chunk);
    // A range never crosses into the next slice.
    u1 = std::min(u1, (u0 / pool.n + 1) * pool.n);
  } while (!pool.next.compare_exchange_weak(u0, u1, std::memory_order_relaxed));
  const int64_t slice = u0 / pool.n;
  r = {slice, pool.t0 + u0 - slice * pool.n, pool.t0 + u1 - slice * pool.n};
  return true;
}

bool WorkQueue::next(int node, WorkRange& r) {
  if (node >= 0 && node < nodes_ && pools_[size_t(node)].n > 0 && take(pools_[size_t(node)], r, true))
    return true;
  // Then the other nodes' guided rest (their fixed shares stay with their members); a member on
  // no node visits every node here.
  for (int k = 1; k <= nodes_; ++k) {
    const int j = ((node < 0 ? 0 : node) + k) % nodes_;
    if (j == node || pools_[size_t(j)].n == 0) continue;
    if (take(pools_[size_t(j)], r, false)) return true;
  }
  return false;
}

}  // namespace nibble::cpu
