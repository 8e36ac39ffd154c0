// Host-only check of the cuda_w4a16 packed layout (layout.h), runnable without a GPU: plans the
// layout as process_weights does (layout_plan.h), packs random canonical weights the way
// repack_weights_kernel / repack_records_kernel do, then replays what
// one warp of w4a16_gemm_kernel does with them, lane by lane: the 16-byte weight word per lane, the
// scale / zero records, the magic-number dequantization bit for bit (fp16 and bf16), the B
// fragments read from x through the K permutation, mma.m16n8k16's fragment semantics and the
// output positions. The result must match a double-precision reference of the canonical
// definition w = s * (q - z). The same packed data is then replayed through the wgmma kernel's
// shared-memory images and fragment mappings (wgmma_layout.h) for each of its tiles. Exit status
// 0 = pass.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "layout.h"
#include "nibble/dtype.h"
#include "layout_plan.h"
#include "wgmma_layout.h"

using namespace nibble::cuda;

namespace {

// ---- 16-bit float helpers (exact decode, round-to-nearest-even encode) ----
float half_to_float(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? std::ldexp(float(m), -24) : e == 31 ? INFINITY : std::ldexp(float(m | 1024), e - 25);
  return s ? -v : v;
}
uint16_t float_to_half(float f) { return nibble::float_to_f16(f); }  // round to nearest even, any compiler
float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

struct Dt {
  bool bf16;
  float dec(uint16_t h) const { return bf16 ? bf16_to_float(h) : half_to_float(h); }
  uint16_t enc(float f) const { return bf16 ? float_to_bf16(f) : float_to_half(f); }
};

uint32_t lop3_and_or(uint32_t a, uint32_t b, uint32_t c) { return (a & b) | c; }
uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  const uint64_t x = (uint64_t(b) << 32) | a;
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) d |= uint32_t((x >> (8 * ((sel >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return d;
}
// Per-element ops on 16-bit pairs, each rounded once as the PTX instructions are.
uint32_t pair_op(const Dt& t, uint32_t a, uint32_t b, uint32_t c, int op) {
  uint32_t d = 0;
  for (int i = 0; i < 2; ++i) {
    const float x = t.dec(uint16_t(a >> (16 * i))), y = t.dec(uint16_t(b >> (16 * i))),
                z = t.dec(uint16_t(c >> (16 * i)));
    const double r = op == 0 ? double(x) + y : op == 1 ? double(x) * y : double(x) * y + z;
    d |= uint32_t(t.enc(float(r))) << (16 * i);  // exact r here: products of <= 11-bit values
  }
  return d;
}

// Ops<T>::zero_codes and Ops<T>::dequant of kernels.cu, transcribed.
void zero_codes(const Dt& t, uint32_t zb, uint32_t (&nz)[4]) {
  for (int r = 0; r < 4; ++r) {
    const uint32_t zz = prmt(zb, 0u, 0x4040u | uint32_t(r) | (uint32_t(r) << 8));
    if (t.bf16) {
      nz[r] = zz | 0xC300C300u;
    } else {
      const uint32_t v = zz | 0xE400E400u;
      nz[r] = (r & 1) ? pair_op(t, v, 0x63806380u, 0, 0) : v;
    }
  }
}
void dequant(const Dt& t, uint32_t q, uint32_t s_lo, uint32_t s_hi, uint32_t nz_lo, uint32_t nz_hi,
             uint32_t (&a)[4]) {
  if (!t.bf16) {
    const uint32_t m = 0x64006400u, q8 = q >> 8, sixteenth = 0x2C002C00u;
    a[0] = pair_op(t, pair_op(t, lop3_and_or(q, 0x000f000fu, m), nz_lo, 0, 0), s_lo, 0, 1);
    a[1] = pair_op(t, pair_op(t, lop3_and_or(q, 0x00f000f0u, m), sixteenth, nz_hi, 2), s_hi, 0, 1);
    a[2] = pair_op(t, pair_op(t, lop3_and_or(q8, 0x000f000fu, m), nz_lo, 0, 0), s_lo, 0, 1);
    a[3] = pair_op(t, pair_op(t, lop3_and_or(q8, 0x00f000f0u, m), sixteenth, nz_hi, 2), s_hi, 0, 1);
  } else {
    const uint32_t m = 0x43004300u;
    for (int jj = 0; jj < 4; ++jj)
      a[jj] =
          pair_op(t, pair_op(t, lop3_and_or(q >> (4 * jj), 0x000f000fu, m), (jj & 1) ? nz_hi : nz_lo, 0, 0),
                  (jj & 1) ? s_hi : s_lo, 0, 1);
  }
}

// mma.m16n8k16 (row.col): D[16x8] += A[16x16] B[16x8], from the 32 lanes' fragments.
void mma(float (&c)[32][4], const uint32_t (&a)[32][4], const uint32_t (&b)[32][2], const Dt& t) {
  double A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int gid = l >> 2, tig = l & 3;
    for (int jj = 0; jj < 4; ++jj)
      for (int h = 0; h < 2; ++h)
        A[gid + 8 * (jj & 1)][2 * tig + 8 * (jj >> 1) + h] = t.dec(uint16_t(a[l][jj] >> (16 * h)));
    for (int r = 0; r < 2; ++r)
      for (int h = 0; h < 2; ++h) B[2 * tig + 8 * r + h][gid] = t.dec(uint16_t(b[l][r] >> (16 * h)));
  }
  for (int l = 0; l < 32; ++l) {
    const int gid = l >> 2, tig = l & 3;
    for (int e = 0; e < 4; ++e) {
      const int row = gid + 8 * (e >> 1), col = 2 * tig + (e & 1);
      double s = 0;
      for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
      c[l][e] += float(s);
    }
  }
}

int run_case(bool bf16, bool zp, int G, bool act_order, int K, int N, int M, uint64_t seed) {
  const Dt t{bf16};
  std::mt19937_64 rng(seed);
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  const int groups = G > 0 ? (K + G - 1) / G : 1;
  std::vector<uint8_t> code(size_t(K) * N), zero(size_t(groups) * N, 8);
  std::vector<uint16_t> scale(size_t(groups) * N), x(size_t(M) * K);
  std::vector<int32_t> gidx(K);
  for (auto& c : code) c = uint8_t(rng() & 15);
  if (zp)
    for (auto& z : zero) z = uint8_t(rng() & 15);
  for (auto& s : scale) s = t.enc(float(uni(0.001, 0.006)));
  for (auto& v : x) v = t.enc(float(uni(-1, 1)));
  for (int k = 0; k < K; ++k) gidx[k] = G > 0 ? k / G : 0;
  if (act_order) {
    std::vector<int> perm(K);
    for (int i = 0; i < K; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int i = 0; i < K; ++i) gidx[perm[i]] = i / G;
  }
  // Packed order, as process_weights plans it (layout_plan.cpp).
  nibble_linear_spec spec{};
  spec.struct_size = sizeof spec;
  spec.layer_name = "layout_check";
  spec.k = spec.full_k = K;
  spec.n = spec.full_n = N;
  spec.bits = 4;
  spec.group_size = G;
  spec.weight_type = zp ? NIBBLE_WT_UINT4 : NIBBLE_WT_UINT4B8;
  spec.act_dtype = spec.scale_dtype = bf16 ? NIBBLE_DTYPE_BF16 : NIBBLE_DTYPE_F16;
  spec.act_order = act_order;
  LayoutPlan lp;
  std::string why;
  if (plan_layout(spec, act_order ? gidx.data() : nullptr, &lp, &why) != NIBBLE_OK) {
    std::printf("  plan_layout: %s\n", why.c_str());
    return 1000000;
  }
  const int k_pad = int(lp.k_pad), g_eff = lp.g_eff;
  std::vector<int> prow(static_cast<size_t>(k_pad)), gmap(lp.gmap.begin(), lp.gmap.end());
  for (int k = 0; k < k_pad; ++k) prow[size_t(k)] = lp.perm.empty() ? (k < K ? k : -1) : lp.perm[size_t(k)];
  const int n_pad = (N + kNPad - 1) / kNPad * kNPad, strips = n_pad / kStripN, ku = k_pad / kUnitK;
  const int groups_pad = int(gmap.size());
  // repack_weights_kernel
  std::vector<uint32_t> packed(size_t(strips) * ku * 32 * 4);
  for (int s = 0; s < strips; ++s)
    for (int u = 0; u < ku; ++u)
      for (int lane = 0; lane < 32; ++lane)
        for (int w = 0; w < 4; ++w) {
          uint32_t word = 0;
          for (int j = 0; j < 8; ++j) {
            int row, col;
            unit_nibble_position(lane, w, j, &row, &col);
            const int kk = u * kUnitK + row, nn = s * kStripN + col, src = prow[kk];
            const uint32_t c = (nn < N && src >= 0 && src < K) ? code[size_t(src) * N + nn] : 0;
            word |= c << (4 * j);
          }
          packed[((size_t(s) * ku + u) * 32 + lane) * 4 + w] = word;
        }
  // repack_records_kernel
  std::vector<uint16_t> srec(size_t(groups_pad) * strips * 32);
  std::vector<uint8_t> zrec(size_t(groups_pad) * strips * 32);
  for (int g = 0; g < groups_pad; ++g)
    for (int s = 0; s < strips; ++s)
      for (int gid = 0; gid < 8; ++gid)
        for (int r = 0; r < 4; ++r) {
          const int col = s * kStripN + record_col(gid, r), cg = gmap[g];
          const bool ok = cg >= 0 && col < N;
          const size_t i = ((size_t(g) * strips + s) * 8 + gid) * 4 + r;
          srec[i] = ok ? scale[size_t(cg) * N + col] : t.enc(0.f);
          zrec[i] = ok ? zero[size_t(cg) * N + col] : 8;
        }
  // x in packed row order, as prep_x_kernel writes it (or the direct path when no permutation).
  std::vector<uint16_t> xp(size_t(M) * k_pad, 0);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < k_pad; ++k)
      if (prow[k] >= 0) xp[size_t(m) * k_pad + k] = x[size_t(m) * K + prow[k]];
  // The kernel's compute() for one warp per strip and one m8 tile at a time (NS = 1).
  std::vector<float> y(size_t(M) * N, NAN);
  for (int s = 0; s < strips; ++s)
    for (int m0 = 0; m0 < M; m0 += 8) {
      float acc[2][32][4] = {};
      // The kernels' group lookup: multiply-high by floor(2^32 / units_per_group) + 1.
      const uint32_t magic = lp.g_magic;
      for (int u = 0; u < ku; ++u) {
        const int g = plan_unit_group(u, magic);
        if (g != u * kUnitK / g_eff) return 1000000;
        uint32_t s2[32][4], nz[32][4];
        for (int lane = 0; lane < 32; ++lane) {
          const int gid = lane >> 2;
          const size_t rec = (size_t(g) * strips + s) * 8 + gid;
          const uint32_t srx = srec[rec * 4 + 0] | (uint32_t(srec[rec * 4 + 1]) << 16);
          const uint32_t sry = srec[rec * 4 + 2] | (uint32_t(srec[rec * 4 + 3]) << 16);
          uint32_t zb;
          std::memcpy(&zb, &zrec[rec * 4], 4);
          if (!zp) zb = 0x08080808u;
          s2[lane][0] = prmt(srx, srx, 0x1010u);
          s2[lane][1] = prmt(srx, srx, 0x3232u);
          s2[lane][2] = prmt(sry, sry, 0x1010u);
          s2[lane][3] = prmt(sry, sry, 0x3232u);
          zero_codes(t, zb, nz[lane]);
        }
        for (int ks = 0; ks < 2; ++ks) {
          uint32_t b[32][2];
          for (int lane = 0; lane < 32; ++lane) {
            const int gid = lane >> 2, tig = lane & 3, m = m0 + gid;
            const size_t k = size_t(u) * 32 + ks * 16 + tig * 4;
            auto xv = [&](int e) -> uint32_t { return m < M ? xp[size_t(m) * k_pad + k + e] : 0; };
            b[lane][0] = xv(0) | (xv(1) << 16);
            b[lane][1] = xv(2) | (xv(3) << 16);
          }
          for (int nt = 0; nt < 2; ++nt) {
            uint32_t a[32][4];
            for (int lane = 0; lane < 32; ++lane) {
              const uint32_t q = packed[((size_t(s) * ku + u) * 32 + lane) * 4 + 2 * ks + nt];
              dequant(t, q, s2[lane][2 * nt], s2[lane][2 * nt + 1], nz[lane][2 * nt], nz[lane][2 * nt + 1],
                      a[lane]);
            }
            mma(acc[nt], a, b, t);
          }
        }
      }
      for (int nt = 0; nt < 2; ++nt)
        for (int lane = 0; lane < 32; ++lane)
          for (int c = 0; c < 4; ++c) {
            int col, row;
            acc_position(lane, nt, c, &col, &row);
            const int n = s * kStripN + col, m = m0 + row;
            if (n < N && m < M) y[size_t(m) * N + n] = acc[nt][lane][c];
          }
    }
  // Reference and the conformance suite's tolerance.
  const double eps_out = bf16 ? 0x1p-8 : 0x1p-11, eps_acc = bf16 ? 0x1p-8 : 0x1p-10;
  std::vector<double> ref(size_t(M) * N), mag(size_t(M) * N);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double r = 0, a = 0;
      for (int k = 0; k < K; ++k) {
        const int g = gidx[k];
        const double w = double(t.dec(scale[size_t(g) * N + n])) *
                         (int(code[size_t(k) * N + n]) - zero[size_t(g) * N + n]);
        const double p = double(t.dec(x[size_t(m) * K + k])) * w;
        r += p;
        a += std::fabs(p);
      }
      ref[size_t(m) * N + n] = r;
      mag[size_t(m) * N + n] = a;
    }
  auto count_bad = [&](const std::vector<float>& got, const char* what) {
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (!(std::fabs(got[i] - ref[i]) <= eps_out * std::fabs(ref[i]) + eps_acc * mag[i] + 1e-30)) {
        if (bad < 5)
          std::printf("  %s: mismatch at [%zu, %zu]: got %g want %g\n", what, i / N, i % N, got[i], ref[i]);
        ++bad;
      }
    std::printf("%s %s %s G=%d %s K=%d N=%d M=%d: %s (%d bad)\n", what, bf16 ? "bf16" : "f16",
                zp ? "uint4" : "uint4b8", G, act_order ? "act-order" : "plain", K, N, M, bad ? "FAIL" : "ok",
                bad);
    return bad;
  };
  int bad = count_bad(y, "mma.sync");

  // The wgmma kernel (wgmma.cu) for each of its tiles, replayed through its shared-memory images:
  // bulk-copied weights and records at their stage offsets, x stored by the producer's permuted,
  // swizzled offsets, the B operand read back the way the tensor cores read a descriptor, A from
  // each consumer warp's dequantized word, D mapped to y as the epilogue does.
  // The x image (launch_wgmma_x_image) is built here thread by thread as that kernel does, and
  // each of its tiles must be byte for byte the tile the producer's own stores make.
  for (int BM : {16, 32, 64, 128, 256}) {
    // BM <= 128: BN 256, warp cw owns strip cw (both n16 halves); BM 256: BN 128, warp cw owns half
    // cw / 4 of strip cw % 4 (wgmma.cu, WgTile).
    const int BN = BM > 128 ? 128 : kWgBN, tile_strips = BN / kStripN, halves = tile_strips == kWgStrips ? 2 : 1;
    std::vector<float> y2(size_t(M) * N, NAN);
    std::vector<uint8_t> ximg(size_t(BM) * kWgXRowBytes), wimg(kWgStrips * 2 * 512), simg(2 * kWgStrips * 64),
        zimg(2 * kWgStrips * 32);
    const int KT = k_pad / kTileK, m_tiles = (M + BM - 1) / BM;
    std::vector<uint8_t> image(size_t(m_tiles) * KT * BM * kWgXRowBytes, 0xAB);
    for (int64_t idx = 0; idx < int64_t(m_tiles) * KT * BM * 32; ++idx) {
      int64_t mt;
      int ks, r, p;
      wg_x_image_word(idx, BM, KT, &mt, &ks, &r, &p);
      const int64_t m = mt * BM + r, k = int64_t(ks) * kTileK + 2 * p;
      const uint32_t v =
          m < M ? (uint32_t(xp[size_t(m) * k_pad + k]) | (uint32_t(xp[size_t(m) * k_pad + k + 1]) << 16))
                : 0u;
      std::memcpy(&image[size_t(wg_x_image_tile(mt, ks, KT, BM) + wg_x_offset(r, p))], &v, 4);
    }
    int image_bad = 0;
    for (int nti = 0; nti < n_pad / BN; ++nti)
      for (int mti = 0; mti * BM < M; ++mti) {
        std::vector<double> D(size_t(2) * 2 * 64 * BM, 0.0);  // [warpgroup][nt][row of m64][col]
        for (int kt = 0; kt < k_pad / kTileK; ++kt) {
          // Producer: x, weights, records.
          std::fill(ximg.begin(), ximg.end(), 0xAB);  // poison: every byte must be written
          for (int r = 0; r < BM; ++r)
            for (int p = 0; p < 32; ++p) {
              const int m = mti * BM + r, k = kt * kTileK + 2 * p;
              const uint32_t v = m < M ? (uint32_t(xp[size_t(m) * k_pad + k]) |
                                          (uint32_t(xp[size_t(m) * k_pad + k + 1]) << 16))
                                       : 0u;
              std::memcpy(&ximg[wg_x_offset(r, p)], &v, 4);
            }
          if (std::memcmp(ximg.data(), &image[size_t(wg_x_image_tile(mti, kt, KT, BM))], ximg.size()) != 0) {
            if (image_bad < 3) std::printf("  x image BM %d: tile (m %d, k stage %d) differs\n", BM, mti, kt);
            ++image_bad;
          }
          for (int j = 0; j < tile_strips; ++j)
            for (int u = 0; u < 2; ++u)
              for (int lane = 0; lane < 32; ++lane)
                std::memcpy(&wimg[wg_w_offset(j, u, lane)],
                            &packed[((size_t(nti * tile_strips + j) * ku + 2 * kt + u) * 32 + lane) * 4], 16);
          for (int u = 0; u < 2; ++u) {
            const int g = plan_unit_group(2 * kt + u, lp.g_magic);
            for (int j = 0; j < tile_strips; ++j)
              for (int gid = 0; gid < 8; ++gid) {
                const size_t rec = (size_t(g) * strips + nti * tile_strips + j) * 8 + gid;
                std::memcpy(&simg[wg_s_offset(u, j, gid)], &srec[rec * 4], 8);
                std::memcpy(&zimg[wg_z_offset(u, j, gid)], &zrec[rec * 4], 4);
              }
          }
          // Consumers: per unit, each warp's A fragments, then the warpgroup's wgmmas.
          for (int u = 0; u < 2; ++u) {
            uint32_t a[8][32][2][2][4];  // [strip][lane][k16 step][n16 half][register]
            for (int cw = 0; cw < tile_strips; ++cw)
              for (int lane = 0; lane < 32; ++lane) {
                const int gid = lane >> 2;
                uint32_t sr[2], zb, q[4];
                std::memcpy(sr, &simg[wg_s_offset(u, cw, gid)], 8);
                std::memcpy(&zb, &zimg[wg_z_offset(u, cw, gid)], 4);
                if (!zp) zb = 0x08080808u;
                std::memcpy(q, &wimg[wg_w_offset(cw, u, lane)], 16);
                const uint32_t s2[4] = {prmt(sr[0], sr[0], 0x1010u), prmt(sr[0], sr[0], 0x3232u),
                                        prmt(sr[1], sr[1], 0x1010u), prmt(sr[1], sr[1], 0x3232u)};
                uint32_t nz[4];
                zero_codes(t, zb, nz);
                for (int ks = 0; ks < 2; ++ks)
                  for (int nt = 0; nt < 2; ++nt)
                    dequant(t, q[2 * ks + nt], s2[2 * nt], s2[2 * nt + 1], nz[2 * nt], nz[2 * nt + 1],
                            a[cw][lane][ks][nt]);
              }
            for (int wg = 0; wg < 2; ++wg)
              for (int ks = 0; ks < 2; ++ks) {
                const uint64_t desc = wg_x_desc(0, 2 * u + ks);  // the x tile at shared address 0
                // B[16][BM] as the tensor cores read it.
                std::vector<double> B(size_t(16) * BM);
                for (int k = 0; k < 16; ++k)
                  for (int n = 0; n < BM; ++n) {
                    uint16_t h;
                    std::memcpy(&h, &ximg[wg_b_address(desc, k, n)], 2);
                    B[size_t(k) * BM + n] = t.dec(h);
                  }
                for (int nt = 0; nt < halves; ++nt) {
                  // A[64][16]: warp w of the warpgroup holds rows 16 w .. 16 w + 15 (mma A
                  // fragment): half nt of strip 4 wg + w (BN 256), or half wg of strip w (BN 128).
                  double A[64][16];
                  for (int w = 0; w < 4; ++w)
                    for (int lane = 0; lane < 32; ++lane) {
                      const int gid = lane >> 2, tig = lane & 3;
                      const int strip = halves == 2 ? 4 * wg + w : w, half = halves == 2 ? nt : wg;
                      for (int jj = 0; jj < 4; ++jj)
                        for (int hh = 0; hh < 2; ++hh)
                          A[16 * w + gid + 8 * (jj & 1)][2 * tig + 8 * (jj >> 1) + hh] =
                              t.dec(uint16_t(a[strip][lane][ks][half][jj] >> (16 * hh)));
                    }
                  for (int r = 0; r < 64; ++r)
                    for (int n = 0; n < BM; ++n) {
                      double acc = 0;
                      for (int k = 0; k < 16; ++k) acc += A[r][k] * B[size_t(k) * BM + n];
                      D[((size_t(wg) * 2 + nt) * 64 + r) * BM + n] += acc;
                    }
                }
              }
          }
        }
        // Epilogue: each consumer thread's accumulators to y.
        for (int cw = 0; cw < 8; ++cw)
          for (int lane = 0; lane < 32; ++lane)
            for (int nt = 0; nt < halves; ++nt)
              for (int i = 0; i < BM / 2; ++i) {
                int r64, col, f, row;
                wg_acc_position(cw & 3, lane, i, &r64, &col);
                wg_output_position(halves, cw, lane, nt, i, &f, &row);
                const int n = nti * BN + f, m = mti * BM + row;
                if (n < N && m < M)
                  y2[size_t(m) * N + n] = float(D[((size_t(cw >> 2) * 2 + nt) * 64 + r64) * BM + col]);
              }
      }
    char what[32];
    std::snprintf(what, sizeof what, "wgmma BM %d", BM);
    bad += count_bad(y2, what);
    std::printf("wgmma BM %d x image: %s (%d tiles differ)\n", BM, image_bad ? "FAIL" : "ok", image_bad);
    bad += image_bad;
  }
  return bad;
}

}  // namespace

int main() {
  int bad = 0;
  // A unit's nibble positions must cover its 32 x 32 codes exactly once.
  std::vector<int> seen(32 * 32, 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int w = 0; w < 4; ++w)
      for (int j = 0; j < 8; ++j) {
        int row, col;
        unit_nibble_position(lane, w, j, &row, &col);
        ++seen[row * 32 + col];
      }
  for (int v : seen) bad += v != 1;
  std::printf("unit coverage: %s\n", bad ? "FAIL" : "ok");
  {
    // 8-bit layers' two nibble planes in one pass (layout.h: planes8_bytes, planes8_sel;
    // Ops<__half>::zero_codes8 and dequant8_unscaled transcribed): every element of every a_jj is
    // exactly q - z, q = 16 h + l from the nibble at its position in the high and low words, z =
    // 16 zh + zl from the zero bytes of its row.
    std::mt19937 rng(7);
    const Dt t{false};
    int p8bad = 0;
    for (int it = 0; it < 20000; ++it) {
      const uint32_t lo = rng(), hi = rng(), zl = rng() & 0x0f0f0f0fu, zh = rng() & 0x0f0f0f0fu;
      const uint32_t zb = zl | (zh << 4);
      uint32_t nz[4];
      for (int r = 0; r < 4; ++r) nz[r] = prmt(zb, 0u, 0x4040u | uint32_t(r) | (uint32_t(r) << 8)) | 0xE400E400u;
      uint32_t even, odd;
      planes8_bytes(lo, hi, &even, &odd);
      for (int nt = 0; nt < 2; ++nt)
        for (int jj = 0; jj < 4; ++jj) {
          const int r = 2 * nt + (jj & 1);  // record entry of a_jj's row (as dequant's nz_lo / nz_hi)
          const uint32_t a = pair_op(t, prmt((jj & 1) ? odd : even, 0x64646464u, planes8_sel(jj)), nz[r], 0, 0);
          for (int h = 0; h < 2; ++h) {
            const int pos = jj + 4 * h;  // nibble of the element (layout.h, "Inside a word")
            const int q = int((hi >> (4 * pos)) & 15) * 16 + int((lo >> (4 * pos)) & 15);
            const int z = int((zb >> (8 * r)) & 0xff);
            p8bad += t.dec(uint16_t(a >> (16 * h))) != float(q - z);
          }
        }
    }
    std::printf("8-bit planes in one pass: %s\n", p8bad ? "FAIL" : "ok");
    bad += p8bad;
  }
  uint64_t seed = 1;
  for (bool bf16 : {false, true})
    for (bool zp : {false, true}) {
      bad += run_case(bf16, zp, 128, false, 320, 72, 9, seed++);
      bad += run_case(bf16, zp, 32, true, 130, 40, 3, seed++);
      bad += run_case(bf16, zp, -1, false, 264, 200, 17, seed++);
      bad += run_case(bf16, zp, 64, true, 512, 48, 8, seed++);
    }
  std::printf("%s\n", bad ? "FAILED" : "all layout checks passed");
  return bad ? 1 : 0;
}
