// The one list of checkpoint formats. Adding a format is its own file and one line here (plus a
// Packing enumerator if it brings a tensor layout of its own).
#include "unit.h"

namespace nibble::detail {

const std::vector<const FormatUnit*>& format_units() {
  static const std::vector<const FormatUnit*> units = {
      &gptq_format(),
      &awq_format(),
      &compressed_tensors_format(),
      &autoround_format(),
  };
  return units;
}

const PackingUnit& packing_unit(Packing p) {
  for (const FormatUnit* f : format_units())
    for (const PackingUnit* u : f->packings)
      if (u->packing == p) return *u;
  throw Error(Errc::unsupported, fmt::format("no format unit reads packing {}", int(p)));
}

const FormatUnit* format_for_method(const std::string& method) {
  for (const FormatUnit* f : format_units())
    for (const auto& m : f->methods)
      if (m == method) return f;
  return nullptr;
}

}  // namespace nibble::detail
