// process_weights of cpu_w4a16: canonical form -> the tile-major layout of cpu_weights.h.
#include "cpu_weights.h"

#include <sys/mman.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "nibble/dtype.h"

namespace nibble::cpu {

namespace {
constexpr std::size_t kHugePage = std::size_t(2) << 20;
std::align_val_t stream_alignment(std::size_t bytes) { return std::align_val_t(bytes >= kHugePage ? kHugePage : 64); }
}  // namespace

void* stream_alloc(std::size_t bytes) {
  void* p = ::operator new(bytes, stream_alignment(bytes));
  // Advice only: without THP (or with THP off) the memory stays in 4 KiB pages.
  if (bytes >= kHugePage) ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  return p;
}

void stream_free(void* p, std::size_t bytes) noexcept { ::operator delete(p, stream_alignment(bytes)); }

CpuWeights prepare_cpu_weights(const nibble_linear_spec& s, const nibble_canonical_weights& w) {
  if (!w.qweight || !w.scales) throw std::invalid_argument("tensor 'qweight' or 'scales' is missing");
  const int bits = s.bits;
  if (bits != 4 && bits != 2)
    throw std::invalid_argument("prepare_cpu_weights: expected 4- or 2-bit codes, found " + std::to_string(bits));
  if (nibble_weight_type_bits(s.weight_type) != bits)
    throw std::invalid_argument("prepare_cpu_weights: the weight type does not have " + std::to_string(bits) + " bits");
  const bool asym = !nibble_weight_type_symmetric(s.weight_type);
  if (asym && !w.zeros) throw std::invalid_argument("tensor 'zeros' is missing for a layer with zero points");
  if (s.act_order && !w.g_idx) throw std::invalid_argument("tensor 'g_idx' is missing for an act-order layer");
  if (s.has_bias && !w.bias) throw std::invalid_argument("tensor 'bias' is missing");

  CpuWeights cw;
  const int64_t K = s.k, N = s.n;
  const int64_t G = s.group_size <= 0 ? K : s.group_size;
  const int64_t ng = nibble_spec_num_groups(&s);
  cw.k = K;
  cw.n = N;
  cw.groups = ng;
  cw.act_dtype = s.act_dtype;
  cw.code_bits = bits;
  if (!asym) cw.sym_zero = float(1 << (bits - 1));
  cw.tiles = (N + kTileN - 1) / kTileN;
  const int64_t quantum = group_row_quantum(bits), per_word = 32 / bits;
  const uint32_t field = (1u << bits) - 1;

  // Rows of each group, in canonical order within the group.
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(ng));
  for (int64_t k = 0; k < K; ++k) {
    const int64_t g = s.act_order ? w.g_idx[k] : k / G;
    if (g < 0 || g >= ng)
      throw std::invalid_argument("tensor 'g_idx': value " + std::to_string(g) + " at row " + std::to_string(k) +
                                  " outside [0, " + std::to_string(ng) + ")");
    members[size_t(g)].push_back(int32_t(k));
  }
  cw.group_line.assign(size_t(ng + 1), 0);
  for (int64_t g = 0; g < ng; ++g) {
    auto& rows = members[size_t(g)];
    for (int32_t r : rows) cw.row_src.push_back(r);
    while (int64_t(cw.row_src.size()) % quantum) cw.row_src.push_back(-1);  // pad the group to whole lines (words)
    cw.group_line[size_t(g + 1)] = int64_t(cw.row_src.size() / 8);
  }
  cw.lines = int64_t(cw.row_src.size() / 8);
  for (int64_t g = 0; g < ng; ++g)
    for (int64_t l = cw.group_line[size_t(g)]; l < cw.group_line[size_t(g + 1)]; l += kSegmentLines) {
      cw.seg_line.push_back(l);
      cw.seg_group.push_back(int32_t(g));
    }
  cw.seg_line.push_back(cw.lines);
  for (int64_t r = 0; r < int64_t(cw.row_src.size()); ++r)
    cw.identity_rows &= (r < K ? cw.row_src[size_t(r)] == r : cw.row_src[size_t(r)] == -1);

  // Codes, tile-major. Fast path: rows not reordered, so each canonical word is a line's word
  // (4 bits), or the word of a pair of lines (2 bits).
  cw.q.assign(size_t(cw.tiles * cw.tile_words()), 0);
  const int64_t word_rows = cw.lines * 8 / per_word;  // rows of words per tile
  for (int64_t t = 0; t < cw.tiles; ++t) {
    uint32_t* dst = cw.q.data() + t * cw.tile_words();
    const int64_t c0 = t * kTileN, nc = std::min(kTileN, N - c0);
    if (cw.identity_rows) {
      const int64_t kw = (K + per_word - 1) / per_word;
      for (int64_t l = 0; l < std::min(word_rows, kw); ++l)
        for (int64_t c = 0; c < nc; ++c) dst[l * kTileN + c] = w.qweight[l * N + c0 + c];
    } else {
      for (int64_t r = 0; r < cw.lines * 8; ++r) {
        const int32_t src = cw.row_src[size_t(r)];
        if (src < 0) continue;
        const uint32_t* srow = w.qweight + (src / per_word) * N + c0;
        const int shift_in = bits * int(src % per_word), shift_out = cw.row_shift(r / 8, int(r % 8));
        uint32_t* drow = dst + cw.line_offset(r / 8);
        for (int64_t c = 0; c < nc; ++c) drow[c] |= ((srow[c] >> shift_in) & field) << shift_out;
      }
    }
  }
  // Canonical rows past K inside the last word are zero (the canonical form guarantees it), and
  // the matching x entries are zero too, so padding contributes nothing.

  cw.scale_type = s.scale_dtype == NIBBLE_DTYPE_F16 ? ScaleType::kF16 : s.scale_dtype == NIBBLE_DTYPE_BF16 ? ScaleType::kBf16 : ScaleType::kF32;
  if (cw.scale_type == ScaleType::kF32) cw.scales.assign(size_t(cw.tiles * ng * kTileN), 0.0f);
  else cw.scales16.assign(size_t(cw.tiles * ng * kTileN), 0);
  if (asym) cw.zeros.assign(size_t(cw.tiles * ng * kTileN), 0.0f);
  for (int64_t g = 0; g < ng; ++g)
    for (int64_t c = 0; c < N; ++c) {
      const size_t o = size_t(((c / kTileN) * ng + g) * kTileN + c % kTileN);
      if (cw.scale_type == ScaleType::kF32) cw.scales[o] = float(load_float(w.scales, DType(s.scale_dtype), size_t(g * N + c)));
      else cw.scales16[o] = static_cast<const uint16_t*>(w.scales)[g * N + c];  // the same bits
      if (asym) cw.zeros[o] = float(w.zeros[g * N + c]);
    }
  if (s.has_bias) {
    cw.bias.resize(size_t(N));
    for (int64_t i = 0; i < N; ++i) cw.bias[size_t(i)] = float(load_float(w.bias, DType(s.act_dtype), size_t(i)));
  }
  return cw;
}

CpuWeights prepare_cpu_weights_8bit(const nibble_linear_spec& s, const nibble_canonical_weights& w) {
  if (s.bits != 8) throw std::invalid_argument("prepare_cpu_weights_8bit: not an 8-bit layer");
  const bool sym = s.weight_type == NIBBLE_WT_UINT8B128;
  nibble_linear_spec v = s;
  v.bits = 4;
  v.weight_type = sym ? NIBBLE_WT_UINT4B8 : NIBBLE_WT_UINT4;
  v.k = 2 * s.k;
  v.full_k = 2 * (s.full_k > 0 ? s.full_k : s.k);
  v.group_size = s.group_size > 0 ? 2 * s.group_size : s.group_size;  // the same groups
  std::vector<int32_t> g_idx;
  nibble_canonical_weights vw = w;  // the same words, scales and zero points
  if (s.act_order) {
    if (!w.g_idx) throw std::invalid_argument("tensor 'g_idx' is missing for an act-order layer");
    g_idx.resize(size_t(v.k));
    for (int64_t k = 0; k < s.k; ++k) g_idx[size_t(2 * k)] = g_idx[size_t(2 * k + 1)] = w.g_idx[k];
    vw.g_idx = g_idx.data();
  }
  if (nibble_spec_num_groups(&v) != nibble_spec_num_groups(&s))
    throw std::invalid_argument("prepare_cpu_weights_8bit: the nibble rows would change the group count");
  CpuWeights cw = prepare_cpu_weights(v, vw);
  for (float& z : cw.zeros) z /= 17.0f;
  cw.sym_zero = 128.0f / 17.0f;
  // Groups hold whole pairs (2 rows per code) padded to 8 rows, so a padded row's parity is its
  // nibble: even rows read x, odd rows 16 x.
  cw.row_mult.assign(cw.row_src.size(), 1.0f);
  for (size_t r = 0; r < cw.row_src.size(); ++r) {
    const int32_t src = cw.row_src[r];
    if (src < 0) continue;
    if ((src & 1) != int32_t(r & 1)) throw std::invalid_argument("prepare_cpu_weights_8bit: a nibble pair was split");
    cw.row_mult[r] = src & 1 ? 16.0f : 1.0f;
    cw.row_src[r] = src >> 1;
  }
  cw.k = s.k;
  cw.identity_rows = false;
  cw.byte_rows = true;
  return cw;
}

void read_x_through(CpuWeights& w, const std::vector<int32_t>& x_rows, int64_t real_k) {
  w.k = real_k;
  if (x_rows.empty()) return;
  for (int32_t& r : w.row_src) r = r < 0 ? -1 : x_rows[size_t(r)];
  w.identity_rows = false;
}

float CpuWeights::scale(int64_t t, int64_t g, int64_t c) const {
  const size_t o = size_t((t * groups + g) * kTileN + c);
  switch (scale_type) {
    case ScaleType::kF16: return f16_to_float(scales16[o]);
    case ScaleType::kBf16: return bf16_to_float(scales16[o]);
    default: return scales[o];
  }
}

void dequantize_tile(const CpuWeights& w, int64_t t, int64_t line0, int64_t line1, float* dst) {
  const float* z = w.tile_zeros(t);
  int64_t g = 0;
  for (int64_t l = line0; l < line1; ++l) {
    while (w.group_line[size_t(g + 1)] <= l) ++g;
    for (int j = 0; j < 8; ++j) {
      float* row = dst + ((l - line0) * 8 + j) * kTileN;
      for (int64_t c = 0; c < kTileN; ++c)
        row[c] = w.scale(t, g, c) * (float(w.code_at(t, l, c, j)) - (z ? z[g * kTileN + c] : w.sym_zero));
    }
  }
}

}  // namespace nibble::cpu
