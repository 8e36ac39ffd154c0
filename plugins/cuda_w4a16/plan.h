// The kernel menu of cuda_w4a16 as data, and the choice per call. Plain C++ with no CUDA calls:
// every decision here is made from facts the caller passes in (device capability, occupancy,
// layer shape, options), so test_plan.cpp checks it without a GPU.
//
// Two tables (plan.cpp): kKernelTable says what each kernel is and what it can take (architecture,
// limits); kChoiceRules says which kernel the automatic choice runs for a given architecture, M and
// layer shape: the first row that matches and whose kernel can take the call wins. Thresholds live
// only in kChoiceRules; docs/cuda.md has the measurements behind them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernel_params.h"

namespace nibble::cuda {

enum class Family : int32_t { gemv, mma, wgmma, cublas };

/// One kernel of the menu.
struct KernelDesc {
  const char* name;  ///< option value (`kernel`, NIBBLE_CUDA_KERNEL) and describe_kernel's name
  KernelId id;       ///< launcher id
  Family family;
  int32_t min_cc;       ///< lowest compute capability (major * 10 + minor) its code runs on
  int32_t max_cc;       ///< highest (sm_90a code runs on 9.0 only)
  int32_t min_stages;   ///< stream-K (mma, wgmma): fewest k stages per block; GEMV: 0 (its own cost model)
  const char* summary;  ///< tile and method, for docs and messages
};

/// Every kernel, one row per KernelId (kCublas last).
extern const KernelDesc kKernelTable[];
extern const int kKernelTableSize;
/// The row of `name`, or null.
const KernelDesc* find_kernel(std::string_view name);
/// The row of `id`.
const KernelDesc& kernel_desc(KernelId id);
/// Whether `d` is sm_90a code (it runs on compute capability 9.0 only, and is in a build only where
/// nvcc_archs names 90): the wgmma kernels.
bool sm90a_code(const KernelDesc& d);

/// Which activation dtype a choice row applies to.
enum class ActRule : int32_t { any, f16, bf16 };

/// One row of the automatic choice. Bounds are inclusive; 0 as an upper bound means none.
struct ChoiceRule {
  int32_t min_cc, max_cc;
  int64_t min_m, max_m;
  int64_t min_weights, max_weights;  ///< K * N of the layer
  int64_t min_k, max_k;
  int64_t min_n, max_n;
  KernelId kernel;
  ActRule act = ActRule::any;  ///< the layer's activation dtype the row is for
  int32_t min_bits = 0, max_bits = 0;  ///< the real weight widths the row is for (0 = no bound)
};
extern const ChoiceRule kChoiceRules[];
extern const int kChoiceRulesSize;

/// What the plan knows of the device.
struct DeviceFacts {
  int32_t cc = 0;                    ///< compute capability, major * 10 + minor
  const KernelInfo* info = nullptr;  ///< [kNumKernels] for the layer's activation dtype (slots etc.)
  const KernelInfo* info8 = nullptr;  ///< the same for the tiled kernels' one-pass 8-bit instances
  bool cublas = false;               ///< cuBLAS loaded
  bool sm90a_built = false;          ///< this build has the sm_90a kernels (nvcc_archs names 90)
  bool bf16 = false;                 ///< the layer's activations are bf16 (else fp16)
};

/// What the plan knows of the layer (from its LayoutPlan).
struct ShapeFacts {
  int64_t k = 0, n = 0, n_pad = 0;  ///< of the packed layer (8 bits as two nibble planes: k doubled)
  int32_t ku = 0, kt = 0;
  int32_t bits = 4;  ///< the real layer's weight width (k, n above are its 4-bit image's)
  /// An 8-bit layer whose nibble planes pair up (planes8_dense_pairs, zero points, upg < 2^15): the
  /// tiled kernels run both planes in one pass over kt8 = ceil(ku / 4) stages of the real K (the
  /// wgmma kernels decline 8-bit layers without it).
  bool planes8 = false;
  int32_t kt8 = 0;
};

/// Whether kernel `d` runs `s` as its one-pass 8-bit instance, and that instance's facts and
/// stages along K (else the kernel's own and s.kt). The x such an instance reads is the compact
/// one of the low-plane rows (low_plane_rows), ku / 2 * 32 columns.
bool one_pass8(const KernelDesc& d, const ShapeFacts& s);
const KernelInfo& kernel_info(const KernelDesc& d, const DeviceFacts& dev, const ShapeFacts& s);
int32_t kernel_stages(const KernelDesc& d, const ShapeFacts& s);

/// The plugin's options (set_option / environment).
struct PlanOptions {
  int32_t forced = -1;        ///< KernelId forced for every call, -1 = automatic
  int64_t cublas_min_m = 65;  ///< smallest M the automatic choice may send to cuBLAS (0 = never)
  int32_t min_stages = 0;     ///< override of KernelDesc::min_stages / GEMV batches per warp (0 = none)
  bool overlap = true;        ///< PDL launches where the kernel supports them (sm_90+)
  /// wgmma kernels: x laid out once per call by a separate kernel and copied with one bulk copy
  /// per stage ("image", the default: measured faster wherever a rule picks wgmma), or copied by
  /// the kernel's own 4-byte copies ("copy")
  bool wgmma_x_image = true;
  /// wgmma kernels: the weights and scale records of a stage copied by producer warps 1-3 with
  /// 16-byte cp.async ("lsu", the default: faster at every point measured, docs/cuda.md "Round
  /// 3") or by the producer lane's bulk copies ("bulk", one per strip and record run), both
  /// completing on the stage's barrier
  bool wgmma_w_lsu = true;
  /// wgmma kernels: a tile shared by several blocks of the stream-K grid is summed by the last
  /// block to arrive ("last") or by all the blocks that end in it, a slice each, launched
  /// cooperatively so that they can wait for each other ("split"; a refused cooperative launch
  /// runs as "last"); "auto", the default, splits for BM >= 64 where a block has at most 48 k
  /// stages (where it measured faster: docs/cuda.md, Round 3)
  enum class Fixup : uint8_t { last, split, automatic };
  Fixup wgmma_fixup = Fixup::automatic;
  /// wgmma kernels: how tiles are dealt to the persistent blocks: "stream_k", every tile's k
  /// stages split evenly over the blocks in the plain order; "waves", whole tiles wave by wave in
  /// a raster of bands of 8 m tiles, then a stream-K tail of one to two waves (wgmma_layout.h,
  /// WgItems), so that a wave's blocks share their x and weight panels in L2; "auto", the
  /// default: waves for the tiles of BM >= 128 (wg128, wg256: measured no slower than stream-K at
  /// M = 256-4096, docs/cuda.md), stream-K for the smaller ones (not measured with
  /// waves). wg128 at M = 65-255 walks waves too, untimed, but there a launch has fewer than two
  /// waves of tiles on the large layers and at most 8 m tiles, so its walk is nearly stream-K's
  enum class Sched : uint8_t { stream_k, waves, automatic };
  Sched wgmma_sched = Sched::automatic;
  /// wgmma kernels wg128 and wg256 on 4-bit layers with the x image: blocks in clusters of 2 along
  /// the features, each copying half of every stage's x tile into both (TMA multicast), so that x
  /// crosses from L2 once per pair of blocks ("on"), or every block copies its own ("off", the
  /// default: "on" was measured no faster, docs/cuda.md "clusters of 2 with x multicast"). Needs
  /// an even number of n tiles; elsewhere "on" changes nothing.
  bool wgmma_cluster = false;
  /// GEMV kernels: how many batches ahead of its loads each warp asks L2 for its weights
  /// (`gemv_prefetch`, 0 = none)
  int32_t gemv_prefetch = kDefaultGemvPrefetch;
  /// GEMV: an 8-bit layer's two nibble planes dequantized in one pass where the kernel and the
  /// layer allow it (`gemv_planes8`, 1 = the default; 0 = plane by plane, as every other kernel)
  bool gemv_planes8 = true;
  /// GEMV: where every batch of every warp is whole (K_pad covered by x, the units a multiple of
  /// the batch), the instance whose loads carry no bounds checks (`gemv_whole`, 1 = the default;
  /// 0 = the checked instance everywhere)
  bool gemv_whole = true;
  /// dequantize + cuBLAS: the most MiB of dense weights written per column chunk (each chunk is
  /// dequantized, then multiplied; `dense_chunk_mib`); a chunk is never narrower than one
  /// 256-column tile, whatever K
  int32_t dense_chunk_mib = kDefaultDenseChunkMib;
  /// dequantize + cuBLAS over several chunks: chunk i + 1 dequantized on a second stream while
  /// chunk i's GEMM runs (two dense buffers; `dense_overlap`, 0 or 1)
  bool dense_overlap = false;
  static constexpr int32_t kDefaultDenseChunkMib = 128;
  static constexpr int32_t kDefaultGemvPrefetch = 0;  // measured slower at every D > 0 on the H200 (docs/benchmarks.md)
  static constexpr int32_t kMaxGemvPrefetch = 16;
};

/// Sets option `key` to `value` in `o`: NIBBLE_OK, or a status with a message naming the option,
/// what it takes and what was found. cuBLAS must be loadable for kernel=cublas (`cublas`).
int32_t set_plan_option(PlanOptions& o, std::string_view key, std::string_view value, bool cublas,
                        std::string* why);
/// The environment at load: NIBBLE_CUDA_KERNEL, NIBBLE_CUDA_CUBLAS_MIN_M, NIBBLE_CUDA_OVERLAP,
/// NIBBLE_CUDA_MIN_STAGES, NIBBLE_CUDA_WGMMA_X, NIBBLE_CUDA_WGMMA_W, NIBBLE_CUDA_WGMMA_FIXUP,
/// NIBBLE_CUDA_WGMMA_SCHED, NIBBLE_CUDA_WGMMA_CLUSTER,
/// NIBBLE_CUDA_GEMV_PREFETCH, NIBBLE_CUDA_GEMV_PLANES8, NIBBLE_CUDA_GEMV_WHOLE,
/// NIBBLE_CUDA_DENSE_CHUNK_MIB, NIBBLE_CUDA_DENSE_OVERLAP.
PlanOptions options_from_environment();

/// Why `d` cannot run M rows of `s` on `dev` ("" when it can).
std::string decline_reason(const KernelDesc& d, const DeviceFacts& dev, const ShapeFacts& s, int64_t m);

/// One call's choice: the kernel and its launch geometry.
struct Plan {
  KernelId kernel = kV1;
  int32_t grid = 0;  ///< stream-K blocks, or GEMV K splits
  int32_t m_tiles = 0, n_tiles = 0;
  bool overlap = false;  ///< launch as a programmatic dependent
  bool x_image = false;  ///< wgmma: lay x out first (launch_wgmma_x_image), GemmParams::x_image
  bool w_lsu = false;    ///< wgmma: weights and records by cp.async (GemmParams::w_lsu)
  bool split_fixup = false;  ///< wgmma: the split fix-up, a cooperative launch (kWgSchedSplitFixup)
  bool waves = false;        ///< wgmma: whole waves before a stream-K tail (kWgSchedWaves)
  bool cluster = false;      ///< wgmma: clusters of 2 blocks, x multicast (kWgSchedCluster); grid even
  int32_t prefetch = 0;      ///< GEMV: batches asked of L2 ahead (GemmParams::prefetch)
  bool planes8 = false;      ///< GEMV: 8-bit planes in one pass allowed (the layer decides: plugin.cpp)
  bool tiled_planes8 = false;  ///< mma.sync, wgmma: the one-pass 8-bit instance over kernel_stages() stages
  bool whole = false;        ///< GEMV: the unchecked instance allowed (the shape decides: plugin.cpp)
  std::string declined;  ///< non-empty: nothing runs; why (a forced kernel that cannot take the call)
};

Plan make_plan(const ShapeFacts& s, const DeviceFacts& dev, const PlanOptions& o, int64_t m);

}  // namespace nibble::cuda
