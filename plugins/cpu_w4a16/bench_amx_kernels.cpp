// The AMX form's diagnostic variants (amx_diag.h), in their own translation unit with the AMX
// flags, so that the plugin's kernel library holds only the full kernel.
#include "amx_diag.h"
#include "amx_hw_tiles.h"
#include "kernel_amx_impl.h"

namespace nibble::cpu::amx {
namespace {

struct NoMma : HwTiles {
  template <int C, int A, int B>
  static void dpbf16ps() {}
};
struct NoTileLoads : HwTiles {
  template <int T>
  static void load(const void*, int64_t) {}
};
struct NoDequantize : HwTiles {
  static constexpr bool kSkipDequantize = true;
};
struct NoSegmentEnds : HwTiles {
  static constexpr bool kSkipSegmentEnds = true;
};
struct MmaOnly : HwTiles {
  static constexpr bool kSkipDequantize = true;
  static constexpr bool kSkipSegmentEnds = true;
};
static_assert(!kSkipsDequantize<HwTiles> && !kSkipsSegmentEnds<HwTiles>);
static_assert(kSkipsDequantize<MmaOnly> && kSkipsSegmentEnds<MmaOnly> && !kSkipsDequantize<NoSegmentEnds>);

}  // namespace

const char* diag_name(Diag d) {
  switch (d) {
    case Diag::full: return "full";
    case Diag::no_mma: return "no-mma";
    case Diag::no_tile_loads: return "no-tile-loads";
    case Diag::no_dequantize: return "no-dequantize";
    case Diag::no_segment_ends: return "no-segment-ends";
    case Diag::mma_only: return "mma-only";
  }
  return "?";
}

void gemm_amx_diag(Diag d, const FusedArgs& a, int64_t t0, int64_t t1) {
  switch (d) {
    case Diag::full: return gemm<HwTiles>(a, t0, t1);
    case Diag::no_mma: return gemm<NoMma>(a, t0, t1);
    case Diag::no_tile_loads: return gemm<NoTileLoads>(a, t0, t1);
    case Diag::no_dequantize: return gemm<NoDequantize>(a, t0, t1);
    case Diag::no_segment_ends: return gemm<NoSegmentEnds>(a, t0, t1);
    case Diag::mma_only: return gemm<MmaOnly>(a, t0, t1);
  }
}

}  // namespace nibble::cpu::amx
