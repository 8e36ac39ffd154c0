// The portable kernel: plain C++ over the tile layout; the fallback on any CPU and the baseline
// the SIMD kernels are tested against (tests/test_cpu_kernels.cpp).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels.h"
#include "nibble/dtype.h"

namespace nibble::cpu {

namespace {
std::atomic<int> g_threads{0};
}

int num_threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  if (t > 0) return t;
  if (const char* env = std::getenv("NIBBLE_NUM_THREADS")) {
    const int v = std::atoi(env);
    if (v > 0) return v;
  }
  return omp_get_max_threads();
}

void set_num_threads(int n) { g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed); }

namespace {
// One line's 8 values of x into its slot of xp: 8 f32 (kF32, kF32Bytes), or as bf16 pairs of rows (p, p + 4): kBf16 the 4 pairs
// (x is bf16 there, so its f32 form truncates to it exactly), kBf16x2 the 4 pairs of the hi parts
// (rounded to nearest even) at `slot`, the 4 of the lo parts (x - hi, exact in bf16 for fp16 x)
// at `lo` (slot + 4 in the line layout, the next part's A tile in the tile layout).
inline void put_line(const float* v, XForm f, float* slot, float* lo_slot) {
  if (f32_words(f)) {
    std::memcpy(slot, v, 8 * sizeof(float));
    return;
  }
  uint32_t bits[8], hi[8], lo[8] = {};
  std::memcpy(bits, v, sizeof bits);
  for (int j = 0; j < 8; ++j) {
    hi[j] = f == XForm::kBf16 ? bits[j] >> 16 : (bits[j] + 0x7fffu + ((bits[j] >> 16) & 1u)) >> 16;
    if (f == XForm::kBf16x2) lo[j] = float_bits(v[j] - bits_float(hi[j] << 16)) >> 16;
  }
  uint32_t words[8];
  for (int p = 0; p < 4; ++p) {  // the pairs of rows the codes make (cpu_weights.h kPairStride)
    words[p] = hi[p] | hi[p + kPairStride] << 16;
    words[4 + p] = lo[p] | lo[p + kPairStride] << 16;
  }
  std::memcpy(slot, words, 4 * sizeof(uint32_t));
  if (f == XForm::kBf16x2) std::memcpy(lo_slot, words + 4, 4 * sizeof(uint32_t));
}

// Where row r's values of line l (in segment sg) go in xp: the first word of its slot, and the
// distance to its lo part (kBf16x2).
struct XSlots {
  const CpuWeights& w;
  const XLayout& l;
  int64_t parts() const { return l.form == XForm::kBf16x2 ? 2 : 1; }
  // Words of one block of rows.
  int64_t block_words() const {
    return l.tile_steps ? w.segments() * l.tile_steps * parts() * l.rb * 16 : w.lines * l.rb * x_words(l.form);
  }
  int64_t at(int64_t r, int64_t sg, int64_t line) const {
    const int64_t block = r / l.rb, rr = r % l.rb;
    if (!l.tile_steps) return block * block_words() + (line * l.rb + rr) * x_words(l.form);
    const int64_t i = line - w.seg_line[size_t(sg)];
    return block * block_words() + ((sg * l.tile_steps + i / 4) * parts() * l.rb + rr) * 16 + (i % 4) * 4;
  }
  int64_t lo_offset() const { return l.tile_steps ? l.rb * 16 : 4; }
};

// Elements [i0, i1) of row r of x [m, k] of `dt` as f32, into out[i0, i1) (one loop per dtype,
// so that the compiler vectorizes it).
void row_to_f32(const void* x, DType dt, int64_t r, int64_t k, int64_t i0, int64_t i1, float* out) {
  const size_t o = size_t(r * k);
  switch (dt) {
    case DType::bf16: {
      const uint16_t* p = static_cast<const uint16_t*>(x) + o;
      for (int64_t i = i0; i < i1; ++i) out[i] = bf16_to_float(p[i]);
      break;
    }
    case DType::f16: {
      const uint16_t* p = static_cast<const uint16_t*>(x) + o;
      for (int64_t i = i0; i < i1; ++i) out[i] = f16_to_float(p[i]);
      break;
    }
    case DType::f32: std::memcpy(out + i0, static_cast<const float*>(x) + o + i0, size_t(i1 - i0) * sizeof(float)); break;
    default:
      for (int64_t i = i0; i < i1; ++i) out[i] = float(load_float(x, dt, o + size_t(i)));
  }
}

// Line l's 8 values of x in the weights' padded row order: `row` itself (identity rows), else
// gathered into `buf` through row_src (0 for padding) and scaled by row_mult.
const float* line_values(const CpuWeights& w, const float* row, int64_t l, float* buf) {
  if (w.identity_rows) return row + l * 8;
  const int32_t* src = w.row_src.data() + l * 8;
  for (int j = 0; j < 8; ++j) buf[j] = src[j] < 0 ? 0.0f : row[size_t(src[j])];
  if (!w.row_mult.empty())
    for (int j = 0; j < 8; ++j) buf[j] *= w.row_mult[size_t(l * 8 + j)];
  return buf;
}

// XForm::kInt8 and kInt8Bytes (kernels.h): segments [s0, s1) of row r as three signed 8-bit parts
// in units of a power of two per segment, and A = that unit, X = the sum of the parts' x in it
// (kInt8Bytes: 17 times it).
void gather_segments_int8(const CpuWeights& w, const XSlots& slots, int64_t r, const float* row, int64_t s0,
                          int64_t s1, float* xp, float* xs) {
  const int64_t segs = w.segments(), rb = slots.l.rb;
  float* sums = xs + (r / rb) * segs * 2 * rb + (r % rb);
  const bool two = w.code_bits == 2;
  // kInt8Bytes: only the low-nibble rows (even j), whose x is x itself; the high rows (16 x) stay 0.
  const bool bytes = slots.l.form == XForm::kInt8Bytes;
  for (int64_t sg = s0; sg < s1; ++sg) {
    const int64_t l0 = w.seg_line[size_t(sg)], l1 = w.seg_line[size_t(sg + 1)];
    // The segment's values, zero past its end up to a whole pair of lines (2-bit codes: a step
    // reads both lines of the pair's word).
    float v[(kSegmentLines + 2) * 8] = {};
    float big = 0;
    for (int64_t l = l0; l < l1; ++l) {
      float buf[8];
      const float* lv = line_values(w, row, l, buf);
      for (int j = 0; j < 8; ++j) {
        if (bytes && j % 2) continue;
        v[(l - l0) * 8 + j] = lv[j];
        big = std::max(big, std::fabs(lv[j]));
      }
    }
    // The unit: the least power of two with |x| / unit <= 127 (1 for a segment of zeros).
    float unit = 1;
    if (big > 0) {
      int e = 0;
      std::frexp(big / 127, &e);
      unit = std::ldexp(1.0f, e);
      while (big / unit > 127) unit *= 2;
      while (big / (unit / 2) <= 127) unit /= 2;
    }
    // In float, exactly: v / unit by a power of two (its inverse where both are normal numbers,
    // else a division), rounding to nearest by the 1.5 2^23 sum (|v / unit| <= 127), and each
    // remainder v - a unit is a multiple of v's last bit no larger than v (so held exactly).
    const float step = unit / (1 << kInt8PartShift), fine = step / (1 << kInt8PartShift);
    const bool normal = unit >= 0x1p-100f && unit <= 0x1p100f;
    constexpr float kRound = 0x1.8p23f;
    int8_t part[3][(kSegmentLines + 2) * 8];
    int32_t sum = 0;  // sum of x in units of fine: exact (at most 128 x 2^21)
    const int64_t n = (l1 - l0) * 8 + (two ? 8 : 0);
    // div(q, d, inv): q / d, by the inverse where it is a normal number (the common case: one loop
    // the compiler vectorizes), else by division.
    const auto split = [&](auto div) {
      const float inv = 1 / unit, inv_step = 1 / step, inv_fine = 1 / fine;
      for (int64_t i = 0; i < n; ++i) {
        const float a = (div(v[i], unit, inv) + kRound) - kRound, r1 = v[i] - a * unit;
        const float b = (div(r1, step, inv_step) + kRound) - kRound, r2 = r1 - b * step;
        const float c = (div(r2, fine, inv_fine) + kRound) - kRound;
        part[0][i] = int8_t(a), part[1][i] = int8_t(b), part[2][i] = int8_t(c);
        sum += int32_t(a) * (1 << 2 * kInt8PartShift) + int32_t(b) * (1 << kInt8PartShift) + int32_t(c);
      }
    };
    if (normal)
      split([](float q, float, float inv) { return q * inv; });
    else
      split([](float q, float d, float) { return q / d; });
    // Word 2p + J of line l's slot: byte i = part p of the row that step J (and, for 2-bit codes,
    // the line's half H of its pair) multiplies by the code in byte i (kernels.h, kernel_avx512vnni.cpp).
    // 4-bit codes and 8-bit nibble rows: the word of parity J is bytes J, J + 2, J + 4, J + 6 of the
    // line's 8 bytes of the part (little-endian), packed with masks and shifts.
    const auto even_bytes = [](uint64_t b) {
      b &= 0x00ff00ff00ff00ffull;
      b = (b | b >> 8) & 0x0000ffff0000ffffull;
      return uint32_t(b | b >> 16);
    };
    // The slots of consecutive lines are rb x_words words apart (the line layout: XSlots::at).
    float* slot = xp + slots.at(r, sg, l0);
    const int64_t slot_stride = rb * x_words(slots.l.form);
    for (int64_t l = l0; l < l1; ++l, slot += slot_stride) {
      const int64_t li = l - l0;
      uint32_t words[6];
      for (int p = 0; p < 3; ++p) {
        if (two) {
          for (int J = 0; J < 2; ++J) {
            uint32_t word = 0;
            for (int i = 0; i < 4; ++i)
              word |= uint32_t(uint8_t(part[p][(li / 2) * 16 + 4 * i + 2 * (li % 2) + J])) << (8 * i);
            words[2 * p + J] = word;
          }
        } else {
          uint64_t b;
          std::memcpy(&b, &part[p][li * 8], sizeof b);
          words[2 * p] = even_bytes(b);
          words[2 * p + 1] = even_bytes(b >> 8);
        }
      }
      std::memcpy(slot, words, sizeof words);
    }
    sums[(sg * 2) * rb] = unit;
    sums[(sg * 2 + 1) * rb] = float(std::ldexp(double(sum) * (bytes ? 17 : 1), -2 * kInt8PartShift));
  }
}

// Segments [s0, s1) of row r: its lines' slots of xp and its A and X of xs. `row` holds x's row
// r as f32 wherever these segments read it (row_src, or lines * 8 positions with zeros past K).
void gather_segments(const CpuWeights& w, const XSlots& slots, int64_t r, const float* row, int64_t s0, int64_t s1,
                     float* xp, float* xs) {
  const XForm f = slots.l.form;
  if (int8_parts(f)) return gather_segments_int8(w, slots, r, row, s0, s1, xp, xs);
  const int64_t segs = w.segments(), rb = slots.l.rb, lo = slots.lo_offset();
  float* sums = xs + (r / rb) * segs * 2 * rb + (r % rb);
  for (int64_t sg = s0; sg < s1; ++sg) {
    // Sums per row j of the line in 8 independent lanes (so the additions do not wait for each
    // other), combined in double: the kernel subtracts them from its fp32 sums.
    float lane[8] = {};
    const int64_t l0 = w.seg_line[size_t(sg)], l1 = w.seg_line[size_t(sg + 1)];
    for (int64_t l = l0; l < l1; ++l) {
      float gathered[8];
      const float* v = line_values(w, row, l, gathered);
      for (int j = 0; j < 8; ++j) lane[j] += v[j];
      float* slot = xp + slots.at(r, sg, l);
      put_line(v, f, slot, slot + lo);
    }
    // The tile layout's last K step of a segment: lines past its end multiply nothing, and must be
    // 0 there (the tile reads them).
    if (slots.l.tile_steps)
      for (int64_t l = l1; (l - l0) % 4; ++l) {
        float* slot = xp + slots.at(r, sg, l);
        std::fill(slot, slot + 4, 0.0f);
        if (f == XForm::kBf16x2) std::fill(slot + lo, slot + lo + 4, 0.0f);
      }
    double offset_sum = 0, sum = 0;  // A and X of kernels.h
    for (int j = 0; j < 8; ++j) {
      offset_sum += double(trick_offset(f, j, w.code_bits)) * lane[j];
      sum += lane[j];
    }
    // Symmetric weights: the zero point's term folded into A (A + z / S X), so that the
    // kernels subtract one sum per segment instead of two.
    if (!w.tile_zeros(0)) offset_sum += double(w.sym_zero / trick_scale(f)) * sum;
    sums[(sg * 2) * rb] = float(offset_sum);
    sums[(sg * 2 + 1) * rb] = float(sum);
  }
}
}  // namespace

int64_t amx_tile_steps(const CpuWeights& w) {
  int64_t longest = 1;
  for (int64_t sg = 0; sg < w.segments(); ++sg) longest = std::max(longest, w.seg_line[size_t(sg + 1)] - w.seg_line[size_t(sg)]);
  return (longest + 3) / 4;
}

int64_t x_buffer_words(const CpuWeights& w, const XLayout& l, int64_t m) {
  return (m + l.rb - 1) / l.rb * XSlots{w, l}.block_words();
}

namespace {
// Parts per row: a row splits into one part per member when there are fewer rows than members, so
// that M = 1 is gathered by the whole team. A part of a row read through row_src (act order, 8-bit
// nibble rows, nibble planes) converts all of x's row, as its lines may read any of it: each
// member then takes K conversions and 1/P of the padded rows, where one member alone took the K
// conversions and all the rows (8-bit nibble rows: 2K) while the others waited.
int64_t row_parts(const CpuWeights& w, int64_t m, int members) {
  return m < members ? std::min<int64_t>(members, w.segments()) : 1;
}
}  // namespace

int64_t gather_x_units(const CpuWeights& w, const XLayout& l, int64_t m, int members) {
  const int64_t blocks = (m + l.rb - 1) / l.rb;
  return m * row_parts(w, m, members) + blocks * l.rb - m;
}

void gather_x_unit(const CpuWeights& w, const void* x, int32_t dtype, const XLayout& l, int64_t m,
                   int members, int64_t u, float* xp, float* xs) {
  const DType dt = DType(dtype);
  const XSlots slots{w, l};
  const int64_t rb = l.rb, segs = w.segments(), parts = row_parts(w, m, members);
  if (u >= m * parts) {  // padding: every slot and sum 0
    const int64_t r = m + (u - m * parts);
    const auto zero = [&](int64_t sg, int64_t ln) {
      float* slot = xp + slots.at(r, sg, ln);
      std::fill(slot, slot + (l.tile_steps ? 4 : x_words(l.form)), 0.0f);
      if (l.tile_steps && l.form == XForm::kBf16x2)
        std::fill(slot + slots.lo_offset(), slot + slots.lo_offset() + 4, 0.0f);
    };
    for (int64_t sg = 0; sg < segs; ++sg) {
      const int64_t l0 = w.seg_line[size_t(sg)],
                    l1 = l.tile_steps ? l0 + 4 * l.tile_steps : w.seg_line[size_t(sg + 1)];
      for (int64_t ln = l0; ln < l1; ++ln) zero(sg, ln);
    }
    for (int64_t sg = 0; sg < 2 * segs; ++sg) xs[(r / rb) * segs * 2 * rb + sg * rb + r % rb] = 0.0f;
    return;
  }
  thread_local std::vector<float> t_row;
  if (t_row.size() < size_t(w.lines * 8)) t_row.resize(size_t(w.lines * 8));
  float* row = t_row.data();
  const int64_t r = u / parts, part = u % parts;
  const int64_t s0 = segs * part / parts, s1 = segs * (part + 1) / parts;
  // The positions of x this part reads: its lines' (identity rows, zero past K), else all of K.
  const int64_t i0 = w.identity_rows ? w.seg_line[size_t(s0)] * 8 : 0;
  const int64_t i1 = w.identity_rows ? w.seg_line[size_t(s1)] * 8 : w.k;
  row_to_f32(x, dt, r, w.k, std::min(i0, w.k), std::min(i1, w.k), row);
  if (i1 > w.k) std::fill(row + std::max(i0, w.k), row + i1, 0.0f);
  gather_segments(w, slots, r, row, s0, s1, xp, xs);
}

void gather_x(const CpuWeights& w, const void* x, int32_t dtype, const XLayout& l, int64_t m, float* xp,
              float* xs, const TeamMember& me) {
  const int64_t units = gather_x_units(w, l, m, me.size());
  for (int64_t u = me.share_begin(units); u < me.share_end(units); ++u)
    gather_x_unit(w, x, dtype, l, m, me.size(), u, xp, xs);
}

void fused_portable(const FusedArgs& a, int64_t t0, int64_t t1) {
  const CpuWeights& w = *a.w;
  const int64_t ldy = a.ldy;
  for (int64_t t = t0; t < t1; ++t) {
    const float* z = w.tile_zeros(t);
    for (int64_t r = 0; r < a.m; ++r) {
      float out[kTileN] = {0}, acc[kTileN];
      const float* x = a.xp + (r / a.rb) * w.lines * a.rb * 8 + (r % a.rb) * 8;
      for (int64_t sg = a.seg0; sg < a.seg1; ++sg) {
        const int64_t g = w.seg_group[size_t(sg)];
        std::fill(acc, acc + kTileN, 0.0f);
        for (int64_t l = w.seg_line[size_t(sg)]; l < w.seg_line[size_t(sg + 1)]; ++l)
          for (int j = 0; j < 8; ++j) {
            const float xv = x[l * a.rb * 8 + j];
            for (int64_t c = 0; c < kTileN; ++c)
              acc[c] += xv * (float(w.code_at(t, l, c, j)) - (z ? z[g * kTileN + c] : w.sym_zero));
          }
        for (int64_t c = 0; c < kTileN; ++c) out[c] += w.scale(t, g, c) * acc[c];
      }
      std::memcpy(a.y + r * ldy + t * kTileN, out, sizeof out);
    }
  }
}

}  // namespace nibble::cpu
