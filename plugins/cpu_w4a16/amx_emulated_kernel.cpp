// The AMX form over the scalar tile emulation (amx_emulation.h), for test_amx_emulated.cpp. Its
// own translation unit, the only one of the test compiled with AVX-512 flags, so that the test's
// start-up code (static initializers, the skip check) runs on any x86-64 CPU and a CPU without
// AVX-512 gets a SKIP, not an illegal instruction.
#include "amx_emulation.h"
#include "kernel_amx_impl.h"

namespace nibble::cpu::amx {

void gemm_emulated(const FusedArgs& a, int64_t t0, int64_t t1) { gemm<EmuTiles>(a, t0, t1); }

}  // namespace nibble::cpu::amx
