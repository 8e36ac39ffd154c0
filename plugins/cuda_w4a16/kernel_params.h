// The launch-side vocabulary of the cuda_w4a16 kernels in plain C++ (no CUDA types): the kernel
// ids, the facts kernel setup reads off the device for each, and the parameter block of one
// matmul launch. Shared by the kernel files, the plan (plan.h) and its GPU-free test.
#pragma once

#include <cstdint>

namespace nibble::cuda {

/// Activation (and prepared scale) dtype of a kernel: the nibble_dtype values F16 and BF16.
enum class Act : int32_t { f16 = 1, bf16 = 2 };

/// Launcher ids of the kernels (plan.cpp's kernel table describes each; kCublas is the dequantize
/// + cuBLAS path, which has no kernel of its own besides the dequantization).
enum KernelId : int32_t {
  kS1 = 0,
  kS2,
  kS4,
  kS8,
  kL,
  kV1,
  kV2,
  kV4,
  kV2u2,
  kWg16,
  kWg32,
  kWg64,
  kWg128,
  kWg256,
  kNumKernels,
  kCublas = kNumKernels
};

/// Compute warps per block of every GEMV kernel (each owns a slice of the block's K range).
constexpr int32_t kGemvWarps = 4;

/// What kernel setup reads off the device for one kernel (per activation dtype).
struct KernelInfo {
  const char* name;
  int32_t bn, bm;      // block tile
  int32_t threads;     // threads per block
  int32_t smem_bytes;  // dynamic shared memory per block
  int32_t slots;       // resident blocks on the whole device
  int32_t step_units;  // k-units per pipeline stage (tiled) or per load batch of a warp (GEMV)
  int32_t cluster_slots = 0;  // wgmma: blocks resident at once as clusters of 2 (0: no such instance)
};

/// Arguments of one matmul launch. Pointers are device memory.
///
/// At most 128 bytes (static_assert below): nvcc 13 compiles a kernel whose by-value parameter
/// struct is larger to read its fields through a pointer into the parameter space, and ptxas then
/// schedules the same source differently: with this struct past 128 bytes the GEMV kernels v2u2
/// and v4 ran measurably slower (docs/cuda.md). Hence the narrow flags at the end.
struct GemmParams {
  const void* w;            // packed units, uint4 [strips][ku][32] (layout.h)
  const void* scale_rec;    // act dtype [groups_pad][strips][8][4] (layout.h)
  const uint8_t* zero_rec;  // u8 [groups_pad][strips][8][4], or null for uint4b8 (zero 8)
  const void* x;            // act dtype [m][ldx]; columns >= kx read as 0; rows 16-byte aligned
  const void* x_image;      // wgmma: x as launch_wgmma_x_image lays it out, or null (the kernel
                            // copies x itself)
  const void* bias;         // act dtype [n], or null
  void* y;                  // act dtype [m][n]
  float* partials;    // stream-K partial tiles: [2 * grid][bm * bn] fp32; GEMV: [splits][m][strips * 32]
  int32_t* counters;  // [m_tiles * n_tiles] arrival counters: zero on entry, left zero
  int64_t ldx;        // row pitch of x in elements (multiple of 8)
  int64_t kx;         // valid columns of x (multiple of 8); <= ku * 32
  int32_t m, n;       // rows of x and y; output features written (n <= strips * 32)
  int32_t strips;     // N_pad / 32
  int32_t ku;         // K_pad / 32 (units along K)
  int32_t kt;         // K_pad / 64 (pipeline stages along K); the one-pass 8-bit instances:
                      // ceil(ku / 4), stages of the real K
  uint32_t g_magic;   // group of k-unit u = u / upg (upg = g_eff / 32 units per group) computed
                      // as __umulhi(u, g_magic) with g_magic = floor(2^32 / upg) + 1, exact for
                      // u * upg < 2^32 (layout_plan.cpp checks); g_magic = 0 means upg = 1
  int32_t m_tiles, n_tiles;  // ceil(m / bm), N_pad / bn
  uint8_t evict_first;       // 1: stream the weights with an L2 evict-first policy (read once)
  uint8_t overlap;           // sm_90+: launched as a programmatic dependent of the previous kernel in
                             // the stream (PDL), so that its launch and first weight loads overlap
                             // that kernel's tail
  uint8_t w_lsu;             // wgmma: weights and records copied by producer warps 1-3 with 16-byte
                             // cp.async instead of the producer lane's bulk copies
  uint8_t wg_sched;          // wgmma: WgSched bits, how tiles are dealt to blocks and shared
                             // tiles summed
  uint8_t prefetch;          // GEMV: how many batches ahead of its loads each warp asks L2 for its
                             // weights (0 = none)
  // Diagnostics of the wgmma kernel, set only by bench_kernels (the plugin leaves both 0):
  uint8_t stages;  // pipeline stages used, 0 = all that fit (at least 3, at most that many)
  int16_t ablate;  // WgAblate bits: parts of the kernel left out or run the old way (timing only)
};
static_assert(sizeof(GemmParams) <= 128, "GemmParams: keep the kernels' parameter block within 128 bytes (see above)");

/// Bits of GemmParams::wg_sched (wgmma kernel).
enum WgSched : uint8_t {
  // Launched cooperatively (every block resident at once): a shared tile is summed by all the
  // blocks whose last tile it is, each a slice, instead of by the last to arrive alone.
  kWgSchedSplitFixup = 1 << 0,
  // Whole waves of tiles in raster order before a stream-K tail (wgmma_layout.h, WgItems), instead
  // of stream-K over every tile.
  kWgSchedWaves = 1 << 1,
  // Clusters of 2 blocks along the features, each block copying half of every stage's x tile into
  // both (multicast); the grid is a whole number of clusters and n_tiles even (the plan checks).
  kWgSchedCluster = 1 << 2,
};

/// Bits of GemmParams::ablate (wgmma kernel only). A run with any bit that leaves work out computes
/// a wrong result and is a timing, never a check; kWgOldX and kWgOldFixup compute the right result
/// the way the first version did (the before of the change they name), kWgDeep a candidate.
enum WgAblate : int32_t {
  kWgNoDequant = 1 << 0,   // consumers feed the packed words as A fragments (no dequantization)
  kWgNoMma = 1 << 1,       // consumers dequantize but issue no wgmma
  kWgOneWg = 1 << 2,       // the second consumer warpgroup exits (its strips are left undone)
  kWgNoX = 1 << 3,         // producer warps 1-3 copy no x (they still arrive)
  kWgNoW = 1 << 4,         // the producer lane issues no weight/record bulk copies (it still arrives)
  kWgNoEpilogue = 1 << 5,  // no stream-K partials, fix-up or y stores
  kWgOldX = 1 << 6,        // x arrivals as first written: each thread waits for its copies a lag later
  kWgOldFixup = 1 << 7,    // the fix-up sums one part at a time (one L2 round trip per part)
  kWgNoWait = 1 << 8,      // producers copy nothing; consumers never wait for a stage (compute only)
  kWgDeep = 1 << 9,        // two wgmma groups in flight while dequantizing, not one (right result)
  kWgNoY = 1 << 10,        // the epilogue stores no y (partials and fix-up stay)
  kWgNoFixup = 1 << 11,    // every tile's part goes to y as if it were the whole tile (no partials)
  kWgProxyFence = 1 << 12, // the consumers' proxy fence after each stage's wait also with the x
                           // image (needed only when x lands through cp.async; right result)
  kWgHalfX = 1 << 13,      // the x image's bulk copy moves half of each stage's x tile: the L2 traffic
                           // of x shared by 2 blocks of a cluster (multicast), the other half stale
  kWgNoMulticast = 1 << 14, // clusters (kWgSchedCluster): each block copies all of its own x; the stages are
                           // still released to both blocks (right result)
  kWgLocalRelease = 1 << 15, // with kWgNoMulticast: a stage released to its own block only (no barrier
                             // crosses blocks; the cluster's launch and schedule stay; right result)
  // Consumer modes (these bits; of them only kWgNoDequant and kWgNoMma together) are compiled
  // kernel instances (fp16, BM 16, 64, 128 only), the rest run-time branches outside the
  // consumers' wgmma loop.
  kWgConsumerBits = kWgNoDequant | kWgNoMma | kWgDeep,
};

}  // namespace nibble::cuda
