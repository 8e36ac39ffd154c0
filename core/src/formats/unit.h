// The parts of a checkpoint format, as the rest of the core sees them. A format (gptq.cpp, awq.cpp,
// compressed_tensors.cpp, autoround.cpp) is one unit that owns all of its knowledge: how its
// quantization_config reads, which tensors a layer of its packing has and in which orientation,
// the layer's spec from the tensor headers, the conversion into the canonical form and back, and
// the config it writes. list.cpp holds the one list of units that everything else iterates.
#pragma once

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nibble/error.h"
#include "nibble/formats.h"
#include "nibble/quant_config.h"
#include "nibble/quantize.h"

namespace nibble::detail {

/// Checked access to the tensors of one layer: headers first (dtype and shape, without reading
/// data), data where a reader needs it. Every failure names the layer and the tensor.
struct LayerTensors {
  const std::string& layer;
  const TensorSource& source;

  std::string name(const std::string& suffix) const { return layer + "." + suffix; }
  [[noreturn]] void fail(const std::string& suffix, const std::string& what, Errc code = Errc::format) const;

  /// The header of a tensor, or null if the layer has none of that name.
  const TensorInfo* header(const std::string& suffix) const { return source.info(suffix); }
  /// The header of a tensor that must exist, with one of `dtypes` and (if not empty) `shape`;
  /// `shape_note` explains where the expected shape comes from ("K/G = 32 groups").
  const TensorInfo& need(const std::string& suffix, std::initializer_list<DType> dtypes, const Shape& shape = {},
                         const std::string& shape_note = "") const;
  /// As need() when present; null when absent.
  const TensorInfo* maybe(const std::string& suffix, std::initializer_list<DType> dtypes, const Shape& shape = {},
                          const std::string& shape_note = "") const;
  /// The data of a tensor whose header was checked.
  Tensor data(const std::string& suffix) const;

  void check(const std::string& suffix, const TensorInfo& t, std::initializer_list<DType> dtypes, const Shape& shape,
             const std::string& shape_note) const;
  /// Refuses a header of any rank but `rank`, showing the expected layout.
  void need_rank(const std::string& suffix, const TensorInfo& t, std::size_t rank, const char* layout) const;
};

inline int64_t groups_for(int64_t k, int group_size) { return group_size <= 0 ? 1 : (k + group_size - 1) / group_size; }

/// The spec every packing's describe starts from: name, shape, bits, group size, weight type, format.
LinearSpec base_spec(const LayerTensors& t, const LayerScheme& scheme, int64_t k, int64_t n);

/// Act order from a g_idx tensor [K] (checked: values in [0, groups)): true unless it is the
/// trivial k / G that GPTQ writes even without desc_act. A config that promises act order without
/// a g_idx is refused.
bool act_order_from(const LayerTensors& t, const LayerScheme& scheme, const LinearSpec& s, const char* g_idx_suffix);

/// The canonical g_idx of a described layer (empty unless act order).
Tensor canonical_g_idx(const LayerTensors& t, const LinearSpec& s, const char* g_idx_suffix);

/// Canonical codes from a [rows, N] word tensor packed along K as a bit stream (GPTQ's qweight;
/// compressed-tensors' weight_packed after a transpose): zero copy where the words already are
/// the canonical form, stream bits past K cleared otherwise.
Tensor canonical_codes(Tensor words_kn, int64_t k, int bits);

/// Code `i` of a row of words packed as a little-endian bit stream (qzeros along N).
inline uint32_t stream_code(const uint32_t* words, int64_t i, int bits) {
  const int64_t bit = int64_t(bits) * i, r = bit >> 5;
  const int shift = int(bit & 31);
  uint64_t v = words[r] >> shift;
  if (shift + bits > 32) v |= uint64_t(words[r + 1]) << (32 - shift);
  return uint32_t(v & ((1u << bits) - 1));
}
/// Sets code `i` (< 2^bits) of such a row.
inline void put_stream_code(uint32_t* words, int64_t i, int bits, uint32_t code) {
  const int64_t bit = int64_t(bits) * i, r = bit >> 5;
  const int shift = int(bit & 31);
  const uint64_t v = uint64_t(code) << shift;
  words[r] |= uint32_t(v);
  if (shift + bits > 32) words[r + 1] |= uint32_t(v >> 32);
}
/// Words of a row of `count` codes of `bits` bits.
inline int64_t stream_words(int64_t count, int bits) { return (count * bits + 31) / 32; }

/// Refuses a bit width this packing does not store, naming it and the widths it does.
void need_bits(const LayerTensors& t, const LayerScheme& s, std::initializer_list<int> widths, const char* packing);

/// One checkpoint finding of `lint`, without the layer name (the caller adds it).
struct Finding {
  std::string tensor;  ///< full tensor name, or "" for the layer as a whole
  std::string what;
};

/// A tensor layout of one quantized layer on disk.
struct PackingUnit {
  Packing packing;
  const char* primary;                ///< the tensor that marks a layer of this packing ("qweight")
  const char* scales;                 ///< the tensor of its scales ("scales")
  std::vector<std::string> suffixes;  ///< every tensor a layer of it may have (primary included; bias not)
  std::vector<int> widths;            ///< the bit widths it stores
  int min_zero;                       ///< the smallest zero point it can store (GPTQ v1: 1, as it stores z - 1)
  bool act_order;                     ///< it stores a g_idx (act order)
  /// The layer's spec from the tensor headers (and the small index tensors: g_idx, weight_shape),
  /// every header checked against the scheme. act_dtype is left to the caller.
  LinearSpec (*describe)(const LayerTensors&, const LayerScheme&);
  /// The canonical codes, zero points, scales and g_idx of a layer that `describe` gave `spec`.
  void (*read)(const LayerTensors&, const LayerScheme&, CanonicalLinear& w);
  /// The tensors of a canonical layer in this packing (the inverse of read; bias not included).
  std::vector<std::pair<std::string, Tensor>> (*write)(const CanonicalLinear&, Packing);
  /// Findings that only this packing can see (zero-point conventions, word corruption, orientation).
  std::vector<Finding> (*lint)(const LayerTensors&, const LayerScheme&, const LinearSpec&);
};

/// What a quantization_config yields: rules that QuantConfig::scheme_for applies per layer.
using ConfigRules = QuantConfig::Rules;

/// A variant `nibble quantize --format` writes: its name, packing and config.
struct WriterVariant {
  const char* name;
  Packing packing;
  nlohmann::ordered_json (*config)(const QuantizeOptions&, const WriterVariant&);
};

/// A checkpoint format: its config, its packings and what it writes.
struct FormatUnit {
  const char* name;                  ///< "gptq", "awq", "compressed-tensors", "auto-round"
  std::vector<std::string> methods;  ///< quant_method values it reads
  /// Fills `rules` from quantization_config `q` (errors name `origin` and the key).
  void (*parse_config)(const nlohmann::ordered_json& q, const std::string& origin, ConfigRules& rules);
  std::vector<const PackingUnit*> packings;  ///< the packings it defines (AutoRound: none of its own)
  std::vector<WriterVariant> writers;
};

/// The one list of formats (list.cpp).
const std::vector<const FormatUnit*>& format_units();
/// The unit of a packing; every Packing has one.
const PackingUnit& packing_unit(Packing p);
/// The format reading `quant_method`, or null.
const FormatUnit* format_for_method(const std::string& method);

// The units (one per file).
const FormatUnit& gptq_format();
const FormatUnit& awq_format();
const FormatUnit& compressed_tensors_format();
const FormatUnit& autoround_format();

// --- config reading helpers shared by the units (config_json.cpp) ---
[[noreturn]] void config_error(const std::string& origin, const std::string& what);
/// An integer key (or the first present of several aliases) in [lo, hi]; `fallback` if absent.
int get_int(const nlohmann::ordered_json& q, std::initializer_list<const char*> keys, int fallback, const std::string& origin,
            const std::string& where = "quantization_config", int lo = -1, int hi = 1 << 20);
bool get_bool(const nlohmann::ordered_json& q, std::initializer_list<const char*> keys, bool fallback, const std::string& origin,
              const std::string& where = "quantization_config");
std::string get_str(const nlohmann::ordered_json& q, std::initializer_list<const char*> keys, const std::string& fallback,
                    const std::string& origin, const std::string& where = "quantization_config");
std::vector<std::string> get_list(const nlohmann::ordered_json& q, const char* key, const std::string& origin,
                                  const std::string& where = "quantization_config");
/// A group size: -1 = per channel, else positive; 0 and other negatives are refused, naming the key.
int get_group_size(const nlohmann::ordered_json& q, std::initializer_list<const char*> keys, int fallback,
                   const std::string& origin, const std::string& where = "quantization_config");
/// Refuses a regular expression that does not compile, naming the key it came from.
void check_pattern(const std::string& regex, const std::string& origin, const std::string& key);
/// "b-bit weights (key): nibble reads ... at 2, 3, 4 and 8 bits" as an unsupported reason, or "".
std::string bits_reason(int bits, std::initializer_list<int> widths, const std::string& key, const char* format);

}  // namespace nibble::detail
