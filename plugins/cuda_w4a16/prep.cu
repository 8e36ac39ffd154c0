// The preparation kernels: process_weights' repack of the canonical tensors into the packed layout
// (layout.h), apply's gather of x (act order, padding), and the pieces of the dequantize + cuBLAS
// path (dense dequantization, bias).
#include "device_ops.cuh"
#include "kernels.h"
#include "wgmma_layout.h"

namespace nibble::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// process_weights and helper kernels (run once per layer, or cheap next to the matmul).

// One thread per (strip, k-unit, lane): gathers its 32 codes from the canonical qweight.
__global__ void repack_weights_kernel(const uint32_t* __restrict__ qweight, int64_t k, int64_t n,
                                      const int32_t* __restrict__ perm, int32_t strips, int32_t ku,
                                      uint4* __restrict__ out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(strips) * ku * 32) return;
  const int lane = int(idx & 31);
  const int64_t rest = idx >> 5;
  const int64_t unit_k = rest % ku, strip = rest / ku;
  uint32_t words[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int row, col;
      unit_nibble_position(lane, w, j, &row, &col);
      const int64_t kk = unit_k * kUnitK + row, nn = strip * kStripN + col;
      const int64_t src = perm ? perm[kk] : kk;
      uint32_t code = 0;
      if (nn < n && src >= 0 && src < k) code = (qweight[(src >> 3) * n + nn] >> (4 * (src & 7))) & 0xfu;
      word |= code << (4 * j);
    }
    words[w] = word;
  }
  out[idx] = make_uint4(words[0], words[1], words[2], words[3]);
}

__device__ float load_scale(const void* scales, int32_t dtype, int64_t i) {
  if (dtype == 3) return static_cast<const float*>(scales)[i];
  const uint16_t bits = static_cast<const uint16_t*>(scales)[i];
  if (dtype == 2) return __uint_as_float(uint32_t(bits) << 16);
  __half_raw r;
  r.x = bits;
  return __half2float(__half(r));
}

// One thread per (packed group, strip, gid): the four entries of its scale and zero records.
template <class T>
__global__ void repack_records_kernel(const void* __restrict__ scales, int32_t scale_dtype,
                                      const uint8_t* __restrict__ zeros, int64_t n,
                                      const int32_t* __restrict__ gmap, int32_t groups_pad, int32_t strips,
                                      T* __restrict__ scale_rec, uint8_t* __restrict__ zero_rec) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= int64_t(groups_pad) * strips * 8) return;
  const int gid = int(idx & 7);
  const int64_t strip = (idx >> 3) % strips, g = (idx >> 3) / strips;
  const int64_t cg = gmap[g];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t col = strip * kStripN + record_col(gid, r);
    const bool ok = cg >= 0 && col < n;
    scale_rec[idx * 4 + r] = Ops<T>::from_float(ok ? load_scale(scales, scale_dtype, cg * n + col) : 0.f);
    if (zero_rec) zero_rec[idx * 4 + r] = ok && zeros ? zeros[cg * n + col] : uint8_t(8);
  }
}

// One thread per 8 output elements (16 bytes) of x'.
__global__ void prep_x_kernel(const uint16_t* __restrict__ x, int64_t m, int64_t k,
                              const int32_t* __restrict__ perm, int64_t kp, uint16_t* __restrict__ out) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunks = kp / 8;
  if (idx >= m * chunks) return;
  const int64_t row = idx / chunks, j0 = (idx % chunks) * 8;
  uint16_t v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int64_t src = perm ? perm[j0 + e] : j0 + e;
    v[e] = (src >= 0 && src < k) ? x[row * k + src] : uint16_t(0);
  }
  uint4 o;
  o.x = v[0] | (uint32_t(v[1]) << 16);
  o.y = v[2] | (uint32_t(v[3]) << 16);
  o.z = v[4] | (uint32_t(v[5]) << 16);
  o.w = v[6] | (uint32_t(v[7]) << 16);
  reinterpret_cast<uint4*>(out)[idx] = o;
}

// Dense copy of the weights for the cuBLAS path. One block of 8 warps per (8 strips, k-unit):
// each lane dequantizes its 32 weights (the matmul's rounding: (q - z) exact, one rounding of the
// product) into a shared 32 x 256 tile, which the block then writes as 32 rows of 512 contiguous
// bytes (16-byte stores; a lane's own values are 4 columns x 8 rows apart, which would make
// 2-byte scattered stores).
template <class T>
__global__ void __launch_bounds__(256) dequant_dense_kernel(const uint4* __restrict__ w, const T* __restrict__ scale_rec,
                                                            const uint8_t* __restrict__ zero_rec, int32_t strips,
                                                            int32_t ku, uint32_t g_magic, int32_t n0, int32_t nc,
                                                            T* __restrict__ out) {
  constexpr int kPitch = 8 * kStripN + 8;  // halves; 16-byte padding against bank conflicts
  __shared__ __align__(16) uint16_t tile[kUnitK][kPitch];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2;
  const int unit_k = blockIdx.y;
  const int64_t strip = n0 / kStripN + int64_t(blockIdx.x) * 8 + warp;
  const uint4 q = w[(strip * ku + unit_k) * 32 + lane];
  const int64_t g = unit_group(unit_k, g_magic);
  const int64_t rec = (g * strips + strip) * 8 + gid;
  const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int wd = 0; wd < 4; ++wd)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      int row, col;
      unit_nibble_position(lane, wd, j, &row, &col);
      const int r = 2 * (col >> 4) + ((col >> 3) & 1);  // record entry of this column
      const float s = Ops<T>::to_float(scale_rec[rec * 4 + r]);
      const int z = zero_rec ? zero_rec[rec * 4 + r] : 8;
      const int code = int((words[wd] >> (4 * j)) & 0xfu);
      const T v = Ops<T>::from_float(float(code - z) * s);
      tile[row][warp * kStripN + col] = *reinterpret_cast<const uint16_t*>(&v);
    }
  __syncthreads();
  T* dst = out + int64_t(unit_k) * kUnitK * nc + int64_t(blockIdx.x) * 8 * kStripN;
#pragma unroll
  for (int i = threadIdx.x; i < kUnitK * 32; i += 256) {  // 32 rows x 32 chunks of 16 bytes
    const int row = i >> 5, chunk = i & 31;
    *reinterpret_cast<uint4*>(dst + int64_t(row) * nc + chunk * 8) =
        *reinterpret_cast<const uint4*>(&tile[row][chunk * 8]);
  }
}

// The same for an 8-bit layer's two nibble planes, summed into a dense copy of the real layer:
// one block per (8 strips, k-unit of a low plane); the unit's twin in the high plane is upg units
// on (the next packed group, whose records are 16 s and zh). Each weight is s (lo - zl) + 16 s
// (hi - zh) = s (q - z), exact in fp32 (|q - z| < 2^8, s of at most 11 significant bits), rounded
// once as the 4-bit path rounds. Row r of the unit lands on dense row x_map[r] (the real row of x
// it reads; -1: a padding row, skipped): the dense matrix has the real K rows and x needs no
// gather. planes8_dense_pairs (layout_plan.h) checks on the host that this covers every row once.
template <class T>
__global__ void __launch_bounds__(256)
    dequant_dense_planes8_kernel(const uint4* __restrict__ w, const T* __restrict__ scale_rec,
                                 const uint8_t* __restrict__ zero_rec, const int32_t* __restrict__ x_map,
                                 int32_t strips, int32_t ku, int32_t upg, int32_t n0, int32_t nc,
                                 T* __restrict__ out) {
  constexpr int kPitch = 8 * kStripN + 8;
  __shared__ __align__(16) uint16_t tile[kUnitK][kPitch];
  __shared__ int32_t dst_row[kUnitK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2;
  const int pair = int(blockIdx.y) / upg, j = int(blockIdx.y) - pair * upg;
  const int unit_lo = 2 * pair * upg + j, unit_hi = unit_lo + upg;
  const int64_t strip = n0 / kStripN + int64_t(blockIdx.x) * 8 + warp;
  const uint4 ql = w[(strip * ku + unit_lo) * 32 + lane];
  const uint4 qh = w[(strip * ku + unit_hi) * 32 + lane];
  const int64_t rl = ((int64_t(2) * pair) * strips + strip) * 8 + gid;
  const int64_t rh = rl + int64_t(strips) * 8;
  if (threadIdx.x < kUnitK) dst_row[threadIdx.x] = x_map[int64_t(unit_lo) * kUnitK + threadIdx.x];
  const uint32_t lo_words[4] = {ql.x, ql.y, ql.z, ql.w}, hi_words[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
  for (int wd = 0; wd < 4; ++wd)
#pragma unroll
    for (int b = 0; b < 8; ++b) {
      int row, col;
      unit_nibble_position(lane, wd, b, &row, &col);
      const int r = 2 * (col >> 4) + ((col >> 3) & 1);
      const float sl = Ops<T>::to_float(scale_rec[rl * 4 + r]), sh = Ops<T>::to_float(scale_rec[rh * 4 + r]);
      const int zl = zero_rec ? zero_rec[rl * 4 + r] : 8, zh = zero_rec ? zero_rec[rh * 4 + r] : 8;
      const int lo = int((lo_words[wd] >> (4 * b)) & 0xfu), hi = int((hi_words[wd] >> (4 * b)) & 0xfu);
      const T v = Ops<T>::from_float(float(lo - zl) * sl + float(hi - zh) * sh);
      tile[row][warp * kStripN + col] = *reinterpret_cast<const uint16_t*>(&v);
    }
  __syncthreads();
  T* dst = out + int64_t(blockIdx.x) * 8 * kStripN;
#pragma unroll
  for (int i = threadIdx.x; i < kUnitK * 32; i += 256) {
    const int row = i >> 5, chunk = i & 31;
    const int32_t xr = dst_row[row];
    if (xr >= 0)
      *reinterpret_cast<uint4*>(dst + int64_t(xr) * nc + chunk * 8) =
          *reinterpret_cast<const uint4*>(&tile[row][chunk * 8]);
  }
}

__global__ void fill_bias_kernel(uint16_t* __restrict__ y, const uint16_t* __restrict__ bias, int64_t m, int64_t n) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx < m * n) y[idx] = bias[idx % n];
}

__global__ void bias_round_bf16_kernel(const float* __restrict__ t, const __nv_bfloat16* __restrict__ bias, int64_t m,
                                       int64_t n0, int64_t nc, int64_t ldy, __nv_bfloat16* __restrict__ y) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= m * nc) return;
  const int64_t r = idx / nc, j = idx - r * nc;
  y[r * ldy + n0 + j] = __float2bfloat16_rn(t[idx] + __bfloat162float(bias[n0 + j]));
}

int blocks_for(int64_t threads, int per_block = 256) { return int((threads + per_block - 1) / per_block); }

// One thread per 4-byte word of the image: word p (k = 2p, 2p + 1 of the stage) of row r of the
// x tile of (m tile, k stage), read coalesced from x and stored where the wgmma kernel's own copies
// would put it (wg_x_offset: the mma's K order and the 128-byte swizzle, inside the same 128-byte
// row, so the stores stay coalesced too).
__global__ void wgmma_x_image_kernel(const uint32_t* __restrict__ x, int64_t ldx, int64_t kx, int32_t m,
                                     int32_t bm, int32_t kt, int64_t words, unsigned char* __restrict__ out) {
  grid_launch_dependents();  // the matmul may start its weight copies while this runs
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= words) return;
  int64_t mt;
  int ks, r, p;
  wg_x_image_word(idx, bm, kt, &mt, &ks, &r, &p);
  const int64_t row = mt * bm + r, k = int64_t(ks) * kTileK + 2 * p;
  const uint32_t v = row < m && k < kx ? x[(row * ldx + k) >> 1] : 0u;
  *reinterpret_cast<uint32_t*>(out + wg_x_image_tile(mt, ks, kt, bm) + wg_x_offset(r, p)) = v;
}

}  // namespace

cudaError_t launch_wgmma_x_image(const void* x, int64_t ldx, int64_t kx, int32_t m, int32_t bm,
                                 int32_t m_tiles, int32_t kt, void* out, cudaStream_t stream) {
  const int64_t words = int64_t(m_tiles) * kt * bm * 32;
  if (words >> 36) return cudaErrorInvalidValue;  // wg_x_image_word's 32-bit row index
  wgmma_x_image_kernel<<<blocks_for(words), 256, 0, stream>>>(static_cast<const uint32_t*>(x), ldx, kx, m, bm,
                                                              kt, words, static_cast<unsigned char*>(out));
  return cudaGetLastError();
}

cudaError_t launch_repack_weights(const uint32_t* qweight, int64_t k, int64_t n, const int32_t* perm,
                                  int32_t strips, int32_t ku, void* out, cudaStream_t stream) {
  const int64_t threads = int64_t(strips) * ku * 32;
  repack_weights_kernel<<<blocks_for(threads), 256, 0, stream>>>(qweight, k, n, perm, strips, ku,
                                                                 static_cast<uint4*>(out));
  return cudaGetLastError();
}

cudaError_t launch_repack_records(const void* scales, int32_t scale_dtype, const uint8_t* zeros, int64_t n,
                                  const int32_t* gmap, int32_t groups_pad, int32_t strips, Act act,
                                  void* scale_rec, uint8_t* zero_rec, cudaStream_t stream) {
  const int64_t threads = int64_t(groups_pad) * strips * 8;
  if (act == Act::f16)
    repack_records_kernel<__half><<<blocks_for(threads), 256, 0, stream>>>(
        scales, scale_dtype, zeros, n, gmap, groups_pad, strips, static_cast<__half*>(scale_rec), zero_rec);
  else
    repack_records_kernel<__nv_bfloat16><<<blocks_for(threads), 256, 0, stream>>>(
        scales, scale_dtype, zeros, n, gmap, groups_pad, strips, static_cast<__nv_bfloat16*>(scale_rec), zero_rec);
  return cudaGetLastError();
}

cudaError_t launch_prep_x(const void* x, int64_t m, int64_t k, const int32_t* perm, int64_t kp, void* out,
                          cudaStream_t stream) {
  const int64_t threads = m * (kp / 8);
  prep_x_kernel<<<blocks_for(threads), 256, 0, stream>>>(static_cast<const uint16_t*>(x), m, k, perm, kp,
                                                         static_cast<uint16_t*>(out));
  return cudaGetLastError();
}

cudaError_t launch_dequant_dense(const void* w, const void* scale_rec, const uint8_t* zero_rec, int32_t strips,
                                 int32_t ku, uint32_t g_magic, int32_t n0, int32_t nc, Act act, void* out,
                                 cudaStream_t stream) {
  const dim3 grid(unsigned(nc / (8 * kStripN)), unsigned(ku));
  if (act == Act::f16)
    dequant_dense_kernel<__half><<<grid, 256, 0, stream>>>(static_cast<const uint4*>(w),
                                                           static_cast<const __half*>(scale_rec), zero_rec, strips,
                                                           ku, g_magic, n0, nc, static_cast<__half*>(out));
  else
    dequant_dense_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(
        static_cast<const uint4*>(w), static_cast<const __nv_bfloat16*>(scale_rec), zero_rec, strips, ku, g_magic, n0,
        nc, static_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

cudaError_t launch_dequant_dense_planes8(const void* w, const void* scale_rec, const uint8_t* zero_rec,
                                         const int32_t* x_map, int32_t strips, int32_t ku, int32_t upg, int32_t n0,
                                         int32_t nc, Act act, void* out, cudaStream_t stream) {
  const dim3 grid(unsigned(nc / (8 * kStripN)), unsigned(ku / 2));
  if (act == Act::f16)
    dequant_dense_planes8_kernel<__half><<<grid, 256, 0, stream>>>(
        static_cast<const uint4*>(w), static_cast<const __half*>(scale_rec), zero_rec, x_map, strips, ku, upg, n0,
        nc, static_cast<__half*>(out));
  else
    dequant_dense_planes8_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(
        static_cast<const uint4*>(w), static_cast<const __nv_bfloat16*>(scale_rec), zero_rec, x_map, strips, ku,
        upg, n0, nc, static_cast<__nv_bfloat16*>(out));
  return cudaGetLastError();
}

cudaError_t launch_bias_round_bf16(const float* t, const void* bias, int64_t m, int64_t n0, int64_t nc, int64_t ldy,
                                   void* y, cudaStream_t stream) {
  bias_round_bf16_kernel<<<blocks_for(m * nc), 256, 0, stream>>>(t, static_cast<const __nv_bfloat16*>(bias), m, n0, nc,
                                                                 ldy, static_cast<__nv_bfloat16*>(y));
  return cudaGetLastError();
}

cudaError_t launch_fill_bias(void* y, const void* bias, int64_t m, int64_t n, cudaStream_t stream) {
  fill_bias_kernel<<<blocks_for(m * n), 256, 0, stream>>>(static_cast<uint16_t*>(y), static_cast<const uint16_t*>(bias),
                                                          m, n);
  return cudaGetLastError();
}

}  // namespace nibble::cuda
