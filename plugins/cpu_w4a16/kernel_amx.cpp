// The AMX-BF16 form on the hardware: kernel_amx_impl.h over the tile instructions
// (amx_hw_tiles.h).
#include "amx_hw_tiles.h"
#include "kernel_amx_impl.h"

namespace nibble::cpu {

void gemm_amx(const FusedArgs& a, int64_t t0, int64_t t1) { amx::gemm<amx::HwTiles>(a, t0, t1); }

}  // namespace nibble::cpu
