// The AMX form with parts left out, for bench_amx (where its time goes on a CPU with AMX): each
// variant but `full` computes a wrong y and exists only in that tool, never in the plugin.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace nibble::cpu::amx {

enum class Diag {
  full,             ///< the plugin's kernel
  no_mma,           ///< tdpbf16ps left out
  no_tile_loads,    ///< the A and B tile loads left out (the products run on stale tiles)
  no_dequantize,    ///< the B tiles not made from the codes (the buffer's old contents)
  no_segment_ends,  ///< C stored, but not scaled into y
  mma_only,         ///< tile loads, tdpbf16ps and C stores only
};
inline constexpr Diag kDiags[] = {Diag::full,          Diag::no_mma,          Diag::no_tile_loads,
                                  Diag::no_dequantize, Diag::no_segment_ends, Diag::mma_only};
const char* diag_name(Diag d);

/// gemm_amx (kernels.h) with `d`'s parts left out; the same preconditions.
void gemm_amx_diag(Diag d, const FusedArgs& a, int64_t t0, int64_t t1);

}  // namespace nibble::cpu::amx
