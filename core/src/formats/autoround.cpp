// AutoRound (Intel auto-round): its own quantization_config over GPTQ's or AWQ's packing.
//   packing_format auto_round:auto_gptq (default; GPTQ, v1 zeros), auto_round:gptqmodel and
//   auto_round (GPTQ, v2 zeros), auto_round:auto_awq (AWQ, 4 bits)
//   bits, group_size, sym, desc_act, data_type "int", block_name_to_quantize, and extra_config
//   {layer name or regex: {bits, group_size, sym, data_type}}, where bits >= 16 leaves a layer
//   unquantized. The tensors are read and written by gptq.cpp and awq.cpp.
#include "../input.h"
#include "unit.h"

namespace nibble::detail {

namespace {

using json = nlohmann::ordered_json;

// The widths a packing stores, for the reasons of a layer at another width.
std::initializer_list<int> widths_of(Packing p) {
  static constexpr std::initializer_list<int> gptq = {2, 3, 4, 8}, awq = {4};
  return p == Packing::awq_gemm ? awq : gptq;
}

void parse_config(const json& q, const std::string& origin, ConfigRules& r) {
  const std::string qc = "quantization_config";
  LayerScheme s;
  s.kind = LayerScheme::Kind::quantized;
  s.format = Format::autoround;
  s.bits = get_int(q, {"bits"}, 4, origin, qc, 1, 64);
  s.group_size = get_group_size(q, {"group_size"}, 128, origin);
  s.symmetric = get_bool(q, {"sym"}, true, origin);
  s.act_order = get_bool(q, {"desc_act"}, false, origin);
  s.origin = qc + ".bits";
  const std::string data_type = get_str(q, {"data_type"}, "int", origin);
  if (data_type != "int")
    r.unsupported = fmt::format("data_type '{}' (quantization_config.data_type): nibble runs integer weights", printable(data_type));
  const std::string pf = get_str(q, {"packing_format"}, "auto_round:auto_gptq", origin);
  if (pf == "auto_round:auto_gptq" || pf == "auto_gptq") s.packing = Packing::gptq_v1;
  else if (pf == "auto_round:gptqmodel" || pf == "auto_round") s.packing = Packing::gptq_v2;
  else if (pf == "auto_round:auto_awq" || pf == "auto_awq") s.packing = Packing::awq_gemm;
  else r.unsupported = fmt::format("packing_format '{}' (quantization_config.packing_format)", printable(pf));
  const char* packing_label = s.packing == Packing::awq_gemm ? "AutoRound's auto_awq packing" : "AutoRound's GPTQ packings";
  if (const std::string why = bits_reason(s.bits, widths_of(s.packing), qc + ".bits", packing_label); !why.empty())
    s.kind = LayerScheme::Kind::unsupported, s.reason = why;
  r.block_prefixes = get_list(q, "block_name_to_quantize", origin);
  r.blocks_origin = "quantization_config.block_name_to_quantize";
  if (auto ec = q.find("extra_config"); ec != q.end() && !ec->is_null()) {
    if (!ec->is_object()) config_error(origin, fmt::format("quantization_config.extra_config: expected an object, found {}", printable_json(*ec)));
    // As vLLM reads it: a key equal to the layer's name decides; else, in the file's order, the
    // first key with a regex character (one of * + ? ^ $ ( ) [ ] { } | or a backslash; a plain
    // name is never a regex) that matches somewhere in the name (re.search). An exact key, or a
    // matching one that sets bits, also quantizes lm_head and layers outside block_name_to_quantize.
    r.exact_first = true;
    r.overrides_past_scope = true;
    for (const auto& [key, val] : ec->items()) {
      QuantConfig::Override o;
      o.pattern = key;
      o.match = key.find_first_of("*+?^$()[]{}|\\") == std::string::npos ? QuantConfig::Match::exact
                                                                        : QuantConfig::Match::search;
      o.origin = fmt::format("quantization_config.extra_config[\"{}\"]", printable(key));
      if (o.match == QuantConfig::Match::search) check_pattern(key, origin, o.origin);
      if (!val.is_object()) config_error(origin, fmt::format("{}: expected an object, found {}", o.origin, printable_json(val)));
      o.scheme = s;
      o.scheme.kind = LayerScheme::Kind::quantized;
      o.scheme.reason.clear();
      o.scheme.bits = get_int(val, {"bits"}, s.bits, origin, o.origin, 1, 64);
      o.sets_bits = val.contains("bits");
      o.scheme.group_size = get_group_size(val, {"group_size"}, s.group_size, origin, o.origin);
      o.scheme.symmetric = get_bool(val, {"sym"}, s.symmetric, origin, o.origin);
      o.scheme.origin = o.origin + ".bits";
      const std::string odt = get_str(val, {"data_type"}, data_type, origin, o.origin);
      o.skip = o.scheme.bits >= 16;
      if (!o.skip && odt != "int") {
        o.scheme.kind = LayerScheme::Kind::unsupported;
        o.scheme.reason = fmt::format("data_type '{}' ({}.data_type)", printable(odt), o.origin);
      } else if (const std::string why = bits_reason(o.scheme.bits, widths_of(s.packing), o.origin + ".bits", packing_label);
                 !o.skip && !why.empty()) {
        o.scheme.kind = LayerScheme::Kind::unsupported;
        o.scheme.reason = why;
      }
      r.overrides.push_back(o);
    }
  }
  r.format = Format::autoround;
  r.base = s;
  r.has_base = true;
  r.summary = fmt::format("auto-round, {}, {}-bit, G{}, {}{}", packing_name(s.packing), s.bits, s.group_size,
                          s.symmetric ? "symmetric" : "asymmetric", s.act_order ? ", act order" : "");
  if (!r.overrides.empty()) r.summary += fmt::format(", {} extra_config entr{}", r.overrides.size(), r.overrides.size() == 1 ? "y" : "ies");
}

nlohmann::ordered_json write_config(const QuantizeOptions& o, const WriterVariant& v) {
  const std::string n = v.name;
  const std::string packing = n == "autoround" ? "auto_round:auto_gptq"
                              : n == "autoround-gptqmodel" ? "auto_round:gptqmodel" : "auto_round:auto_awq";
  return {{"quant_method", "auto-round"}, {"packing_format", packing}, {"bits", o.bits}, {"group_size", o.group_size},
          {"sym", o.symmetric}, {"data_type", "int"}, {"desc_act", o.act_order},
          {"block_name_to_quantize", "model.layers"}};
}

}  // namespace

const FormatUnit& autoround_format() {
  static const FormatUnit unit{"auto-round",
                               {"auto-round", "auto_round", "intel/auto-round"},
                               parse_config,
                               {},
                               {{"autoround", Packing::gptq_v1, write_config},
                                {"autoround-gptqmodel", Packing::gptq_v2, write_config},
                                {"autoround-awq", Packing::awq_gemm, write_config}}};
  return unit;
}

}  // namespace nibble::detail
