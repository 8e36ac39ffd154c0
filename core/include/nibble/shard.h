// Tensor-parallel sharding of a canonical layer.
#pragma once

#include "nibble/canonical.h"

namespace nibble {

/// The partition of `w` held by `rank` of `world` ranks.
/// - Column parallel: slices N (output features); each rank computes its slice of y.
/// - Row parallel: slices K (input features); the ranks' outputs sum to y. The bias stays on rank 0.
///   Without act order, a group that would straddle two ranks (K_part not a multiple of G) is
///   refused with a reason. With act order, every rank keeps all groups' scales and zeros and its
///   slice of g_idx (as vLLM does), so groups may straddle ranks safely.
/// Throws Errc::unsupported naming the layer and the numbers when the split is impossible.
CanonicalLinear shard(const CanonicalLinear& w, Parallel how, int rank, int world);

/// The spec of shard(w, how, rank, world) from the unsplit layer's spec alone (no weights are
/// read), with the same checks: what a host asks before it loads anything, and what selection of
/// a rank's partition decides on.
LinearSpec shard_spec(const LinearSpec& s, Parallel how, int rank, int world);

}  // namespace nibble
