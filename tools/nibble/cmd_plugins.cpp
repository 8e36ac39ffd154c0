// nibble plugins: every plugin found, and every file skipped with why.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace nibble::cli {

int cmd_plugins(const CommonOptions& o) {
  auto reg = open_registry();
  if (o.json) {
    nlohmann::json j;
    j["search_path"] = nlohmann::json::array();
    for (const auto& d : reg->search_path()) j["search_path"].push_back(d.string());
    j["plugins"] = nlohmann::json::array();
    for (const auto& b : reg->backends()) {
      const auto& c = b->capabilities();
      nlohmann::json caps;
      caps["weight_types"] = nlohmann::json::array();
      for (int32_t t = 1; t < 32; ++t)
        if ((c.weight_types & NIBBLE_WT_BIT(t)) && nibble_weight_type_bits(t))
          caps["weight_types"].push_back(weight_type_name(WeightType(t)));
      caps["act_dtypes"] = nlohmann::json::array();
      for (auto d : {DType::f16, DType::bf16, DType::f32})
        if (c.act_dtypes & NIBBLE_DTYPE_BIT(int(d))) caps["act_dtypes"].push_back(std::string(dtype_name(d)));
      caps["group_sizes"] = nlohmann::json::array();
      for (uint32_t i = 0; i < c.num_group_sizes; ++i) caps["group_sizes"].push_back(c.group_sizes[i]);
      caps["bits"] = nlohmann::json::array();
      for (int bits = 1; bits < 32; ++bits)
        if (c.bits & (1u << bits)) caps["bits"].push_back(bits);
      caps["act_order"] = bool(c.act_order);
      caps["bias"] = bool(c.bias);
      caps["k_multiple"] = c.k_multiple;
      caps["n_multiple"] = c.n_multiple;
      caps["min_device_level"] = c.min_device_level;
      caps["any_format"] = c.formats == NIBBLE_FORMATS_ALL;
      const auto& pr = b->probe();
      j["plugins"].push_back({{"name", b->name()},
                              {"version", b->version()},
                              {"abi_version", b->abi_version()},
                              {"platform", b->platform()},
                              {"description", b->description()},
                              {"priority", b->priority()},
                              {"path", b->path().string()},
                              {"capabilities", caps},
                              {"dense_baseline", b->has_dense()},
                              {"probe", {{"available", pr.available}, {"message", pr.message}}}});
    }
    j["skipped"] = nlohmann::json::array();
    for (const auto& s : reg->skipped())
      j["skipped"].push_back({{"path", s.path.string()}, {"kind", skipped_kind_name(s.kind)}, {"reason", s.reason}});
    j["warnings"] = reg->warnings();
    fmt::print("{}\n", j.dump(2));
    return 0;
  }
  fmt::print("nibble {} (plugin ABI {})\nsearch path:\n", version(), NIBBLE_ABI_VERSION);
  for (const auto& d : reg->search_path()) fmt::print("  {}\n", d.string());
  fmt::print("\nplugins:\n");
  if (reg->backends().empty()) fmt::print("  (none found)\n");
  for (const auto& b : reg->backends()) {
    const auto& pr = b->probe();
    fmt::print("  {} {} [{}] ABI {} priority {}\n    {}\n    supports: {}\n    probe: {} ({})\n    file: {}\n",
               b->name(), b->version(), b->platform(), b->abi_version(), b->priority(), b->description(),
               b->capabilities_summary(), pr.available ? "available" : "unavailable", pr.message,
               b->path().string());
  }
  if (!reg->skipped().empty()) {
    fmt::print("\nskipped:\n");
    for (const auto& s : reg->skipped())
      fmt::print("  {}\n    {}: {}\n", s.path.string(), skipped_kind_name(s.kind), s.reason);
  }
  for (const auto& w : reg->warnings()) fmt::print("warning: {}\n", w);
  return 0;
}

}  // namespace nibble::cli
