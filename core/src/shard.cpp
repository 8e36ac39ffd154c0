// Tensor-parallel sharding: slicing N (column) or K (row) while keeping groups and g_idx consistent.
#include "nibble/shard.h"

#include <fmt/format.h>

#include <cstring>
#include <numeric>

#include "nibble/error.h"

namespace nibble {

namespace {

// Columns [c0, c0 + nc) of a row-major [rows, cols] tensor.
Tensor slice_cols(const Tensor& t, int64_t c0, int64_t nc) {
  if (t.empty()) return t;
  const int64_t rows = t.ndim() == 1 ? 1 : t.dim(0), cols = t.ndim() == 1 ? t.dim(0) : t.dim(1);
  const std::size_t es = dtype_size(t.dtype());
  Tensor out = Tensor::zeros(t.dtype(), t.ndim() == 1 ? Shape{nc} : Shape{rows, nc});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<uint8_t*>(out.mutable_data()) + r * nc * es,
                static_cast<const uint8_t*>(t.data()) + (r * cols + c0) * es, std::size_t(nc) * es);
  return out;
}

// Rows [r0, r0 + nr) of a row-major tensor.
Tensor slice_rows(const Tensor& t, int64_t r0, int64_t nr) {
  if (t.empty()) return t;
  Shape s = t.shape();
  const std::size_t row_bytes = t.nbytes() / std::size_t(s[0]);
  s[0] = nr;
  Tensor out = Tensor::zeros(t.dtype(), s);
  std::memcpy(out.mutable_data(), static_cast<const uint8_t*>(t.data()) + r0 * row_bytes, std::size_t(nr) * row_bytes);
  return out;
}

}  // namespace

LinearSpec shard_spec(const LinearSpec& s, Parallel how, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': rank {} of world {} is not a valid partition", s.name, rank, world));
  if (s.parallel != Parallel::none)
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': already a {}-parallel partition", s.name, parallel_name(s.parallel)));
  LinearSpec out = s;
  out.full_k = s.k;
  out.full_n = s.n;
  out.parallel = how;
  if (how == Parallel::column) {
    if (s.n % world)
      throw Error(Errc::unsupported, fmt::format("layer '{}': column-parallel split of N {} over {} ranks: not divisible",
                                                 s.name, s.n, world));
    out.n = s.n / world;
  } else if (how == Parallel::row) {
    if (s.k % world)
      throw Error(Errc::unsupported, fmt::format("layer '{}': row-parallel split of K {} over {} ranks: not divisible",
                                                 s.name, s.k, world));
    const int64_t kp = s.k / world;
    // A rank's rows must be whole words of the bit stream: 32 / gcd(32, b) rows (8 at 4 bits, 32 at 3).
    const int64_t unit = 32 / std::gcd<int64_t>(32, s.bits);
    if (kp % unit)
      throw Error(Errc::unsupported, fmt::format("layer '{}': row-parallel split of K {} over {} ranks: K_part {} is not a "
                                                 "multiple of {} ({}-bit codes are packed {} rows to a whole number of words)",
                                                 s.name, s.k, world, kp, unit, s.bits, unit));
    // With act order every rank keeps all groups, so only a plain grouped layer can straddle.
    if (!s.act_order && s.group_size > 0 && kp % s.group_size)
      throw Error(Errc::unsupported,
                  fmt::format("layer '{}': row-parallel split of K {} over {} ranks: K_part {} is not a "
                              "multiple of the group size {}: a group would straddle two ranks",
                              s.name, s.k, world, kp, s.group_size));
    out.k = kp;
    out.has_bias = s.has_bias && rank == 0;
  } else {
    throw Error(Errc::invalid_argument, fmt::format("layer '{}': shard() needs column or row", s.name));
  }
  return out;
}

CanonicalLinear shard(const CanonicalLinear& w, Parallel how, int rank, int world) {
  const LinearSpec& s = w.spec;
  CanonicalLinear out;
  out.spec = shard_spec(s, how, rank, world);
  if (how == Parallel::column) {
    const int64_t np = out.spec.n, c0 = rank * np;
    out.qweight = slice_cols(w.qweight, c0, np);
    out.zeros = slice_cols(w.zeros, c0, np);
    out.scales = slice_cols(w.scales, c0, np);
    out.g_idx = w.g_idx;
    out.bias = slice_cols(w.bias, c0, np);
  } else {
    const int64_t kp = out.spec.k, k0 = rank * kp;
    out.qweight = slice_rows(w.qweight, k0 * s.bits / 32, kp * s.bits / 32);
    if (s.act_order) {
      out.g_idx = slice_rows(w.g_idx, k0, kp);  // values still index the full layer's groups
      out.zeros = w.zeros;
      out.scales = w.scales;
    } else if (s.group_size <= 0) {
      out.zeros = w.zeros;  // one scale per output column covers every K slice
      out.scales = w.scales;
    } else {
      const int64_t g0 = k0 / s.group_size, ng = kp / s.group_size;
      out.zeros = slice_rows(w.zeros, g0, ng);
      out.scales = slice_rows(w.scales, g0, ng);
    }
    if (rank == 0) out.bias = w.bias;
  }
  validate(out);
  return out;
}

}  // namespace nibble
