// The sm_90a matmul on wgmma.mma_async, compiled for compute_90a only (Hopper's own instructions
// run on compute capability 9.0 and nothing else; the plan declines it elsewhere).
//
// Y^T = W^T X^T as in the mma.sync kernels, on the same packed weights (layout.h): the weights are
// the A operand, dequantized into registers (wgmma's RS form), x the B operand, read by the tensor
// cores from shared memory through a descriptor. A block of 384 threads owns a tile of 256 output
// features x BM rows of x and walks K in stages of 64 through a ring of shared-memory stages
// (wgmma_layout.h has the images):
//   warpgroup 0, the producer (56 registers per thread after setmaxnreg):
//     warp 0, one lane: per stage one bulk copy per strip (the strip's 2 units, 1 KiB, L2
//       evict-first when the weights are read once) and one per unit for the scale and zero
//       records, all completing as transaction bytes on the stage's `full` mbarrier; with an x
//       image (GemmParams::x_image, laid out by launch_wgmma_x_image) also the stage's x tile;
//     warps 1-3 (without an x image): x, 4 bytes per lane with cp.async (zero-filled past M and
//       K), stored in the mma's K order and the 128-byte swizzle; with GemmParams::w_lsu (option
//       wgmma_w=lsu) they also copy the stage's weights and records with 16-byte cp.async, and
//       the producer lane copies only the x image; each thread's copies of a stage arrive on
//       `full` when they land (cp.async.mbarrier.arrive.noinc), so it never waits for them and
//       runs as far ahead as the ring allows.
//   warpgroups 1 and 2, the consumers (224 registers): each warp owns one strip. After a stage's
//     `full` wait a thread fences the stage into the async proxy (x landed through the generic
//     one). Per unit it reads its 16-byte word and the records from shared memory, dequantizes 4 A
//     fragments exactly as the mma.sync kernels do (Ops<T>), and the warpgroup issues 4 wgmma
//     m64nBMk16 (2 k16 steps x 2 n16 halves of its 4 strips) as one group; the next unit's
//     dequantization overlaps that group, and a stage is handed back (`empty` mbarrier, one
//     arrival per warp) once the wgmma groups that read it have completed.
// The grid is persistent and stream-K: at most one block per SM, each owning an equal contiguous
// range of (tile, k stage) items (wgmma_layout.h, wg_sk_*); a tile split between blocks is summed
// in block order (fp32 partials, deterministic; up to 8 parts' loads in flight) by the last to
// arrive, or, in the kModeSplit instance (a cooperative launch), by every block whose last tile it
// is, a slice each; the bias is added and y written. Launched as a programmatic dependent (PDL), the first stages' weights are requested
// before the wait for the previous kernel; x, the partials, the counters and y are touched after.
//
// 8-bit layers (P8 instances, launch_wgmma's planes8): a stage is 2 units of the real K. Its
// weight image holds each strip's 2 low-plane units (packed units r + upg (r / upg): one 1 KiB
// copy where they are adjacent, else two of 512 bytes) and, kWPlane bytes on, their twins upg
// units further;
// the low plane's scale records and both planes' zero records (the high plane's kZPlane bytes on);
// x is the compact x of the low-plane rows, copied as any x. A consumer dequantizes each pair of
// words in one pass (Ops<T>::dequant8) into one A fragment.
//
// Clusters of 2 (kC = 2, GemmParams::wg_sched & kWgSchedCluster; option wgmma_cluster, off by
// default: measured no faster on an H100, docs/cuda.md): the two blocks of a cluster, neighbours
// along the features, walk one schedule over tiles of 2 n tiles; each block's producer lane copies
// half of every stage's x tile into both blocks (multicast), every consumer warp releases a stage
// to both blocks' `empty` barriers, and the producer lane waits for every stage's last release
// before it exits (the other block's consumers arrive on this block's barriers to the end).
//
// GemmParams::ablate and ::stages (zero in the plugin) select the diagnostics of bench_kernels
// --wgmma-diag (WgAblate in kernel_params.h): the consumer modes as separate instances
// (launch_wgmma_diag), everything else as run-time branches outside the consumers' wgmma loop.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "device_ops.cuh"
#include "hopper_ops.cuh"
#include "kernels.h"
#include "wgmma_layout.h"
#include "wgmma_ops.cuh"

namespace nibble::cuda {
namespace {

constexpr int kWgThreads = 384;    // the producer warpgroup and two consumer warpgroups
constexpr int kWgConsumers = 256;  // threads of the consumer warpgroups
constexpr int kWgXThreads = 96;    // producer warps 1-3
// With GemmParams::w_lsu warps 1-2 copy a stage's weights (a strip's 1 KiB is 64 chunks of 16
// bytes: chunk `lane` of every strip) and warp 3 its records (2 units x strips x (64 bytes of
// scales + 32 of zero points): 96 chunks for 8 strips, 48 for 4; up to 3 per lane).
// P8: 2 KiB per strip (both planes: 2 chunks per thread of warps 1-2) and the records of both
// planes' zero points (2 x (4 + 2 + 2) x 8 chunks = 128: 4 per lane).
static_assert(kWgUnitsPerStage * 512 / 16 == 64 && kWgUnitsPerStage * kWgStrips * (64 + 2 * 32) / 16 <= 128,
              "w_lsu: the chunk split of warps 1-3");
// 56 x 128 + 224 x 256 = 64512 of the SM's 65536 registers.
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
constexpr int kSmemLimit = 227 * 1024;  // opt-in shared memory per block on sm_90
constexpr int kEpilogueBarrier = 1;     // named barrier of the consumer threads

// The block tile: BN output features x BM rows. BM <= 128: BN 256 (8 strips), each consumer warp
// one strip, both its n16 halves (two m64nBM accumulators). BM 256: BN 128 (4 strips), each
// consumer warp one n16 half of a strip (warpgroup g half g of strips 0-3: one m64n256
// accumulator), so a dequantized fragment feeds 256 rows instead of 128 (wgmma_layout.h).
template <int BM, bool P8 = false>
struct WgTile {
  static_assert(BM % 16 == 0 && BM >= 16 && (BM <= 128 || BM == 256), "wgmma n = BM: 16 ... 128, or 256");
  static constexpr int kPlanes = P8 ? 2 : 1;  // planes of weights and zero records per stage
  static constexpr int kBN = BM > 128 ? 128 : kWgBN;
  static constexpr int kStrips = kBN / kStripN;
  static constexpr int kHalves = kStrips == kWgStrips ? 2 : 1;  // n16 halves of its strip per consumer warp
  static constexpr int kXBytes = BM * kWgXRowBytes;  // a multiple of 1024: swizzle atoms stay aligned
  static constexpr int kWPlane = kStrips * kWgUnitsPerStage * 512;
  static constexpr int kWBytes = kWPlane * kPlanes;
  // Record images keep the 8-strip unit stride of wg_s_offset / wg_z_offset; a stage copies
  // kStrips strips' records per unit.
  static constexpr int kSBytes = kWgUnitsPerStage * kWgStrips * 64;
  static constexpr int kZPlane = kWgUnitsPerStage * kWgStrips * 32;
  static constexpr int kZBytes = kZPlane * kPlanes;
  static constexpr int kSCopy = kWgUnitsPerStage * kStrips * 64, kZCopy = kWgUnitsPerStage * kStrips * 32;  // per plane
  static constexpr int kStageBytes = kXBytes + kWBytes + kSBytes + kZBytes;
  static constexpr int kFixed = 1024 + 2 * 16 * 8 + 128;  // alignment slack, barriers, static smem
  static constexpr int kStages = std::min(16, (kSmemLimit - kFixed) / kStageBytes);
  static constexpr int kSmem = kFixed + kStages * kStageBytes;
  static constexpr int kAcc = BM / 2;           // f32 accumulators per thread of one m64nBMk16
  static constexpr int kAccAll = kHalves * kAcc;  // per consumer thread
  static constexpr int kF4 = kAccAll / 4;         // as float4
  static_assert(kStages >= 3 && kSmem <= kSmemLimit, "stages must fit the shared memory");
};

// Consumer modes of the compiled instances: kWgConsumerBits of GemmParams::ablate. The production
// kernel is mode 0; the others exist only as bench_kernels' diagnostics (launch_wgmma_diag).
constexpr int kModeFull = 0, kModeNone = kWgNoDequant | kWgNoMma;
// The production kernel with the split fix-up (GemmParams::wg_sched) is its own instance, so
// that the other one's registers are not shared with its code (one kernel with both spilled at BM
// 128); the diagnostic modes have only the last-arrival fix-up.
constexpr int kModeSplit = 1 << 14;
static_assert((kModeSplit & (kWgConsumerBits | kModeNone)) == 0, "kModeSplit: a bit of its own");

template <class T, int BM, int kMode, bool P8 = false, int kC = 1>
__global__ void __launch_bounds__(kWgThreads, 1) w4a16_wgmma_kernel(const GemmParams p) {
  using TL = WgTile<BM, P8>;
  using O = Ops<T>;
  constexpr bool kSplit = (kMode & kModeSplit) != 0;
  static_assert(kC == 1 || (kC == 2 && !kSplit), "clusters of 2 blocks, without the split fix-up's waits");
  // Stages of the ring: all that fit, or fewer for the diagnostics (the images stay where they are).
  const int S = p.stages >= 3 && p.stages < TL::kStages ? p.stages : TL::kStages;
  const int ab = p.ablate;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int s_last;
  __shared__ int s_slice[2];  // the split fix-up: this block's chunks [s_slice[0], s_slice[1]) of a tile
  __shared__ WgTail s_sk;         // the stream-K tail and this block's range of it
  __shared__ WgTailStart s_tail;  // this block's whole tiles and where its range of the tail starts
  __shared__ int s_items;         // this block's items

  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const gbase = smem_raw + (base - raw);  // generic address of `base`
  const uint32_t sx = base;                              // kStages x tiles
  const uint32_t sw = sx + TL::kStages * TL::kXBytes;    // kStages weight images
  const uint32_t ss = sw + TL::kStages * TL::kWBytes;    // kStages scale-record images
  const uint32_t sz = ss + TL::kStages * TL::kSBytes;    // kStages zero-record images
  const uint32_t full = sz + TL::kStages * TL::kZBytes;  // kStages mbarriers: the stage is filled
  const uint32_t empty = full + 8 * TL::kStages;         // kStages mbarriers: the stage is consumed

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int KT = p.kt;
  // A cluster of kC blocks (kC = 2: neighbours along the features) walks one schedule: the items of
  // cluster c are those of block c of a grid of gridDim.x / kC blocks over tiles of kC n tiles,
  // block `rank` of the cluster computes n tile kC n + rank of each, and each block copies 1 / kC
  // of every stage's x tile into all the blocks of its cluster (multicast). Partial slots and
  // arrival counters stay per block and per output tile.
  // The schedule's block (the cluster's index) and the block's rank in its cluster (clusters of kC
  // x 1 x 1: %cluster_ctarank is blockIdx.x % kC) are read from blockIdx where used, and the n tiles
  // of the schedule from the parameters: values held in registers through the consumers' loop
  // cost the BM 128 and 256 instances spills (ptxas, nvcc 13.0).
  const auto bidx_of = [] { return int(blockIdx.x) / kC; };
  const auto rank_of = [] { return int(blockIdx.x) % kC; };
  const auto n_tiles_s = [&] { return p.n_tiles / kC; };  // the plan sends kC > 1 only where kC divides n_tiles
  const int tiles = p.m_tiles * n_tiles_s();  // tiles * KT < 2^31: the plan checks
  const int nblocks = int(gridDim.x) / kC;
  // The block's items (wgmma_layout.h): whole tiles in raster order, then its range of the
  // stream-K tail; without kWgSchedWaves all of it stream-K in the plain order.
  auto coords = [&](int t, int* mti, int* nti) {
    wg_tile_coords(t, p.m_tiles, n_tiles_s(), (p.wg_sched & kWgSchedWaves) ? kWgRasterGroup : p.m_tiles, mti, nti);
    *nti = *nti * kC + rank_of();
  };
  const bool zp = p.zero_rec != nullptr;
  const unsigned char* const x_image = static_cast<const unsigned char*>(p.x_image);
  const bool w_lsu = p.w_lsu != 0;               // weights and records by warps 1-3, not bulk copies
  const bool x_warps = !x_image || w_lsu;        // warps 1-3 copy something
  const int consumers = (ab & kWgOneWg) ? kWgConsumers / 2 : kWgConsumers;  // threads that consume
  // Packed unit of unit u (0, 1) of stage kt. P8: the low plane's unit of real unit r = 2 kt + u,
  // r + upg (r / upg) (its twin upg units on); a second unit past the real K (ku / 2 odd) reads
  // the first again, which x, zero there, cancels.
  const int upg = !P8 || p.g_magic == 0 ? 1 : int((uint64_t(1) << 32) / (p.g_magic - 1));
  auto stage_unit = [&](int kt, int u) {
    if constexpr (!P8) return 2 * kt + u;
    const int r = 2 * kt + u < p.ku / 2 ? 2 * kt + u : 2 * kt;
    return r + upg * unit_group(r, p.g_magic);
  };

  if (tid == 0) {
    s_sk = wg_tail(bidx_of(), nblocks, tiles, KT, (p.wg_sched & kWgSchedWaves) != 0);
    s_items = WgItems::plan(s_sk, KT, nblocks, &s_tail);
    for (int s = 0; s < S; ++s) {
      mbar_init(full + 8 * s, x_warps ? 1 + kWgXThreads : 1);
      mbar_init(empty + 8 * s, (kC > 1 && !(ab & kWgLocalRelease) ? kC : 1) * consumers / 32);  // every consumer warp of the cluster
    }
    fence_mbar_init();
  }
  // The barriers of every block of the cluster are initialized before any is used from another.
  if constexpr (kC > 1)
    cluster_sync();
  else
    __syncthreads();
  const int n_items = s_items;
  WgItems items;
  items.init(bidx_of(), s_tail);

  if (warp < 4) {
    regs_dealloc<kProducerRegs>();
    if (warp == 0) {
      // ---- bulk copies: weights and records of every item, as far ahead as the stages allow ----
      if (lane != 0 || (ab & kWgNoWait)) return;
      const bool load_w = !(ab & kWgNoW) && !w_lsu, load_x = x_image && !(ab & kWgNoX);
      const uint32_t x_bytes = (ab & kWgHalfX) ? TL::kXBytes / 2 : TL::kXBytes;
      const uint64_t w_policy = l2_policy(p.evict_first != 0), r_policy = l2_policy(false);
      const uint32_t tx =
          (load_w ? TL::kWBytes + TL::kSCopy + (zp ? TL::kZCopy * TL::kPlanes : 0) : 0) + (load_x ? x_bytes : 0);
      // With the x image, x is one more bulk copy per stage; those of the first stages go out after
      // the wait for the previous kernel (which may write x), their weights before it.
      auto copy_x = [&](int s, int t, int kt) {
        int mti, nti;
        coords(t, &mti, &nti);
        const unsigned char* src = x_image + wg_x_image_tile(mti, kt, KT, BM);
        if (kC > 1 && !(ab & kWgNoMulticast)) {
          // This block's 1 / kC of the tile, into every block of the cluster (each expects all of it).
          const uint32_t part = x_bytes / kC, rank = uint32_t(rank_of());
          bulk_copy_multicast(sx + s * TL::kXBytes + rank * part, src + rank * part, part, full + 8 * s,
                              uint16_t((1u << kC) - 1), r_policy);
        } else {
          bulk_copy(sx + s * TL::kXBytes, src, x_bytes, full + 8 * s, r_policy);
        }
      };
      const int n = n_items, early = min(S, n);
      WgItems it = items;
      int s = 0;
      uint32_t ph = 0;  // parity of the current use of stage s
      for (int i = 0; i < n; ++i) {
        const int t = it.tile, kt = it.kt;
        if (i >= S) mbar_wait(empty + 8 * s, ph ^ 1);
        const uint32_t bar = full + 8 * s;
        if (load_w || load_x) mbar_arrive_expect_tx(bar, tx);
        if (load_x && i >= early) copy_x(s, t, kt);
        if (load_w) {
          int mti, nti;
          coords(t, &mti, &nti);
          // A strip's two units in one 1 KiB copy where they are adjacent (always without P8),
          // else one copy each (the same bytes on the barrier).
          const int u0 = stage_unit(kt, 0), u1 = stage_unit(kt, 1);
          const auto* w = static_cast<const unsigned char*>(p.w) + int64_t(nti) * TL::kStrips * p.ku * 512;
#pragma unroll
          for (int pl = 0; pl < TL::kPlanes; ++pl)
#pragma unroll
            for (int j = 0; j < TL::kStrips; ++j) {
              const uint32_t dst = sw + s * TL::kWBytes + pl * TL::kWPlane + wg_w_offset(j, 0, 0);
              const auto* src = w + (int64_t(j) * p.ku + pl * upg) * 512;
              if (u1 == u0 + 1) {
                bulk_copy(dst, src + int64_t(u0) * 512, 1024, bar, w_policy);
              } else {
                bulk_copy(dst, src + int64_t(u0) * 512, 512, bar, w_policy);
                bulk_copy(dst + 512, src + int64_t(u1) * 512, 512, bar, w_policy);
              }
            }
#pragma unroll
          for (int u = 0; u < kWgUnitsPerStage; ++u) {
            const int64_t rec =
                int64_t(unit_group(u ? u1 : u0, p.g_magic)) * p.strips + int64_t(nti) * TL::kStrips;
            bulk_copy(ss + s * TL::kSBytes + wg_s_offset(u, 0, 0),
                      static_cast<const unsigned char*>(p.scale_rec) + rec * 64, TL::kStrips * 64, bar,
                      r_policy);
            if (zp)
#pragma unroll
              for (int pl = 0; pl < TL::kPlanes; ++pl)
                bulk_copy(sz + s * TL::kZBytes + pl * TL::kZPlane + wg_z_offset(u, 0, 0),
                          p.zero_rec + (rec + pl * p.strips) * 32, TL::kStrips * 32, bar, r_policy);
          }
        } else if (!load_x) {
          mbar_arrive(bar);
        }
        if (load_x && i == early - 1) {
          grid_dependency_wait();
          WgItems j = items;
          for (int q = 0; q <= i; ++q, j.next(KT, nblocks, s_tail)) copy_x(q, j.tile, j.kt);  // stages 0 .. early - 1
        }
        it.next(KT, nblocks, s_tail);
        if (++s == S) s = 0, ph ^= 1;
      }
      if constexpr (kC > 1) {
        // The other blocks' consumers arrive on this block's `empty` barriers until their last
        // stage, so this block's shared memory must outlive those arrivals: the lane waits for every
        // stage's last release (the waits the next S items would make) before it exits.
        for (int i = n; i < n + S; ++i) {
          if (i >= S) mbar_wait(empty + 8 * s, ph ^ 1);
          if (++s == S) s = 0, ph ^= 1;
        }
      }
      return;
    }
    if (!x_warps || (ab & kWgNoWait)) return;
    // ---- x (without an x image): 4-byte cp.async per lane and row; with w_lsu also the stage's
    // weights and records, 16-byte cp.async. Each stage's copies arrive on `full` when they land
    // (the thread never waits for them), so these warps run as far ahead as the ring allows ----
    const bool copy_x = !x_image && !(ab & kWgNoX), old_x = (ab & kWgOldX) != 0;
    const bool copy_w = w_lsu && !(ab & kWgNoW);
    const int D = min(6, S - 2);  // kWgOldX: copy groups in flight before a thread waits for the oldest
    const int xw = warp - 1, xt = tid - 32;  // xt: 0 .. kWgXThreads - 1
    const uint64_t w_policy = l2_policy(p.evict_first != 0), r_policy = l2_policy(false);
    if (!x_image) grid_dependency_wait();  // x may be the previous kernel's output (weights never are)
    const T* xg = static_cast<const T*>(p.x);
    WgItems it = items;
    int s = 0;
    uint32_t ph = 0;
    const int n = n_items;
    for (int li = 0; li < n; ++li, it.next(KT, nblocks, s_tail)) {
      const int kt = it.kt;
      if (li >= S) mbar_wait(empty + 8 * s, ph ^ 1);
      int mti, nti;
      coords(it.tile, &mti, &nti);
      const uint32_t xs = sx + s * TL::kXBytes;
      const int64_t k = int64_t(kt) * kTileK + 2 * lane;
      const bool k_ok = k < p.kx;
      if (copy_x)
        for (int r = xw; r < BM; r += 3) {
          const int m = mti * BM + r;
          const bool ok = k_ok && m < p.m;
          cp_async4(xs + wg_x_offset(r, lane), ok ? xg + int64_t(m) * p.ldx + k : xg, ok ? 4 : 0);
        }
      if (copy_w) {
        // Warps 1-2: chunk xt (16 bytes) of each of the stage's strips (a strip's stage is 2 units,
        // 1 KiB: one warp instruction is one 512-byte run), of each plane (P8). Warp 3: the
        // records, 2 units x (4 scale + 2 zero-point chunks per strip, P8 2 more), up to 3 per lane
        // (P8: 4).
        const int u0 = stage_unit(kt, 0), u1 = stage_unit(kt, 1);
        if (xt < 64) {
          // Chunk xt of a strip's 1 KiB: unit xt / 32, 16 bytes (xt % 32) into it.
          const unsigned char* w = static_cast<const unsigned char*>(p.w) +
                                   (int64_t(nti) * TL::kStrips * p.ku + (xt < 32 ? u0 : u1)) * 512 + 16 * (xt & 31);
          const uint32_t dw = sw + s * TL::kWBytes + 16 * xt;
#pragma unroll
          for (int pl = 0; pl < TL::kPlanes; ++pl)
#pragma unroll
            for (int j = 0; j < TL::kStrips; ++j)
              cp_async16_policy(dw + pl * TL::kWPlane + wg_w_offset(j, 0, 0),
                                w + (int64_t(j) * p.ku + pl * upg) * 512, w_policy);
        } else {
          // Chunks per unit: scale records, then each plane's zero-point records.
          constexpr int kSc = TL::kStrips * 4, kZc = TL::kStrips * 2 * TL::kPlanes, kZp = TL::kStrips * 2;
          constexpr int kChunks = kWgUnitsPerStage * (kSc + kZc), kPerLane = (kChunks + 31) / 32;
#pragma unroll
          for (int i = 0; i < kPerLane; ++i) {
            const int rc = xt - 64 + 32 * i;  // scale chunks first, then zero-point chunks
            if (rc >= kChunks) break;
            const bool sc = rc < kWgUnitsPerStage * kSc;
            const int rz = rc - kWgUnitsPerStage * kSc;
            const int u = sc ? rc / kSc : rz / kZc, c = sc ? rc % kSc : rz % kZc;
            const int64_t rec = int64_t(unit_group(u ? u1 : u0, p.g_magic)) * p.strips + int64_t(nti) * TL::kStrips;
            if (sc) {
              cp_async16_policy(ss + s * TL::kSBytes + wg_s_offset(u, 0, 0) + 16 * c,
                                static_cast<const unsigned char*>(p.scale_rec) + rec * 64 + 16 * c, r_policy);
            } else if (zp) {
              const int pl = c / kZp, cz = c % kZp;  // plane pl's records: the next packed group's
              cp_async16_policy(sz + s * TL::kZBytes + pl * TL::kZPlane + wg_z_offset(u, 0, 0) + 16 * cz,
                                p.zero_rec + (rec + pl * p.strips) * 32 + 16 * cz, r_policy);
            }
          }
        }
      }
      if (old_x) {
        cp_async_commit();
        if (li >= D) {
          cp_async_wait_upto6(D);  // the copies of item li - D have landed
          fence_proxy_async();
          mbar_arrive(full + 8 * ((li - D) % S));
        }
      } else {
        cp_async_arrive_noinc(full + 8 * s);
      }
      if (++s == S) s = 0, ph ^= 1;
    }
    cp_async_wait<0>();  // nothing of this thread's still in flight when it exits
    if (old_x) {
      fence_proxy_async();
      for (int li = n > D ? n - D : 0; li < n; ++li) mbar_arrive(full + 8 * (li % S));
    }
    return;
  }

  // ---- consumers ----
  if (tid - 128 >= consumers) return;  // kWgOneWg: the second warpgroup leaves its strips undone
  regs_alloc<kConsumerRegs>();
  const int cw = warp - 4;     // consumer warp 0..7
  // The strip of the tile this warp dequantizes, and its first n16 half (TL::kHalves of them).
  const int strip = TL::kHalves == 2 ? cw : (cw & 3), half0 = TL::kHalves == 2 ? 0 : (cw >> 2);
  const int ctid = tid - 128;  // 0..255
  const int gid = lane >> 2;
  grid_dependency_wait();  // the partials, counters and y may still be in use by the previous kernel
  const unsigned char* const w_img = gbase + (sw - base);
  const unsigned char* const s_img = gbase + (ss - base);
  const unsigned char* const z_img = gbase + (sz - base);

  // How tile t is shared between blocks: blocks bf..bl hold its parts; block b's partial goes to
  // slot 2b if this is its first tile, else 2b + 1 (a block has at most two shared tiles: its
  // first and its last). Only bf can start before the tile, so only its slot needs a division
  // (64-bit divisions are calls: computed before the accumulators are live, they spill nothing).
  struct Sharing {
    bool shared;
    int64_t bf, bl, slot_bf, slot_mine;
  };
  // Only tiles of the stream-K tail can be shared; items and tiles are counted from the tail's
  // first here (the tail is read from shared memory rather than kept in registers).
  auto sharing = [&](int t, bool whole) {
    Sharing sh{false, 0, 0, 0, 0};
    if (whole) return sh;
    const WgTail tail = s_sk;
    const int64_t tt = t - tail.whole, t0 = tt * KT, t1 = t0 + KT;
    sh.shared = !(tail.begin <= t0 && tail.end >= t1);
    if (!sh.shared) return sh;
    auto slot_of = [&](int64_t b) { return 2 * b + (wg_sk_begin(b, nblocks, tail.work) / KT == tt ? 0 : 1); };
    sh.bf = wg_sk_block_of(t0, nblocks, tail.work);
    sh.bl = wg_sk_block_of(t1 - 1, nblocks, tail.work);
    sh.slot_bf = slot_of(sh.bf);
    sh.slot_mine = 2 * int64_t(bidx_of()) + (tail.begin / KT == tt ? 0 : 1);
    return sh;
  };

  // Stage st goes back to the producers: to this block's, and with a cluster to every block's
  // (each block's producer multicasts into all of them, so it waits for all their consumers).
  auto release = [&](int st) {
    mbar_arrive(empty + 8 * st);
    if constexpr (kC > 1) {
      if (!(ab & kWgLocalRelease))
#pragma unroll
        for (int c = 1; c < kC; ++c) mbar_arrive_cluster(empty + 8 * st, uint32_t((rank_of() + c) % kC));
    }
  };

  // The consumer loop in one of the modes (kModeFull in production; the others for the
  // diagnostics): every mode waits for each stage, releases it and runs the same epilogue.
  auto consume = [&](auto mode_tag) {
    constexpr int kM = decltype(mode_tag)::value;
    constexpr bool kDequant = !(kM & kWgNoDequant), kMma = !(kM & kWgNoMma);
    // Groups left in flight while the next unit is dequantized; with two (kWgDeep) the previous
    // stage's last group may still run at unit 0, so that stage goes back one unit later.
    constexpr int kInFlight = (kM & kWgDeep) ? 2 : 1, kReleaseUnit = kInFlight - 1;
    float acc[TL::kHalves][TL::kAcc];  // [n16 half][m64nBM accumulator]
    auto fence_acc = [&]() {
#pragma unroll
      for (int nt = 0; nt < TL::kHalves; ++nt) fence_operands(acc[nt]);
    };
    auto zero_acc = [&]() {
#pragma unroll
      for (int nt = 0; nt < TL::kHalves; ++nt)
#pragma unroll
        for (int i = 0; i < TL::kAcc; ++i) acc[nt][i] = 0.f;
    };

    // Epilogue of tile t: fix up stream-K partials if the tile is shared, then bias and y.
    auto epilogue = [&](int t, const Sharing& sh) {
      int mti, nti;
      coords(t, &mti, &nti);
      T* y = static_cast<T*>(p.y);
      const T* bias = static_cast<const T*>(p.bias);
      float bv[TL::kHalves][2];  // [n16 half][(i >> 1) & 1]: the elements i of one such pair share a feature
#pragma unroll
      for (int nt = 0; nt < TL::kHalves; ++nt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int f, r;
          wg_output_position(TL::kHalves, cw, lane, nt, 2 * h, &f, &r);
          const int n = nti * TL::kBN + f;
          bv[nt][h] = bias && n < p.n ? O::to_float(bias[n]) : 0.f;
        }
      // Element e (0 .. kAccAll - 1) of this thread's tile result: acc[e / kAcc][e % kAcc].
      auto store = [&](int e, float v) {
        const int nt = e / TL::kAcc, i = e % TL::kAcc;
        int f, r;
        wg_output_position(TL::kHalves, cw, lane, nt, i, &f, &r);
        const int n = nti * TL::kBN + f, m = mti * BM + r;
        if (n < p.n && m < p.m && !(ab & kWgNoY)) y[int64_t(m) * p.n + n] = O::from_float(v + bv[nt][(i >> 1) & 1]);
      };
      if (!sh.shared || (ab & kWgNoFixup)) {
#pragma unroll
        for (int e = 0; e < TL::kAccAll; ++e) store(e, acc[e / TL::kAcc][e % TL::kAcc]);
        return;
      }
      const int64_t bf = sh.bf, bl = sh.bl;
      // [slot][float4 j of a thread][consumer thread]: float4 j of every thread of a warp is one
      // contiguous 512-byte run, so each store and load of the fix-up is coalesced. (Each
      // thread's accumulators as one contiguous run put the lanes of a warp 2 kAcc floats apart:
      // 32 half-used sectors per access.) part_of(b)[j * kWgConsumers] is float4 j of block b.
      constexpr int64_t kSlotF4 = int64_t(TL::kF4) * kWgConsumers;
      auto part_of = [&](int64_t b) {
        const int64_t slot = (b == bf ? sh.slot_bf : 2 * b) * kC + rank_of();
        return reinterpret_cast<const float4*>(p.partials) + slot * kSlotF4 + ctid;
      };
      float4* mine = reinterpret_cast<float4*>(p.partials) + (sh.slot_mine * kC + rank_of()) * kSlotF4 + ctid;
      // The tile's arrival counter (per output tile), formed where used: a pointer held across the
      // sum below costs the BM 128 and 256 instances 40 bytes of spills (ptxas, nvcc 13.0).
      auto counter = [&]() { return p.counters + (int64_t(t) * kC + rank_of()); };
#pragma unroll
      for (int j = 0; j < TL::kF4; ++j) {
        const int e = 4 * j, nt = e / TL::kAcc, i = e % TL::kAcc;
        __stcg(mine + j * kWgConsumers, make_float4(acc[nt][i], acc[nt][i + 1], acc[nt][i + 2], acc[nt][i + 3]));
      }
      __threadfence();
      named_barrier(kEpilogueBarrier, consumers);
      // The float4 indices j [s_slice[0], s_slice[1]) this block sums over all parts: all of them
      // for the last to arrive; in the kModeSplit instance blocks bf .. bl - 1 (the tile is the
      // last of each, so they all get here at about the end of the kernel) wait for every part
      // and take one slice each, while block bl (whose part of the tile comes first in its range)
      // goes on. The slices are whole chunks of the sum below and their bounds stay in shared
      // memory (bounds and per-float4 predicates in registers spilled at BM 128).
      if constexpr (kSplit) {
        constexpr int kChunkF4 = TL::kF4 < 8 ? TL::kF4 : 8, kChunks = (TL::kF4) / kChunkF4;
        const int parts = int(bl - bf) + 1;
        if (ctid == 0) {
          atomicAdd(counter(), 1);
          const int pi = int(int64_t(bidx_of()) - bf), np = parts - 1;
          s_slice[0] = wg_split_chunk(pi, np, kChunks) * kChunkF4;
          s_slice[1] = wg_split_chunk(pi + 1, np, kChunks) * kChunkF4;
          if (int64_t(bidx_of()) != bl) wait_counter_at_least(counter(), parts);
        }
        if (int64_t(bidx_of()) == bl) return;
        named_barrier(kEpilogueBarrier, consumers);
      } else {
        if (ctid == 0) {
          s_last = atomicAdd(counter(), 1) == int(bl - bf);
          s_slice[0] = 0;
          s_slice[1] = TL::kF4;
        }
        named_barrier(kEpilogueBarrier, consumers);
        if (!s_last) return;
      }
      __threadfence();
      // Last to arrive: sum all parts in block order, its own re-read too, so the sum is the same
      // whichever block is last.
      if (ab & kWgOldFixup) {
        // As first written: one part at a time (one L2 round trip per part and chunk of 8).
        zero_acc();
        constexpr int kChunk = TL::kF4 < 8 ? TL::kF4 : 8;
#pragma unroll
        for (int j0 = 0; j0 < TL::kF4; j0 += kChunk)
          for (int64_t b = bf; b <= bl; ++b) {
            const float4* part = part_of(b);
#pragma unroll
            for (int j = j0; j < j0 + kChunk; ++j) {
              const float4 v = __ldcg(part + j * kWgConsumers);
              const int e = 4 * j, nt = e / TL::kAcc, i = e % TL::kAcc;
              acc[nt][i] += v.x;
              acc[nt][i + 1] += v.y;
              acc[nt][i + 2] += v.z;
              acc[nt][i + 3] += v.w;
            }
          }
#pragma unroll
        for (int e = 0; e < TL::kAccAll; ++e) store(e, acc[e / TL::kAcc][e % TL::kAcc]);
      } else {
        // The accumulators are in `mine` now, so their registers hold loads instead: a chunk of
        // kChunk float4 from kParts parts at once (32 float4 in flight), summed in block order,
        // then stored. A tile shared by 9 blocks costs 2 round trips per chunk, not 9.
        constexpr int kChunk = TL::kF4 < 8 ? TL::kF4 : 8, kParts = 32 / kChunk;
#pragma unroll
        for (int j0 = 0; j0 < TL::kF4; j0 += kChunk) {
          const volatile int* slice = s_slice;  // read at each chunk, not held in registers
          if (j0 < slice[0] || j0 >= slice[1]) continue;  // a chunk outside this block's slice
          float4 sum[kChunk];
#pragma unroll
          for (int j = 0; j < kChunk; ++j) sum[j] = make_float4(0.f, 0.f, 0.f, 0.f);
          for (int64_t b0 = bf; b0 <= bl; b0 += kParts) {
            float4 v[kParts][kChunk];
#pragma unroll
            for (int q = 0; q < kParts; ++q) {
              const float4* part = part_of(b0 + q <= bl ? b0 + q : bl);
#pragma unroll
              for (int j = 0; j < kChunk; ++j)
                v[q][j] = b0 + q <= bl ? __ldcg(part + (j0 + j) * kWgConsumers) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int q = 0; q < kParts; ++q)
              if (b0 + q <= bl)
#pragma unroll
                for (int j = 0; j < kChunk; ++j) {
                  sum[j].x += v[q][j].x;
                  sum[j].y += v[q][j].y;
                  sum[j].z += v[q][j].z;
                  sum[j].w += v[q][j].w;
                }
          }
#pragma unroll
          for (int j = 0; j < kChunk; ++j) {
            const int e = 4 * (j0 + j);
            store(e, sum[j].x);
            store(e + 1, sum[j].y);
            store(e + 2, sum[j].z);
            store(e + 3, sum[j].w);
          }
        }
      }
      if constexpr (!kSplit) {
        if (ctid == 0) *counter() = 0;  // ready for the next launch (stream order)
      } else {
        // parts arrivals, then one per slice: the last of those leaves the counter zero
        named_barrier(kEpilogueBarrier, consumers);
        if (ctid == 0 && atomicAdd(counter(), 1) == 2 * int(bl - bf)) *counter() = 0;
      }
    };

    // One tile at a time: its k stages in this block's range, then its epilogue. (The
    // accumulators cross the inner loop's back edge only while wgmma groups are in flight, which
    // lets ptxas keep them in place; a join of in-flight and finished accumulators makes it wait
    // for the group.)
    WgItems it = items;
    int i = 0, s = 0, prev = -1;
    uint32_t ph = 0;
    while (i < n_items) {
      const int kt0 = it.kt, kt1 = min(KT, kt0 + (n_items - i));
      const Sharing sh = sharing(it.tile, it.in_whole());  // here, where no accumulator is live across its divisions
      zero_acc();
      for (int kt = kt0; kt < kt1; ++kt) {
        if (!(ab & kWgNoWait)) mbar_wait(full + 8 * s, ph);
        // x copied by the x warps' cp.async landed through the generic proxy and wgmma reads it
        // through the async one: a fence. The x image's bulk copy (and the weights' bulk copies)
        // land in the async proxy and complete on the barrier, which makes them visible to the
        // waiting threads; the lsu weights are cp.async read by ld.shared: no fence for those.
        if (!x_image || (ab & kWgProxyFence)) fence_proxy_async();
        if constexpr (!kDequant && !kMma) {
          if (lane == 0) release(s);
        } else {
#pragma unroll
          for (int u = 0; u < kWgUnitsPerStage; ++u) {
            // [k16 step][n16 half]: word 2 ks + nt of the lane's unit word (q.x, q.y: step 0;
            // q.z, q.w: step 1), nt from half0.
            uint32_t a[2][TL::kHalves][4];
            const uint4 q =
                *reinterpret_cast<const uint4*>(w_img + s * TL::kWBytes + wg_w_offset(strip, u, lane));
            const uint32_t qw[2][2] = {{q.x, q.y}, {q.z, q.w}};
            // P8: the twins' words (the high plane), the same positions kWPlane bytes on.
            uint4 qh = q;
            if constexpr (P8)
              qh = *reinterpret_cast<const uint4*>(w_img + s * TL::kWBytes + TL::kWPlane + wg_w_offset(strip, u, lane));
            [[maybe_unused]] const uint32_t qhw[2][2] = {{qh.x, qh.y}, {qh.z, qh.w}};
            if constexpr (kDequant) {
              const uint2 sr =
                  *reinterpret_cast<const uint2*>(s_img + s * TL::kSBytes + wg_s_offset(u, strip, gid));
              uint32_t zb =
                  zp ? *reinterpret_cast<const uint32_t*>(z_img + s * TL::kZBytes + wg_z_offset(u, strip, gid))
                     : 0x08080808u;
              // Record pair r of the strip: 0, 1 (half 0) in sr.x, 2, 3 (half 1) in sr.y; zero-point
              // byte r of zb. A warp with one half takes its pair and bytes to the front.
              const uint32_t sh[2] = {TL::kHalves == 2 || half0 == 0 ? sr.x : sr.y, sr.y};
              if (TL::kHalves == 1) zb >>= 16 * half0;
              uint32_t nz[P8 ? 8 : 4];
              if constexpr (P8) {
                uint32_t zbh = *reinterpret_cast<const uint32_t*>(z_img + s * TL::kZBytes + TL::kZPlane +
                                                                  wg_z_offset(u, strip, gid));
                if (TL::kHalves == 1) zbh >>= 16 * half0;
                O::zero_codes_pair(zb, zbh, nz);
              } else {
                O::zero_codes(zb, nz);
              }
#pragma unroll
              for (int nt = 0; nt < TL::kHalves; ++nt) {
                const uint32_t s_lo = prmt(sh[nt], sh[nt], 0x1010u), s_hi = prmt(sh[nt], sh[nt], 0x3232u);
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                  const int wsel = TL::kHalves == 2 ? nt : half0;  // the word's n16 half
                  if constexpr (P8)
                    O::dequant8(qw[ks][wsel], qhw[ks][wsel], s_lo, s_hi, nz, 2 * nt, a[ks][nt]);
                  else
                    O::dequant(qw[ks][wsel], s_lo, s_hi, nz[2 * nt], nz[2 * nt + 1], a[ks][nt]);
                }
              }
            } else {
              // The packed words themselves as A fragments: the shared load stays, the
              // dequantization's arithmetic goes.
#pragma unroll
              for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int ks = 0; ks < 2; ++ks)
#pragma unroll
                  for (int nt = 0; nt < TL::kHalves; ++nt) a[ks][nt][j] = qw[ks][nt];
            }
            if constexpr (kMma) {
              fence_acc();
              wgmma_fence();
#pragma unroll
              for (int ks = 0; ks < 2; ++ks) {
                const uint64_t desc = wg_x_desc(sx + s * TL::kXBytes, 2 * u + ks);
#pragma unroll
                for (int nt = 0; nt < TL::kHalves; ++nt) Wgmma<T, BM>::mma(acc[nt], a[ks][nt], desc);
              }
              wgmma_commit();
              wgmma_wait<kInFlight>();  // older groups are done: their registers and stages are free
              fence_acc();
            } else {
              // Keeps the dequantization live without an mma: fold its results into one accumulator.
              uint32_t f = 0;
#pragma unroll
              for (int j = 0; j < 8 * TL::kHalves; ++j) f ^= a[j / (4 * TL::kHalves)][(j >> 2) % TL::kHalves][j & 3];
              acc[0][0] = __uint_as_float(__float_as_uint(acc[0][0]) ^ f);
            }
            if (u == kReleaseUnit && prev >= 0) {
              if (lane == 0) release(prev);
              prev = -1;
            }
          }
          prev = s;
        }
        if (++s == S) s = 0, ph ^= 1;
      }
      i += kt1 - kt0;
      if constexpr (kMma) {
        wgmma_wait<0>();
        fence_acc();
      }
      if (prev >= 0 && lane == 0) release(prev);
      prev = -1;
      if (i == n_items) grid_launch_dependents();
      if (!(ab & kWgNoEpilogue)) epilogue(it.tile, sh);
      it.tile_end(KT, nblocks, s_tail);
    }
  };

  consume(std::integral_constant<int, kMode>{});
}

template <class T, int BM, int kMode, bool P8 = false, int kC = 1>
cudaError_t set_smem_limit() {
  return cudaFuncSetAttribute(w4a16_wgmma_kernel<T, BM, kMode, P8, kC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              WgTile<BM, P8>::kSmem);
}

// The tiles with an instance for clusters of 2 blocks (x multicast): the ones of M > 128, 4-bit.
constexpr bool has_cluster_instance(int bm, bool p8) { return !p8 && bm >= 128; }

// Blocks of the instance for clusters of 2 that the device holds at once (clusters x 2).
template <class T, int BM>
cudaError_t cluster_slots(int* slots) {
  using TL = WgTile<BM>;
  cudaError_t e = set_smem_limit<T, BM, kModeFull, false, 2>();
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(2);
  cfg.blockDim = dim3(kWgThreads);
  cfg.dynamicSmemBytes = TL::kSmem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  e = cudaOccupancyMaxActiveClusters(&clusters, w4a16_wgmma_kernel<T, BM, kModeFull, false, 2>, &cfg);
  *slots = 2 * clusters;
  return e;
}

template <class T, int BM, bool P8>
cudaError_t setup_wg(KernelInfo& info, const char* name, int sms) {
  using TL = WgTile<BM, P8>;
  cudaError_t e = set_smem_limit<T, BM, kModeFull, P8>();
  if (e == cudaSuccess) e = set_smem_limit<T, BM, kModeFull | kModeSplit, P8>();
  if (e != cudaSuccess) return e;
  int per_sm = 0;
  e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, w4a16_wgmma_kernel<T, BM, kModeFull, P8>, kWgThreads,
                                                    TL::kSmem);
  if (e != cudaSuccess) return e;
  info = KernelInfo{name, TL::kBN, BM, kWgThreads, TL::kSmem, per_sm * sms, kWgUnitsPerStage, 0};
  if constexpr (has_cluster_instance(BM, P8)) {
    // A device that cannot hold a cluster of these blocks (or a runtime that cannot tell) gets
    // none: the plan then never asks for one.
    if (cluster_slots<T, BM>(&info.cluster_slots) != cudaSuccess) {
      (void)cudaGetLastError();
      info.cluster_slots = 0;
    }
  }
  return cudaSuccess;
}

std::atomic<int> g_cooperative_refusals{0};

template <class T, int BM, int kMode, bool P8 = false, int kC = 1>
cudaError_t launch_wg(const GemmParams& p, int grid, cudaStream_t stream) {
  using TL = WgTile<BM, P8>;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(grid));
  cfg.blockDim = dim3(kWgThreads);
  cfg.dynamicSmemBytes = TL::kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[3]{};
  cfg.attrs = attrs;
  if constexpr (kC > 1) {
    if (grid % kC != 0) return cudaErrorInvalidValue;
    attrs[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attrs[cfg.numAttrs].val.clusterDim.x = kC;
    attrs[cfg.numAttrs].val.clusterDim.y = 1;
    attrs[cfg.numAttrs++].val.clusterDim.z = 1;
  }
  if (p.overlap) {
    attrs[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if constexpr (kMode == kModeFull && kC == 1) {
    if (p.wg_sched & kWgSchedSplitFixup) {
      // The split fix-up waits for other blocks, so every block must be resident at once: a
      // cooperative launch, which the runtime refuses rather than run otherwise (a device shared
      // under MPS, too many blocks). Refused, the same call runs with the last-arrival fix-up.
      attrs[cfg.numAttrs].id = cudaLaunchAttributeCooperative;
      attrs[cfg.numAttrs++].val.cooperative = 1;
      const cudaError_t e = cudaLaunchKernelEx(&cfg, w4a16_wgmma_kernel<T, BM, kModeFull | kModeSplit, P8>, p);
      if (e == cudaSuccess) return e;
      (void)cudaGetLastError();  // the refusal is not sticky; clear it before the second launch
      g_cooperative_refusals.fetch_add(1, std::memory_order_relaxed);
      --cfg.numAttrs;
    }
  }
  return cudaLaunchKernelEx(&cfg, w4a16_wgmma_kernel<T, BM, kMode, P8, kC>, p);
}

// The production kernel: with clusters of 2 blocks where the plan asked for them (kWgSchedCluster;
// only for the tiles that have that instance), else one block per tile walk.
template <class T, int BM, bool P8>
cudaError_t launch_wg_full(const GemmParams& p, int grid, cudaStream_t stream) {
  if constexpr (has_cluster_instance(BM, P8)) {
    if (p.wg_sched & kWgSchedCluster) return launch_wg<T, BM, kModeFull, false, 2>(p, grid, stream);
  }
  if (p.wg_sched & kWgSchedCluster) return cudaErrorInvalidValue;  // no such instance: a plan error
  return launch_wg<T, BM, kModeFull, P8>(p, grid, stream);
}

//                                   BM
#define NIBBLE_CUDA_WGMMA_VARIANTS(X) \
  X(kWg16, 16)                        \
  X(kWg32, 32)                        \
  X(kWg64, 64)                        \
  X(kWg128, 128)                      \
  X(kWg256, 256)

// The diagnostic instances: fp16, the tiles the diagnostics time (wgmma_diag.sh), each consumer
// mode other than the production one.
#define NIBBLE_CUDA_WGMMA_DIAG_TILES(X) \
  X(kWg16, 16)                          \
  X(kWg64, 64)                          \
  X(kWg128, 128)
#define NIBBLE_CUDA_WGMMA_DIAG_MODES(X, BM) \
  X(BM, kWgNoDequant)                       \
  X(BM, kWgNoMma)                           \
  X(BM, kModeNone)                          \
  X(BM, kWgDeep)

}  // namespace

cudaError_t setup_wgmma_kernels(KernelInfo (*info)[kNumKernels], KernelInfo (*info8)[kNumKernels], int sms) {
  cudaError_t e = cudaSuccess;
#define NIBBLE_SETUP_WG(id, BM)                                                                              \
  if ((e = setup_wg<__half, BM, false>(info[0][id], kKernelNames[id], sms)) != cudaSuccess) return e;        \
  if ((e = setup_wg<__nv_bfloat16, BM, false>(info[1][id], kKernelNames[id], sms)) != cudaSuccess) return e; \
  if ((e = setup_wg<__half, BM, true>(info8[0][id], kKernelNames[id], sms)) != cudaSuccess) return e;        \
  if ((e = setup_wg<__nv_bfloat16, BM, true>(info8[1][id], kKernelNames[id], sms)) != cudaSuccess) return e;
  NIBBLE_CUDA_WGMMA_VARIANTS(NIBBLE_SETUP_WG)
#undef NIBBLE_SETUP_WG
  return cudaSuccess;
}

int wgmma_cooperative_refusals() { return g_cooperative_refusals.load(std::memory_order_relaxed); }

cudaError_t launch_wgmma(KernelId id, Act act, const GemmParams& p, int grid, bool planes8, cudaStream_t stream) {
#define NIBBLE_LAUNCH_WG(kid, BM)                                                                              \
  case kid:                                                                                                    \
    if (planes8)                                                                                               \
      return act == Act::f16 ? launch_wg_full<__half, BM, true>(p, grid, stream)                               \
                             : launch_wg_full<__nv_bfloat16, BM, true>(p, grid, stream);                       \
    return act == Act::f16 ? launch_wg_full<__half, BM, false>(p, grid, stream)                                \
                           : launch_wg_full<__nv_bfloat16, BM, false>(p, grid, stream);
  switch (id) {
    NIBBLE_CUDA_WGMMA_VARIANTS(NIBBLE_LAUNCH_WG)
    default: return cudaErrorInvalidValue;
  }
#undef NIBBLE_LAUNCH_WG
}

cudaError_t setup_wgmma_diag() {
  cudaError_t e = cudaSuccess;
#define NIBBLE_DIAG_SETUP_MODE(BM, mode) \
  if ((e = set_smem_limit<__half, BM, mode>()) != cudaSuccess) return e;
#define NIBBLE_DIAG_SETUP_TILE(id, BM) NIBBLE_CUDA_WGMMA_DIAG_MODES(NIBBLE_DIAG_SETUP_MODE, BM)
  NIBBLE_CUDA_WGMMA_DIAG_TILES(NIBBLE_DIAG_SETUP_TILE)
#undef NIBBLE_DIAG_SETUP_TILE
#undef NIBBLE_DIAG_SETUP_MODE
  return cudaSuccess;
}

cudaError_t launch_wgmma_diag(KernelId id, Act act, const GemmParams& p, int grid, cudaStream_t stream) {
  const int mode = p.ablate & kWgConsumerBits;
  if (mode == kModeFull) return launch_wgmma(id, act, p, grid, false, stream);
  if (act != Act::f16) return cudaErrorNotSupported;
#define NIBBLE_DIAG_LAUNCH_MODE(BM, m) \
  if (mode == (m)) return launch_wg<__half, BM, m>(p, grid, stream);
#define NIBBLE_DIAG_LAUNCH_TILE(kid, BM)                      \
  if (id == (kid)) {                                          \
    NIBBLE_CUDA_WGMMA_DIAG_MODES(NIBBLE_DIAG_LAUNCH_MODE, BM) \
    return cudaErrorNotSupported;                             \
  }
  NIBBLE_CUDA_WGMMA_DIAG_TILES(NIBBLE_DIAG_LAUNCH_TILE)
#undef NIBBLE_DIAG_LAUNCH_TILE
#undef NIBBLE_DIAG_LAUNCH_MODE
  return cudaErrorNotSupported;
}

}  // namespace nibble::cuda
