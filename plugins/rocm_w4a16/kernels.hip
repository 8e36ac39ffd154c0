// rocm_w4a16's kernels. HIP source; it also compiles with nvcc through gpu_vendor.h (the test-only
// rocm_w4a16_on_cuda build, -DNIBBLE_HIP_ON_CUDA), which is how its arithmetic is checked on the
// NVIDIA GPU available to the project. Nothing below depends on the wavefront width except through
// kWarpSize, and nothing is specific to one AMD architecture.
//
// Two kernels, both y[m, n] = sum_k x[m, k] * s[g, n] * (q[k, n] - z[g, n]) (+ bias[n]) with fp32
// accumulation, on the layout of rocm_layout.h:
//   gemv_kernel<T, MT>  M <= 16: memory-bound streaming. Lanes split K (one 16-byte record = 8 rows
//                       x 4 columns each), waves of a block split K further, lanes and waves are
//                       reduced at the end (shuffles, then LDS).
//   tiled_kernel<T>     M >= 17: 64x64 output tiles, 32-row K tiles dequantized once into LDS and
//                       used by all 64 rows of x, 4x4 outputs per thread. Portable fp32 FMA: no
//                       MFMA (it could not be checked on any GPU this project has).
// T is the activation type (Half or BFloat16), handled as raw 16-bit patterns.
#include <cstdint>

#include "gpu_vendor.h"
#include "kernels.h"
#include "plugin_support.h"

namespace nibble::rocm {
namespace {

constexpr int kThreads = 256;  // block size of every kernel (4 waves of 64, or 8 of 32)

// ---- activation types --------------------------------------------------------------------------

struct Half {
  static __device__ __forceinline__ float to_float(uint16_t b) { return __half2float(__ushort_as_half(b)); }
  static __device__ __forceinline__ uint16_t from_float(float f) { return __half_as_ushort(__float2half_rn(f)); }
};

// bf16 by bit manipulation: the runtime's bf16 types differ between HIP versions and CUDA, and a
// bf16 is simply the upper half of an fp32.
struct BFloat16 {
  static __device__ __forceinline__ float to_float(uint16_t b) { return __uint_as_float(uint32_t(b) << 16); }
  static __device__ __forceinline__ uint16_t from_float(float f) {  // round to nearest even
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // NaN stays NaN
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

// ---- dequantization ----------------------------------------------------------------------------

/// d[j] = code_j - z for the 8 codes of word `w` (nibble j = row j), exactly, as fp32.
template <class T>
__device__ __forceinline__ void dequant8(uint32_t w, uint32_t z, float (&d)[8]);

__device__ __forceinline__ __half2 bits_as_half2(uint32_t u) {
  return __halves2half2(__ushort_as_half(uint16_t(u & 0xffffu)), __ushort_as_half(uint16_t(u >> 16)));
}

template <>
__device__ __forceinline__ void dequant8<Half>(uint32_t w, uint32_t z, float (&d)[8]) {
  // 0x6400 is 1024.0 in fp16 and its mantissa's unit is 1, so 0x6400 | q is exactly 1024 + q: one
  // AND-OR turns two codes (rows i and i + 4) into a half2 with no integer-to-float conversion.
  // One packed subtraction of 1024 + z (built the same way) then removes the offset and the zero
  // point together, exactly (all operands are small integers).
  const __half2 zz = bits_as_half2(0x64006400u | z | (z << 16));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 r = __hsub2(bits_as_half2(((w >> (4 * i)) & 0x000f000fu) | 0x64006400u), zz);
    d[i] = __low2float(r);
    d[i + 4] = __high2float(r);
  }
}

template <>
__device__ __forceinline__ void dequant8<BFloat16>(uint32_t w, uint32_t z, float (&d)[8]) {
  // 0x4300 is 128.0 in bf16 with a mantissa unit of 1, so 0x4300 | q is exactly 128 + q. A bf16
  // is the upper half of an fp32, so the code goes straight to bits 16..19 under 0x43000000 and is
  // already the fp32 128 + q; one fp32 subtraction of 128 + z removes offset and zero point,
  // exactly. (fp32 rather than packed bf16: CDNA2 has no packed bf16 arithmetic.)
  const float zf = 128.0f + float(z);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const uint32_t v = (j <= 4 ? (w << (16 - 4 * j)) : (w >> (4 * j - 16))) & 0x000f0000u;
    d[j] = __uint_as_float(v | 0x43000000u) - zf;
  }
}

// ---- parameters shared by both kernels ---------------------------------------------------------

enum XMode : int32_t {
  kXVector = 0,  ///< rows are the identity, K % 8 == 0, x 16-byte aligned: one 16-byte load per line
  kXScalar = 1,  ///< rows are the identity, but x cannot be read 16 bytes at a time
  kXGather = 2,  ///< act order: padded row p reads x column row_src[p] (-1 = 0)
};

struct Params {
  const uint4* codes;      ///< [quads][lines] 16-byte records; word c = column 4q + c, nibble j = row 8l + j
  const float4* scales;    ///< [quads][groups]; component c = fp32 scale of column 4q + c
  const uint16_t* zeros;   ///< [quads][groups]; nibble c = zero point of column 4q + c (8 for uint4b8)
  const int32_t* row_src;  ///< [k_pad] x column of each padded row, -1 = padding (kXGather only)
  const float* bias;       ///< [quads * 4] or null
  const uint16_t* x;       ///< [m][k] activations, row-major, T's bit patterns
  uint16_t* y;             ///< [m][n] output, row-major
  int64_t m, k, n;         ///< rows of x in this launch, x columns (canonical K), output columns
  int64_t quads, groups;   ///< ceil(n / 4); groups along K
  int32_t lines;           ///< k_pad / 8
  int32_t lines_per_group; ///< g_eff / 8: line l is in group l / lines_per_group
  int32_t x_mode;          ///< XMode
};

/// x columns of the 8 padded rows of line `l` (-1 = read as zero); not used in kXVector mode.
__device__ __forceinline__ void line_sources(const Params& p, int32_t l, int32_t (&src)[8]) {
  if (p.x_mode == kXGather) {
    const int4 a = reinterpret_cast<const int4*>(p.row_src)[2 * l];
    const int4 b = reinterpret_cast<const int4*>(p.row_src)[2 * l + 1];
    src[0] = a.x; src[1] = a.y; src[2] = a.z; src[3] = a.w;
    src[4] = b.x; src[5] = b.y; src[6] = b.z; src[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) src[j] = 8 * int64_t(l) + j < p.k ? 8 * l + j : -1;
  }
}

/// out[j] = x[row][padded row 8l + j] as fp32 (0 for padding rows).
template <class T>
__device__ __forceinline__ void load_x8(const Params& p, int64_t row, int32_t l, const int32_t (&src)[8],
                                        float (&out)[8]) {
  const uint16_t* xr = p.x + row * p.k;
  if (p.x_mode == kXVector) {
    if (8 * int64_t(l) < p.k) {  // K % 8 == 0: a line is all inside K or all padding
      const uint4 v = *reinterpret_cast<const uint4*>(xr + 8 * int64_t(l));
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[2 * j] = T::to_float(uint16_t(u[j] & 0xffffu));
        out[2 * j + 1] = T::to_float(uint16_t(u[j] >> 16));
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) out[j] = 0.0f;
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = src[j] >= 0 ? T::to_float(xr[src[j]]) : 0.0f;
  }
}

__device__ __forceinline__ uint32_t word_of(const uint4& r, int c) {
  return c == 0 ? r.x : c == 1 ? r.y : c == 2 ? r.z : r.w;
}
__device__ __forceinline__ float comp_of(const float4& r, int c) {
  return c == 0 ? r.x : c == 1 ? r.y : c == 2 ? r.z : r.w;
}

// ---- GEMV: M <= 16 -----------------------------------------------------------------------------

template <int MT>
struct GemvShape {
  static constexpr int kQuads = MT >= 8 ? 1 : 2;   ///< quads (4 output columns each) per block
  static constexpr int kMChunk = MT < 8 ? MT : 8;  ///< rows of x held as fp32 registers at once
  static constexpr int kValues = 4 * kQuads * MT;  ///< accumulators per lane
};

__host__ __device__ constexpr int log2_of(int v) { return v <= 1 ? 0 : 1 + log2_of(v / 2); }

/// Sums v[] over the lanes of a wave. Rounds of "swap half, keep half" with the partner lane (a
/// reduce-scatter) take V - 1 shuffles for V values where V independent butterflies would take
/// V * log2(W); plain butterflies follow for the lane bits left when V < W. Afterwards slot i
/// (i < max(V / W, 1)) of a lane holds the wave's total of value reduced_index<V>(lane, i).
template <int V, int R = 0>
__device__ __forceinline__ void wave_reduce(float (&v)[V], int lane) {
  // Recursion over rounds (not a loop) so that every index below is a compile-time constant and
  // v[] stays in registers.
  if constexpr ((1 << R) < kWarpSize && (V >> (R + 1)) >= 1) {
    constexpr int kHalf = V >> (R + 1);
    // A lane in the upper half of each pair keeps the upper half of v and sends the lower one.
    // The choice is a bit blend rather than `upper ? v[i] : v[i + kHalf]`: compilers turn a select
    // of two array loads into a load from a selected address, which forces v[] out of registers.
    const uint32_t upper = 0u - ((uint32_t(lane) >> R) & 1u);  // all ones or zero
#pragma unroll
    for (int i = 0; i < kHalf; ++i) {
      const uint32_t lo = __float_as_uint(v[i]), hi = __float_as_uint(v[i + kHalf]);
      const uint32_t diff = (lo ^ hi) & upper;
      const float send = __uint_as_float(hi ^ diff);  // upper: lo, lower: hi
      const float keep = __uint_as_float(lo ^ diff);  // upper: hi, lower: lo
      v[i] = keep + shfl_xor(send, 1 << R);
    }
    wave_reduce<V, R + 1>(v, lane);
  } else {
#pragma unroll
    for (int o = V; o < kWarpSize; o *= 2) v[0] += shfl_xor(v[0], o);
  }
}

template <int V>
__device__ __forceinline__ int reduced_index(int lane, int i) {
  constexpr int kRounds = log2_of(V < kWarpSize ? V : kWarpSize);
  int idx = i;
#pragma unroll
  for (int r = 0; r < kRounds; ++r)
    if ((lane >> r) & 1) idx += V >> (r + 1);
  return idx;
}

/// Block b computes output columns [4 * kQuads * b, 4 * kQuads * (b + 1)) for all MT rows.
/// Lane `lane` of wave `wave` takes the lines l = s * W + lane for steps s = wave, wave + NW, ...:
/// per line it loads one 16-byte record per quad (8 rows x 4 columns; a wave reads 16 * W
/// contiguous bytes), its group's scales and zero points, and x[0..MT)[8 rows]; it accumulates
/// acc[(q * 4 + c) * MT + m] in fp32. Then lanes are reduced with shuffles, waves through LDS.
template <class T, int MT>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const Params p) {
  constexpr int W = kWarpSize, NW = kThreads / W;
  constexpr int Q = GemvShape<MT>::kQuads, MC = GemvShape<MT>::kMChunk, V = GemvShape<MT>::kValues;
  const int lane = int(threadIdx.x) % W, wave = int(threadIdx.x) / W;
  const int64_t quad0 = int64_t(blockIdx.x) * Q;

  float acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = 0.0f;

  const int32_t steps = (p.lines + W - 1) / W;
  for (int32_t s = wave; s < steps; s += NW) {
    const int32_t l = s * W + lane;
    if (l >= p.lines) continue;  // only in the last step
    const int32_t g = l / p.lines_per_group;
    uint4 rec[Q];
    float4 sc[Q];
    uint32_t zq[Q];
#pragma unroll
    for (int q = 0; q < Q; ++q) {
      const int64_t quad = quad0 + q;
      if (quad < p.quads) {
        rec[q] = p.codes[quad * p.lines + l];
        sc[q] = p.scales[quad * p.groups + g];
        zq[q] = p.zeros[quad * p.groups + g];
      } else {  // past N: a quad of nothing
        rec[q] = make_uint4(0, 0, 0, 0);
        sc[q] = make_float4(0, 0, 0, 0);
        zq[q] = 0x8888u;
      }
    }
    int32_t src[8] = {};
    if (p.x_mode != kXVector) line_sources(p, l, src);
#pragma unroll
    for (int m0 = 0; m0 < MT; m0 += MC) {
      float xf[MC][8];
#pragma unroll
      for (int i = 0; i < MC; ++i) {
        if (m0 + i < p.m) {
          load_x8<T>(p, m0 + i, l, src, xf[i]);
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) xf[i][j] = 0.0f;
        }
      }
#pragma unroll
      for (int q = 0; q < Q; ++q) {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          float d[8];
          dequant8<T>(word_of(rec[q], c), (zq[q] >> (4 * c)) & 0xfu, d);
          const float scale = comp_of(sc[q], c);
#pragma unroll
          for (int i = 0; i < MC; ++i) {
            // The 8 rows share one scale: sum them unscaled, scale once per line.
            float part = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; ++j) part = fmaf(d[j], xf[i][j], part);
            float& a = acc[(q * 4 + c) * MT + m0 + i];
            a = fmaf(scale, part, a);
          }
        }
      }
    }
  }

  wave_reduce<V>(acc, lane);
  __shared__ float red[NW][V];
  constexpr int R = V > W ? V / W : 1;  // slots per lane after the reduction
  if (V >= W || lane < V) {
#pragma unroll
    for (int i = 0; i < R; ++i) red[wave][reduced_index<V>(lane, i)] = acc[i];
  }
  __syncthreads();
  for (int t = int(threadIdx.x); t < V; t += kThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; ++w) sum += red[w][t];
    const int q = t / (4 * MT), c = (t / MT) % 4, mi = t % MT;
    const int64_t col = (quad0 + q) * 4 + c;
    if (mi < p.m && col < p.n) {
      if (p.bias) sum += p.bias[col];
      p.y[mi * p.n + col] = T::from_float(sum);
    }
  }
}

// ---- tiled: M >= 17 ----------------------------------------------------------------------------

constexpr int kTileM = 64, kTileN = 64, kTileK = 32;

/// Global data of one K tile, fetched into registers one tile ahead of the math.
struct TileFetch {
  uint32_t code;  ///< this thread's code word: 8 rows x 1 column of the W tile
  float scale;
  uint32_t zero;
  float x[8];     ///< this thread's 8 consecutive padded rows of one x row
};

/// Block (bx, by) computes y[64 * by .. +64][64 * bx .. +64]. Per K tile of 32 padded rows, each
/// thread dequantizes one code word (wl: line 0..3 of the tile, wq: quad 0..15, wc: column of the
/// quad) into ws and converts 8 x values (xm: row 0..63, xk: row offset 0, 8, 16, 24) into xs;
/// then thread (ty, tx) accumulates the 4x4 outputs rows 4ty.., columns 4tx.. in fp32.
template <class T>
__global__ void __launch_bounds__(kThreads) tiled_kernel(const Params p) {
  // 16-byte aligned: the math reads both with float4 loads.
  alignas(16) __shared__ float xs[kTileK][kTileM];  // xs[kk][mi] = x[m0 + mi][k0 + kk]
  alignas(16) __shared__ float ws[kTileK][kTileN];  // ws[kk][ni] = s * (q - z) of (k0 + kk, n0 + ni)
  const int t = int(threadIdx.x), tx = t % 16, ty = t / 16;
  const int64_t m0 = int64_t(blockIdx.y) * kTileM, quad0 = int64_t(blockIdx.x) * (kTileN / 4);
  // Consecutive threads take the 4 words of a record, then the next line of the same quad:
  // 16 threads read 64 contiguous bytes.
  const int wc = t & 3, wl = (t >> 2) & 3, wq = t >> 4;
  const int64_t quad = quad0 + wq;
  const int xm = t >> 2, xk = (t & 3) * 8;
  const int64_t xrow = m0 + xm;
  const uint32_t* codes = reinterpret_cast<const uint32_t*>(p.codes);
  const float* scales = reinterpret_cast<const float*>(p.scales);

  auto fetch = [&](int32_t k0, TileFetch& f) {
    const int32_t l = k0 / 8 + wl;
    if (quad < p.quads) {
      const int32_t g = l / p.lines_per_group;
      f.code = codes[(quad * p.lines + l) * 4 + wc];
      f.scale = scales[(quad * p.groups + g) * 4 + wc];
      f.zero = (p.zeros[quad * p.groups + g] >> (4 * wc)) & 0xfu;
    } else {
      f.code = 0;
      f.scale = 0.0f;
      f.zero = 8;
    }
    const int32_t lx = (k0 + xk) / 8;
    if (xrow < p.m) {
      int32_t src[8] = {};
      if (p.x_mode != kXVector) line_sources(p, lx, src);
      load_x8<T>(p, xrow, lx, src, f.x);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) f.x[j] = 0.0f;
    }
  };

  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

  const int32_t k_pad = p.lines * 8;  // a multiple of kTileK (g_eff is a multiple of 32)
  TileFetch f;
  fetch(0, f);
  for (int32_t k0 = 0; k0 < k_pad; k0 += kTileK) {
    float d[8];
    dequant8<T>(f.code, f.zero, d);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      ws[wl * 8 + j][wq * 4 + wc] = d[j] * f.scale;
      xs[xk + j][xm] = f.x[j];
    }
    __syncthreads();
    if (k0 + kTileK < k_pad) fetch(k0 + kTileK, f);  // next tile's loads fly during the math
#pragma unroll 8
    for (int kk = 0; kk < kTileK; ++kk) {
      const float4 a = *reinterpret_cast<const float4*>(&xs[kk][ty * 4]);
      const float4 b = *reinterpret_cast<const float4*>(&ws[kk][tx * 4]);
      const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64_t m = m0 + ty * 4 + i;
    if (m >= p.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t col = quad0 * 4 + tx * 4 + j;
      if (col < p.n) p.y[m * p.n + col] = T::from_float(acc[i][j] + (p.bias ? p.bias[col] : 0.0f));
    }
  }
}

// ---- launchers ---------------------------------------------------------------------------------

template <class T, int MT>
void launch_gemv(const Params& p, hipStream_t stream) {
  constexpr int Q = GemvShape<MT>::kQuads;
  const unsigned blocks = unsigned((p.quads + Q - 1) / Q);
  hipLaunchKernelGGL(HIP_KERNEL_NAME(gemv_kernel<T, MT>), dim3(blocks), dim3(kThreads), 0, stream, p);
}

template <class T>
void launch(Params p, hipStream_t stream) {
  switch (gemv_rows_for(p.m)) {
    case 1: return launch_gemv<T, 1>(p, stream);
    case 2: return launch_gemv<T, 2>(p, stream);
    case 4: return launch_gemv<T, 4>(p, stream);
    case 8: return launch_gemv<T, 8>(p, stream);
    case 16: return launch_gemv<T, 16>(p, stream);
    default: break;
  }
  // The grid's y extent is limited to 65535 blocks: larger M runs in slices of rows.
  const int64_t max_rows = int64_t(65535) * kTileM, total = p.m;
  const uint16_t* x = p.x;
  uint16_t* y = p.y;
  for (int64_t r = 0; r < total; r += max_rows) {
    p.m = total - r < max_rows ? total - r : max_rows;
    p.x = x + r * p.k;
    p.y = y + r * p.n;
    const dim3 grid(unsigned((p.quads + kTileN / 4 - 1) / (kTileN / 4)), unsigned((p.m + kTileM - 1) / kTileM));
    hipLaunchKernelGGL(HIP_KERNEL_NAME(tiled_kernel<T>), grid, dim3(kThreads), 0, stream, p);
  }
}

}  // namespace

int gemv_rows_for(int64_t m) {
  if (m <= 1) return 1;
  if (m <= 2) return 2;
  if (m <= 4) return 4;
  if (m <= 8) return 8;
  if (m < kTiledMinM) return 16;
  return 0;
}

int32_t run_matmul(const MatmulArgs& a, void* stream, char* msg, std::size_t cap) {
  using plugin::fail;
  const DeviceWeights& w = *a.w;
  if (a.m < 1) return fail(NIBBLE_ERR_INVALID_ARGUMENT, msg, cap, "expected M >= 1, found %lld", (long long)a.m);
  Params p{};
  p.codes = reinterpret_cast<const uint4*>(w.codes);
  p.scales = reinterpret_cast<const float4*>(w.scales);
  p.zeros = w.zeros;
  p.row_src = w.row_src;
  p.bias = w.bias;
  p.x = static_cast<const uint16_t*>(a.x);
  p.y = static_cast<uint16_t*>(a.y);
  p.m = a.m;
  p.k = w.d.k;
  p.n = w.d.n;
  p.quads = w.d.quads;
  p.groups = w.d.groups;
  p.lines = int32_t(w.d.lines);
  p.lines_per_group = int32_t(w.d.g_eff / kLineRows);
  if (w.row_src)
    p.x_mode = kXGather;
  else if (w.d.k % 8 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0)
    p.x_mode = kXVector;
  else
    p.x_mode = kXScalar;

  hipStream_t st = static_cast<hipStream_t>(stream);
  if (a.act_dtype == NIBBLE_DTYPE_F16)
    launch<Half>(p, st);
  else if (a.act_dtype == NIBBLE_DTYPE_BF16)
    launch<BFloat16>(p, st);
  else
    return fail(NIBBLE_ERR_UNSUPPORTED, msg, cap, "activation dtype %s not supported", plugin::dtype_str(a.act_dtype));
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) return fail(NIBBLE_ERR_DEVICE, msg, cap, "kernel launch failed: %s", hipGetErrorString(e));
  return NIBBLE_OK;
}

int32_t kernels_available(char* msg, std::size_t cap) {
  hipFuncAttributes attr{};
  const hipError_t e = hipFuncGetAttributes(&attr, reinterpret_cast<const void*>(&gemv_kernel<Half, 1>));
  if (e != hipSuccess) {
    (void)hipGetLastError();  // not sticky, but leave no error behind for the next launch check
    return plugin::fail(NIBBLE_ERR_NO_DEVICE, msg, cap, "no kernel code for this device: %s", hipGetErrorString(e));
  }
  return NIBBLE_OK;
}

}  // namespace nibble::rocm
