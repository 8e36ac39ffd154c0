// Layout planning of cuda_w4a16 (layout_plan.h).
#include "layout_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "gpu_plugin.h"
#include "layout.h"

namespace nibble::cuda {

namespace {

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

std::string layer(const nibble_linear_spec& s) { return s.layer_name ? s.layer_name : ""; }

}  // namespace

int32_t plan_layout(const nibble_linear_spec& s, const int32_t* g_idx, LayoutPlan* out, std::string* why) {
  LayoutPlan p;
  p.k = s.k;
  p.n = s.n;
  const int64_t groups = nibble_spec_num_groups(&s);
  if (bool(s.act_order) != (g_idx != nullptr)) {
    *why = "layer '" + layer(s) + "': g_idx " + (g_idx ? "present" : "missing") +
           " but act_order=" + std::to_string(s.act_order);
    return NIBBLE_ERR_INVALID_ARGUMENT;
  }
  if (s.act_order) {
    // Rows sorted by group, each group's rows in canonical order, every group padded to the
    // longest one rounded up to kGroupAlign, so that a unit never straddles two groups and the
    // group of a packed row is a division. Empty groups (row-parallel shards) take no slot.
    std::vector<std::vector<int32_t>> rows(static_cast<size_t>(groups));
    for (int64_t r = 0; r < s.k; ++r) {
      const int32_t g = g_idx[r];
      if (g < 0 || g >= groups) {
        *why = "layer '" + layer(s) + "': g_idx[" + std::to_string(r) + "] = " + std::to_string(g) +
               ", expected 0.." + std::to_string(groups - 1);
        return NIBBLE_ERR_INVALID_ARGUMENT;
      }
      rows[size_t(g)].push_back(int32_t(r));
    }
    size_t longest = 1;
    for (const auto& v : rows) longest = std::max(longest, v.size());
    p.g_eff = int32_t(round_up(int64_t(longest), kGroupAlign));
    std::vector<int32_t> kept;
    for (int64_t g = 0; g < groups; ++g)
      if (!rows[size_t(g)].empty()) kept.push_back(int32_t(g));
    p.k_pad = round_up(int64_t(kept.size()) * p.g_eff, kTileK);
    p.perm.assign(size_t(p.k_pad), -1);
    for (size_t gi = 0; gi < kept.size(); ++gi) {
      const auto& v = rows[size_t(kept[gi])];
      for (size_t j = 0; j < v.size(); ++j) p.perm[gi * size_t(p.g_eff) + j] = v[j];
    }
    p.groups_pad = int32_t((p.k_pad + p.g_eff - 1) / p.g_eff);
    p.gmap.assign(size_t(p.groups_pad), -1);
    for (size_t gi = 0; gi < kept.size(); ++gi) p.gmap[gi] = kept[gi];
  } else {
    p.k_pad = round_up(s.k, kTileK);
    p.g_eff = s.group_size > 0 ? s.group_size : int32_t(p.k_pad);
    if (p.g_eff % kGroupAlign) {
      *why = "layer '" + layer(s) + "': group size " + std::to_string(s.group_size) +
             " is not a multiple of " + std::to_string(kGroupAlign);
      return NIBBLE_ERR_UNSUPPORTED;
    }
    p.groups_pad = int32_t((p.k_pad + p.g_eff - 1) / p.g_eff);
    p.gmap.resize(size_t(p.groups_pad));
    for (int32_t g = 0; g < p.groups_pad; ++g) p.gmap[size_t(g)] = g < groups ? g : -1;
  }
  p.n_pad = round_up(s.n, kNPad);
  p.strips = int32_t(p.n_pad / kStripN);
  p.ku = int32_t(p.k_pad / kUnitK);
  p.kt = int32_t(p.k_pad / kTileK);
  // The kernels' group lookup by multiply-high is exact while ku * units_per_group < 2^32.
  const uint64_t upg = uint64_t(p.g_eff / kUnitK);
  if (uint64_t(p.ku) * upg >= (uint64_t(1) << 32)) {
    *why = "layer '" + layer(s) + "': K_pad " + std::to_string(p.k_pad) + " with groups of " +
           std::to_string(p.g_eff) + " rows is too large";
    return NIBBLE_ERR_UNSUPPORTED;
  }
  p.g_magic = upg == 1 ? 0u : uint32_t((uint64_t(1) << 32) / upg + 1);
  *out = std::move(p);
  return NIBBLE_OK;
}

int32_t plan_layer(const nibble_linear_spec& s, const nibble_canonical_weights& w, PlannedLayer* out,
                   std::string* why) {
  PlannedLayer& p = *out;
  p.spec = s;
  p.weights = w;
  if (plugin::needs_nibble_planes(s)) {
    try {
      p.planes = plugin::make_nibble_planes(s, w);
    } catch (const std::invalid_argument& e) {
      *why = "layer '" + layer(s) + "': " + e.what();
      return NIBBLE_ERR_INVALID_ARGUMENT;
    }
    p.spec = p.planes->spec;
    p.weights = p.planes->weights();
  }
  if (int32_t st = check_scales(p.spec, p.weights.scales, why)) return st;
  if (int32_t st = plan_layout(p.spec, p.weights.g_idx, &p.lp, why)) return st;
  p.x_map = p.planes ? plugin::compose_row_map(p.lp.perm, p.lp.k_pad, p.spec.k, p.planes->x_rows) : p.lp.perm;
  return NIBBLE_OK;
}

int32_t check_scales(const nibble_linear_spec& s, const void* scales, std::string* why) {
  const int64_t count = nibble_spec_num_groups(&s) * s.n;
  const float limit = s.act_dtype == NIBBLE_DTYPE_F16 ? 65504.f : 3.0e38f;
  for (int64_t i = 0; i < count; ++i) {
    float v;
    if (s.scale_dtype == NIBBLE_DTYPE_F32) {
      v = static_cast<const float*>(scales)[i];
    } else {
      const uint16_t b = static_cast<const uint16_t*>(scales)[i];
      if (s.scale_dtype == NIBBLE_DTYPE_BF16) {
        const uint32_t u = uint32_t(b) << 16;
        std::memcpy(&v, &u, 4);
      } else {
        v = (b & 0x7c00) == 0x7c00 ? INFINITY : 0.f;  // only the range matters: finite fp16 fits
      }
    }
    if (!(std::fabs(v) <= limit)) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "layer '%s': scale %g at group %lld, column %lld does not fit %s activations",
                    layer(s).c_str(), double(v), (long long)(i / s.n), (long long)(i % s.n),
                    s.act_dtype == NIBBLE_DTYPE_F16 ? "f16" : "bf16");
      *why = buf;
      return NIBBLE_ERR_UNSUPPORTED;
    }
  }
  return NIBBLE_OK;
}

bool planes8_dense_pairs(const PlannedLayer& layer, const nibble_linear_spec& real) {
  const LayoutPlan& lp = layer.lp;
  const int64_t x_k = real.k;
  const std::vector<int32_t>& xm = layer.x_map;
  if (real.bits != 8 || !layer.planes || layer.planes->real_k != x_k || layer.planes->spec.bits != 4 || !lp.perm.empty() ||
      lp.g_eff <= 0 || lp.k_pad % (2 * int64_t(lp.g_eff)) != 0 || int64_t(xm.size()) != lp.k_pad || x_k <= 0)
    return false;
  std::vector<uint8_t> seen(size_t(x_k), 0);
  int64_t covered = 0;
  for (int64_t base = 0; base < lp.k_pad; base += 2 * int64_t(lp.g_eff))
    for (int64_t r = base; r < base + lp.g_eff; ++r) {
      const int32_t c = xm[size_t(r)];
      if (c != xm[size_t(r + lp.g_eff)] || c >= x_k || c < -1) return false;
      if (c < 0) continue;
      if (seen[size_t(c)]++) return false;
      ++covered;
    }
  return covered == x_k;
}

std::vector<int32_t> low_plane_rows(const std::vector<int32_t>& x_map, const LayoutPlan& lp) {
  const int64_t upg = lp.g_eff / kUnitK, units = lp.ku / 2;
  std::vector<int32_t> out(size_t(units * kUnitK));
  for (int64_t r = 0; r < units; ++r) {
    const int64_t unit = r + upg * (r / upg);
    for (int64_t i = 0; i < kUnitK; ++i) out[size_t(r * kUnitK + i)] = x_map.at(size_t(unit * kUnitK + i));
  }
  return out;
}

}  // namespace nibble::cuda
