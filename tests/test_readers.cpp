// The checkpoint readers at every bit width: every fixture through one spec (what explain decides
// is what load produces), round trips at 2/3/4/8 bits in every format that has the width, widths
// that are refused and why, lint findings, and the cost of a checkpoint of 200k layers (counted,
// not timed).
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "nibble/checkpoint.h"
#include "nibble/formats.h"
#include "nibble/quantize.h"
#include "nibble/reference.h"
#include "test_util.h"

using namespace nibble;
namespace fs = std::filesystem;
using test::contains;
using test::error_of;

std::string nibble::test::skip_reason() { return {}; }

namespace {

fs::path fixtures() { return fs::path(test::env_or("NIBBLE_TEST_DATA")) / "fixtures"; }

using test::TempDir;

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A fixture's tensors with some replaced (an empty Tensor removes one), written as a model dir.
fs::path rewrite(const TempDir& t, const std::string& fx, const std::map<std::string, Tensor>& replace,
                 const std::string& config = "") {
  auto src = SafetensorsFile::open(fixtures() / fx / "model.safetensors");
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& ti : src->tensors()) {
    auto it = replace.find(ti.name);
    if (it == replace.end()) out.emplace_back(ti.name, src->get(ti.name));
    else if (!it->second.empty()) out.emplace_back(ti.name, it->second);
  }
  for (const auto& [name, tensor] : replace)
    if (!src->find(name) && !tensor.empty()) out.emplace_back(name, tensor);
  write_safetensors(t.path / "model.safetensors", out);
  if (config.empty()) fs::copy_file(fixtures() / fx / "config.json", t.path / "config.json");
  else write_text(t.path / "config.json", config);
  return t.path;
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const auto pos = s.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, from);
  return s.replace(pos, from.size(), to);
}

bool same_spec(const LinearSpec& a, const LinearSpec& b) {
  return a.name == b.name && a.k == b.k && a.n == b.n && a.bits == b.bits && a.group_size == b.group_size &&
         a.weight_type == b.weight_type && a.act_dtype == b.act_dtype && a.scale_dtype == b.scale_dtype &&
         a.act_order == b.act_order && a.has_bias == b.has_bias && a.format == b.format;
}

const std::string kLayer = "model.layers.0.self_attn.q_proj";

}  // namespace

TEST_CASE("every fixture: the spec explain selects on is the spec load produces, and it matches the tool") {
  int fixtures_seen = 0;
  for (const auto& dir : fs::directory_iterator(fixtures())) {
    if (!dir.is_directory()) continue;
    ++fixtures_seen;
    CAPTURE(dir.path().filename().string());
    auto ckpt = Checkpoint::open(dir.path());
    auto ref = SafetensorsFile::open(dir.path() / "reference.safetensors");
    CHECK(ckpt->warnings().empty());
    int quantized = 0;
    for (const auto& e : ckpt->layers()) {
      if (e.scheme.kind == LayerScheme::Kind::unquantized) continue;
      REQUIRE_MESSAGE(e.scheme.kind == LayerScheme::Kind::quantized, e.scheme.reason);
      ++quantized;
      for (DType act : {DType::f16, DType::bf16, DType::f32}) {
        const LinearSpec selected = ckpt->spec_of(e, act);
        const CanonicalLinear w = ckpt->load(e.name, act);
        CHECK_MESSAGE(same_spec(selected, w.spec), selected.summary() << " vs " << w.spec.summary());
      }
      const CanonicalLinear w = ckpt->load(e.name);
      CHECK(w.spec.bits == e.scheme.bits);
      CHECK(weight_type_bits(w.spec.weight_type) == w.spec.bits);
      const int64_t K = w.spec.k, N = w.spec.n;
      Tensor codes = ref->get(e.name + ".codes"), weight = ref->get(e.name + ".weight");
      REQUIRE(codes.shape() == Shape{N, K});
      int64_t bad = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          bad += w.code(k, n) != codes.data_as<uint8_t>()[n * K + k];
          const double want = weight.at(std::size_t(n * K + k));
          bad += std::fabs(w.weight(k, n) - want) > 0x1p-10 * std::fabs(want) + 1e-9;
        }
      CHECK(bad == 0);
      Tensor x = ref->get(e.name + ".x"), y = ref->get(e.name + ".y");
      CHECK(compare_to_reference(reference_linear(w, x), y, reference_magnitude(w, x), DType::f32).ok);
      CHECK(ckpt->lint(e).empty());
    }
    CHECK(quantized == 2);
  }
  CHECK(fixtures_seen >= 19);
}

TEST_CASE("a mixed 4/8-bit AutoRound model: each layer has its own width") {
  auto ckpt = Checkpoint::open(fixtures() / "autoround_mixed_4_8bit");
  CHECK(ckpt->find_layer("model.layers.0.mlp.down_proj")->spec.bits == 8);
  CHECK(ckpt->find_layer("model.layers.0.mlp.down_proj")->spec.weight_type == WeightType::uint8b128);
  CHECK(ckpt->find_layer(kLayer)->spec.bits == 4);
  // A 16-bit extra_config entry leaves the layer unquantized; the packed tensors then contradict it.
  TempDir t;
  const std::string cfg = replaced(read_file(fixtures() / "autoround_mixed_4_8bit" / "config.json"), "\"bits\": 8", "\"bits\": 16");
  auto c = Checkpoint::open(rewrite(t, "autoround_mixed_4_8bit", {}, cfg));
  const LayerEntry* down = c->find_layer("model.layers.0.mlp.down_proj");
  CHECK(down->scheme.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(down->scheme.reason, "extra_config[\"model.layers.0.mlp.down_proj\"] leaves it unquantized"));
}

TEST_CASE("GPTQModel dynamic overrides set a layer's width") {
  const auto scheme = [](const std::string& dyn, const std::string& layer) {
    return QuantConfig::parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": )" +
                                  dyn + "}}",
                              "c.json")
        .scheme_for(layer);
  };
  LayerScheme s = scheme(R"({"+:.*down_proj": {"bits": 8, "group_size": 64}})", "model.layers.3.mlp.down_proj");
  CHECK(s.kind == LayerScheme::Kind::quantized);
  CHECK(s.bits == 8);
  CHECK(s.group_size == 64);
  CHECK(scheme(R"({"+:.*down_proj": {"bits": 8}})", "model.layers.3.mlp.up_proj").bits == 4);
  s = scheme(R"({".*down_proj": {"bits": 5}})", "model.layers.3.mlp.down_proj");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "5-bit weights (quantization_config.dynamic[\".*down_proj\"].bits)"));
}

TEST_CASE("per-layer rules match as the formats' loaders match them: file order, first match, anchors") {
  const auto gptq = [](const std::string& dyn, const std::string& layer) {
    return QuantConfig::parse(R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": )" +
                                  dyn + "}}",
                              "c.json")
        .scheme_for(layer);
  };
  const std::string down = "model.layers.3.mlp.down_proj", up = "model.layers.3.mlp.up_proj";
  // GPTQModel dynamic (GPTQModel's and vLLM's dynamic_get): the first rule in the file's order that
  // matches decides. Sorted keys would put ".*down_proj" first.
  CHECK(gptq(R"({"+:.*mlp.*": {"bits": 8}, "+:.*down_proj": {"bits": 2}})", down).bits == 8);
  CHECK(gptq(R"({"+:.*down_proj": {"bits": 2}, "+:.*mlp.*": {"bits": 8}})", down).bits == 2);
  // A skip after a matching rule does not apply; before it, it does.
  CHECK(gptq(R"({"+:.*down_proj": {"bits": 8}, "-:.*layers\\.3\\..*": {}})", down).kind == LayerScheme::Kind::quantized);
  CHECK(gptq(R"({"+:.*down_proj": {"bits": 8}, "-:.*layers\\.3\\..*": {}})", up).kind == LayerScheme::Kind::unquantized);
  CHECK(gptq(R"({"-:.*layers\\.3\\..*": {}, "+:.*down_proj": {"bits": 8}})", down).kind == LayerScheme::Kind::unquantized);
  // re.match: anchored at the start of the name, not searched in it.
  CHECK(gptq(R"({"+:mlp": {"bits": 8}})", down).bits == 4);
  CHECK(gptq(R"({"+:model\\.layers\\.3\\.": {"bits": 8}})", down).bits == 8);
  // The matching rule's missing keys are the base's, never a later rule's.
  const LayerScheme g = gptq(R"({"+:.*down_proj": {"group_size": 64}, "+:.*mlp.*": {"bits": 8}})", down);
  CHECK(g.bits == 4);
  CHECK(g.group_size == 64);

  const auto ar = [](const std::string& extra, const std::string& layer) {
    return QuantConfig::parse(R"({"quantization_config": {"quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
                                   "bits": 4, "group_size": 128, "sym": true, "extra_config": )" +
                                  extra + "}}",
                              "c.json")
        .scheme_for(layer);
  };
  // AutoRound extra_config (vLLM's reading): a key equal to the name beats an earlier regex; else
  // the first regex key in the file's order that matches somewhere in the name.
  const std::string both = R"({".*down_proj": {"bits": 8}, "model.layers.3.mlp.down_proj": {"bits": 2}})";
  CHECK(ar(both, down).bits == 2);
  CHECK(ar(both, "model.layers.4.mlp.down_proj").bits == 8);
  CHECK(ar(R"({".*mlp.*": {"bits": 8}, ".*down_proj": {"bits": 2}})", down).bits == 8);
  CHECK(ar(R"({"mlp\\.down": {"bits": 8}})", down).bits == 8);  // a regex, searched
  // A plain name is a name, not a pattern: it neither searches nor matches by '.'.
  CHECK(ar(R"({"layers.3.mlp.down_proj": {"bits": 8}})", down).bits == 4);
  CHECK(ar(R"({"model.layers.3.mlp.down_proj": {"bits": 8}})", "model.layers.3.mlp.down_projection").bits == 4);
  // An exact key, or a regex key that sets bits, quantizes lm_head and layers outside
  // block_name_to_quantize too; a regex key without bits leaves them out (vLLM's get_layer_config).
  const auto scoped = [](const std::string& extra, const std::string& layer) {
    return QuantConfig::parse(R"({"quantization_config": {"quant_method": "auto-round", "packing_format": "auto_round:auto_gptq",
                                   "bits": 4, "group_size": 128, "sym": true, "block_name_to_quantize": "model.layers",
                                   "extra_config": )" + extra + "}}",
                              "c.json")
        .scheme_for(layer);
  };
  CHECK(scoped(R"({"lm_head": {"bits": 8}})", "lm_head").kind == LayerScheme::Kind::quantized);
  CHECK(scoped(R"({"lm_head": {"bits": 8}})", "lm_head").bits == 8);
  CHECK(scoped(R"({".*head": {"bits": 8}})", "lm_head").bits == 8);
  CHECK(scoped(R"({".*head": {"group_size": 32}})", "lm_head").kind == LayerScheme::Kind::unquantized);
  CHECK(scoped(R"({".*proj": {"bits": 8}})", "model.vision.proj").bits == 8);
  CHECK(scoped(R"({".*proj": {"sym": false}})", "model.vision.proj").kind == LayerScheme::Kind::unquantized);
  CHECK(scoped(R"({".*proj": {"sym": false}})", down).symmetric == false);
  CHECK(scoped("{}", "lm_head").kind == LayerScheme::Kind::unquantized);

  // compressed-tensors (vLLM's find_matched_target): a target naming the layer beats a class
  // target ("Linear") whatever their order; "re:" entries match at the start of the name.
  const auto ct = [](const std::string& groups, const std::string& ignore, const std::string& layer) {
    return QuantConfig::parse(R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                   "ignore": )" + ignore + R"(, "config_groups": )" + groups + "}}",
                              "c.json")
        .scheme_for(layer);
  };
  const auto group = [](const std::string& name, int bits, const std::string& targets) {
    return fmt::format(R"("{}": {{"targets": {}, "weights": {{"num_bits": {}, "type": "int", "symmetric": true,
                          "strategy": "group", "group_size": 128}}}})",
                       name, targets, bits);
  };
  const std::string mixed = "{" + group("group_0", 4, R"(["Linear"])") + ", " + group("group_1", 8, R"(["re:.*down_proj"])") + "}";
  CHECK(ct(mixed, "[]", down).bits == 8);
  CHECK(ct(mixed, "[]", up).bits == 4);
  CHECK(ct(mixed, "[]", "lm_head").kind == LayerScheme::Kind::unquantized);
  CHECK(ct("{" + group("group_0", 8, R"(["re:model\\.layers\\.3"])") + "}", "[]", down).bits == 8);  // re.match: a prefix
  CHECK(ct("{" + group("group_0", 8, R"(["re:layers\\.3"])") + "}", "[]", down).kind == LayerScheme::Kind::unquantized);
  CHECK(ct(mixed, R"(["Linear"])", up).bits == 4);  // ignore matches names only: a class name is none
  const LayerScheme ig = ct(mixed, R"(["re:.*up_proj"])", up);
  CHECK(ig.kind == LayerScheme::Kind::unquantized);
  CHECK(contains(ig.reason, "matches 're:.*up_proj' in quantization_config.ignore"));
}

TEST_CASE("a config with 200k extra_config keys is read in file order, and 200k layers looked up in it") {
  // nlohmann's own ordered parse searches every object for a duplicate key on each insert, and a
  // lookup that walks every key per layer is as quadratic: at 200k keys and layers either would
  // run for minutes (past the test's timeout); the hash-indexed build and lookup do not.
  std::string extra;
  for (int i = 199999; i >= 0; --i)
    extra += fmt::format("{}\"model.layers.{}.mlp.experts.{}.down_proj\": {{\"bits\": {}}}", extra.empty() ? "" : ", ",
                         i / 1000, i % 1000, i % 2 ? 8 : 2);
  extra += R"(, "model.layers.7.mlp.experts.7.down_proj": {"bits": 4})";  // a duplicate: the last value
  const QuantConfig c = QuantConfig::parse(R"({"quantization_config": {"quant_method": "auto-round", "bits": 4,
    "group_size": 128, "sym": true, "packing_format": "auto_round:auto_gptq", "extra_config": {)" + extra + "}}}",
                                           "c.json");
  CHECK(c.scheme_for("model.layers.3.mlp.experts.5.down_proj").bits == 8);
  CHECK(c.scheme_for("model.layers.3.mlp.experts.6.down_proj").bits == 2);
  CHECK(c.scheme_for("model.layers.7.mlp.experts.7.down_proj").bits == 4);
  int64_t eight = 0;
  for (int i = 0; i < 200000; ++i)
    eight += c.scheme_for(fmt::format("model.layers.{}.mlp.experts.{}.down_proj", i / 1000, i % 1000)).bits == 8;
  CHECK(eight == 99999);  // the odd half, less layer 7.7 (i = 7007), which the duplicate key sets to 4 bits
}

TEST_CASE("widths a format does not have, and widths the tensors contradict, are refused by name") {
  const auto scheme = [](const std::string& q) {
    return QuantConfig::parse(R"({"quantization_config": )" + q + "}", "c.json").scheme_for("model.layers.0.q");
  };
  LayerScheme s = scheme(R"({"quant_method": "gptq", "bits": 16})");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "16-bit weights (quantization_config.bits): nibble reads GPTQ at 2, 3, 4, 8 bits"));
  s = scheme(R"({"quant_method": "awq", "bits": 8})");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "8-bit weights (quantization_config.bits): nibble reads AWQ at 4 bits"));
  s = scheme(R"({"quant_method": "auto-round", "packing_format": "auto_round:auto_awq", "bits": 3})");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  s = scheme(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["re:.*"], "weights": {"num_bits": 3}}}})");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "3-bit weights (quantization_config.config_groups.g.weights.num_bits)"));

  // A config of 8 bits over 4-bit tensors: K from qweight at 8 bits contradicts g_idx.
  TempDir t;
  const std::string cfg = replaced(read_file(fixtures() / "gptq_v1_sym_g128" / "config.json"), "\"bits\": 4", "\"bits\": 8");
  auto c = Checkpoint::open(rewrite(t, "gptq_v1_sym_g128", {}, cfg));
  const LayerEntry* e = c->find_layer(kLayer);
  CHECK(e->scheme.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(e->scheme.reason, "layer 'model.layers.0.self_attn.q_proj': tensor 'model.layers.0.self_attn.q_proj.g_idx': "
                                   "expected [K] with ceil(K*8/32) = 64 (the rows of qweight at 8 bits), found [512]"));
  // Without a g_idx, a 3-bit layer's rows must come in threes.
  TempDir t3;
  Tensor q = SafetensorsFile::open(fixtures() / "gptq_v1_sym_3bit_g128" / "model.safetensors")->get(kLayer + ".qweight");
  auto c3 = Checkpoint::open(rewrite(t3, "gptq_v1_sym_3bit_g128", {{kLayer + ".qweight", q.reshaped({q.dim(0), q.dim(1)}).clone()},
                                                                   {kLayer + ".g_idx", Tensor()}}));
  CHECK(c3->find_layer(kLayer)->scheme.kind == LayerScheme::Kind::quantized);  // 36 rows: 384 rows of 3 bits
  Tensor short_q = Tensor::zeros(DType::i32, {q.dim(0) - 1, q.dim(1)});
  TempDir t4;
  auto c4 = Checkpoint::open(rewrite(t4, "gptq_v1_sym_3bit_g128", {{kLayer + ".qweight", short_q}, {kLayer + ".g_idx", Tensor()}}));
  CHECK(contains(c4->find_layer(kLayer)->scheme.reason, "expected a multiple of 3 rows for 3-bit codes"));
}

TEST_CASE("round trip at every width: quantize -> pack in each format -> read back") {
  Tensor weight = Tensor::zeros(DType::f16, {64, 320});
  for (int64_t i = 0; i < weight.numel(); ++i)
    store_float(weight.mutable_data(), DType::f16, std::size_t(i), std::sin(double(i) * 0.37) * 0.05 + (i % 7) * 0.001);
  int rounds = 0;
  for (const auto& fname : output_format_names()) {
    const OutputFormat f = output_format(fname);
    for (int bits : {2, 3, 4, 8})
      for (int g : {32, 64, -1})
        for (bool sym : {true, false})
          for (bool ao : {false, true}) {
            if (ao && g == -1) continue;
            CAPTURE(fname);
            CAPTURE(bits);
            CAPTURE(g);
            CAPTURE(sym);
            CAPTURE(ao);
            CanonicalLinear w = quantize_rtn("model.layers.0.mlp.down_proj", weight, g, sym, ao, DType::f16,
                                             f.packing == Packing::gptq_v1 ? 1 : 0, bits);
            LayerScheme s;
            s.kind = LayerScheme::Kind::quantized;
            s.packing = f.packing;
            s.bits = bits;
            s.group_size = g;
            s.symmetric = sym;
            s.act_order = ao;
            std::map<std::string, Tensor> packed;
            const std::string why = error_of([&] {
              for (auto& [suffix, t] : pack_layer(w, f.packing)) packed[suffix] = t;
            });
            const bool writable = (f.packing != Packing::awq_gemm || (bits == 4 && !ao)) &&
                                  (f.packing != Packing::compressed_tensors || bits == 4 || bits == 8);
            if (!writable) {
              CHECK(contains(why, "cannot write it as"));
              continue;
            }
            REQUIRE(why == "(no error)");
            CanonicalLinear back = canonicalize(w.spec.name, s, TensorSource::from_map(packed), DType::f16);
            CHECK(back.spec.bits == bits);
            int64_t bad = 0;
            for (int64_t k = 0; k < w.spec.k; ++k)
              for (int64_t n = 0; n < w.spec.n; ++n) bad += back.code(k, n) != w.code(k, n) || back.weight(k, n) != w.weight(k, n);
            CHECK(bad == 0);
            ++rounds;
          }
  }
  CHECK(rounds > 100);
}

TEST_CASE("lint: what the tensors say about themselves") {
  const auto findings = [](const fs::path& dir) {
    auto c = Checkpoint::open(dir);
    std::string all;
    for (const auto& e : c->layers())
      for (const auto& f : c->lint(e)) all += f.tensor + ": " + f.what + "\n";
    return all;
  };
  auto src = SafetensorsFile::open(fixtures() / "gptq_v1_sym_g128" / "model.safetensors");
  {  // v2 symmetric zeros (0x88888888) in a checkpoint labelled v1
    TempDir t;
    Tensor qz = src->get(kLayer + ".qzeros").clone();
    for (int64_t i = 0; i < qz.numel(); ++i) qz.mutable_data_as<uint32_t>()[i] = 0x88888888u;
    CHECK(contains(findings(rewrite(t, "gptq_v1_sym_g128", {{kLayer + ".qzeros", qz}})), "a v2 checkpoint labelled v1"));
  }
  // Each finding names its tensor in full, also where it is a refusal (the checkpoint's own name:
  // weight_scale for compressed-tensors).
  const auto tensor_of = [](const fs::path& dir, const std::string& needle) {
    auto c = Checkpoint::open(dir);
    for (const auto& f : c->lint(*c->find_layer(kLayer)))
      if (contains(f.what, needle)) return f.tensor;
    return std::string("(no finding mentions '") + needle + "')";
  };
  {  // transposed zero points: the layer cannot load, and lint says why, of qzeros
    TempDir t;
    auto asym = SafetensorsFile::open(fixtures() / "gptq_v1_asym_g64" / "model.safetensors");
    const Tensor qz = asym->get(kLayer + ".qzeros");
    Tensor tr = Tensor::zeros(DType::i32, {qz.dim(1), qz.dim(0)});
    for (int64_t i = 0; i < qz.dim(0); ++i)
      for (int64_t j = 0; j < qz.dim(1); ++j)
        tr.mutable_data_as<uint32_t>()[j * qz.dim(0) + i] = qz.data_as<uint32_t>()[i * qz.dim(1) + j];
    CHECK(tensor_of(rewrite(t, "gptq_v1_asym_g64", {{kLayer + ".qzeros", tr}}), "transposed orientation") ==
          kLayer + ".qzeros");
  }
  {  // every scale zero; non-finite scales (a finding of their own and canonicalize's refusal)
    TempDir t, u;
    Tensor zero = src->get(kLayer + ".scales").clone(), nan = zero.clone();
    REQUIRE(zero.dtype() == DType::f16);  // the bit patterns below are f16's
    std::fill_n(zero.mutable_data_as<uint16_t>(), zero.numel(), uint16_t(0));
    CHECK(tensor_of(rewrite(t, "gptq_v1_sym_g128", {{kLayer + ".scales", zero}}), "every scale is zero") ==
          kLayer + ".scales");
    nan.mutable_data_as<uint16_t>()[nan.dim(1) + 3] = 0x7c00;  // +inf at [1, 3]
    const fs::path d = rewrite(u, "gptq_v1_sym_g128", {{kLayer + ".scales", nan}});
    CHECK(tensor_of(d, "1 non-finite scale(s) of") == kLayer + ".scales");
    CHECK(contains(findings(d), fmt::format("the first at [1, 3] of [{}, {}]", nan.dim(0), nan.dim(1))));
  }
  {  // compressed-tensors: the scales' own name
    TempDir t;
    auto ct = SafetensorsFile::open(fixtures() / "ct_pack_sym_g128" / "model.safetensors");
    Tensor sc = ct->get(kLayer + ".weight_scale").clone();
    std::fill_n(sc.mutable_data_as<uint16_t>(), sc.numel(), uint16_t(0));
    CHECK(tensor_of(rewrite(t, "ct_pack_sym_g128", {{kLayer + ".weight_scale", sc}}), "every scale is zero") ==
          kLayer + ".weight_scale");
  }
  {  // a symmetric layer whose qzeros is sized N // 32 * b words (N = 40): read, and a finding
    TempDir t;
    const int64_t rows = src->get(kLayer + ".qweight").dim(0), k = rows * 8, groups = k / 128, n = 40;
    Tensor q = Tensor::zeros(DType::i32, {rows, n}), sc = Tensor::zeros(DType::f16, {groups, n});
    Tensor qz = Tensor::zeros(DType::i32, {groups, n / 32 * 4});
    for (int64_t i = 0; i < q.numel(); ++i) q.mutable_data_as<uint32_t>()[i] = 0x76543210u + uint32_t(i);
    std::fill_n(sc.mutable_data_as<uint16_t>(), sc.numel(), uint16_t(0x2000));
    std::fill_n(qz.mutable_data_as<uint32_t>(), qz.numel(), 0x77777777u);
    const fs::path d = rewrite(t, "gptq_v1_sym_g128",
                               {{kLayer + ".qweight", q}, {kLayer + ".scales", sc}, {kLayer + ".qzeros", qz},
                                {kLayer + ".g_idx", Tensor()}, {kLayer + ".bias", Tensor()}});
    auto c = Checkpoint::open(d);
    CHECK(c->find_layer(kLayer)->scheme.kind == LayerScheme::Kind::quantized);
    CHECK(tensor_of(d, "fewer than N = 40") == kLayer + ".qzeros");
  }
  {  // a v1 word of all ones: a zero point of 0 packed by AutoGPTQ
    TempDir t;
    Tensor qz = SafetensorsFile::open(fixtures() / "gptq_v1_asym_g64" / "model.safetensors")->get(kLayer + ".qzeros").clone();
    qz.mutable_data_as<uint32_t>()[3] = 0xffffffffu;
    const std::string f = findings(rewrite(t, "gptq_v1_asym_g64", {{kLayer + ".qzeros", qz}}));
    CHECK(contains(f, "is 0xffffffff: a zero point of 0 packed by AutoGPTQ"));
    CHECK(contains(f, "GPTQ v1 zero 15"));  // and the layer cannot load
  }
  {  // zero and non-finite scales
    TempDir t;
    Tensor sc = src->get(kLayer + ".scales").clone();
    sc.mutable_data_as<uint16_t>()[0] = 0x7e00;  // NaN
    sc.mutable_data_as<uint16_t>()[1] = 0;
    const std::string f = findings(rewrite(t, "gptq_v1_sym_g128", {{kLayer + ".scales", sc}}));
    CHECK(contains(f, "1 non-finite scale(s) of 1024, the first at [0, 0] of [4, 256]: the layer cannot load"));
    CHECK(contains(f, "1 of 1024 scales are zero"));
    CHECK(!contains(f, "expected finite scales"));  // one finding, not canonicalize's refusal again
  }
  {
    TempDir t;
    Tensor sc = src->get(kLayer + ".scales").clone();
    sc.mutable_data_as<uint16_t>()[1] = 0;
    CHECK(contains(findings(rewrite(t, "gptq_v1_sym_g128", {{kLayer + ".scales", sc}})), "1 of 1024 scales are zero"));
  }
  {  // 4-bit codes that use only 0..7: a 3-bit layer labelled 4-bit?
    TempDir t;
    Tensor q = src->get(kLayer + ".qweight").clone();
    for (int64_t i = 0; i < q.numel(); ++i) q.mutable_data_as<uint32_t>()[i] &= 0x77777777u;
    CHECK(contains(findings(rewrite(t, "gptq_v1_sym_g128", {{kLayer + ".qweight", q}})), "the 4-bit codes use only 0..7 of 0..15"));
  }
  {  // qzeros too narrow for N (the tools' N // 32 * b words), on an asymmetric layer
    TempDir t;
    auto asym = SafetensorsFile::open(fixtures() / "gptq_v1_asym_g64" / "model.safetensors");
    Tensor qz = asym->get(kLayer + ".qzeros");
    Tensor narrow = Tensor::zeros(DType::i32, {qz.dim(0), qz.dim(1) - 1});
    auto c = Checkpoint::open(rewrite(t, "gptq_v1_asym_g64", {{kLayer + ".qzeros", narrow}}));
    CHECK(contains(c->find_layer(kLayer)->scheme.reason, "too narrow for N"));
    CHECK(c->find_layer(kLayer)->scheme.reason_tensor == kLayer + ".qzeros");
    const auto f = c->lint(*c->find_layer(kLayer));
    REQUIRE(f.size() == 1);
    CHECK(f[0].tensor == kLayer + ".qzeros");
  }
}

TEST_CASE("a checkpoint of 200k layers: every pass over the layers costs a bounded number of lookups per layer") {
  TempDir t;
  constexpr int kLayers = 200000;
  {
    SafetensorsWriter w(t.path / "model.safetensors");
    Tensor q = Tensor::zeros(DType::i32, {1, 8}), s = Tensor::zeros(DType::f16, {1, 8});
    for (int64_t i = 0; i < s.numel(); ++i) s.mutable_data_as<uint16_t>()[i] = 0x2000;
    for (int i = 0; i < kLayers; ++i) {
      const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.up_proj.", i / 1000, i % 1000);
      w.add(p + "qweight", q);
      w.add(p + "scales", s);
    }
    w.finish();
  }
  write_text(t.path / "config.json",
             R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1, "sym": true}})");
  auto c = Checkpoint::open(t.path);
  REQUIRE(c->layers().size() == std::size_t(kLayers));
  const uint64_t before = c->lookup_steps();
  int64_t loaded = 0;
  for (const auto& e : c->layers()) {
    REQUIRE(e.scheme.kind == LayerScheme::Kind::quantized);
    (void)c->spec_of(e);                   // explain's question
    loaded += c->load(e.name).spec.k == 8;  // run's
    CHECK(c->find_layer(e.name) == &e);
  }
  CHECK(loaded == kLayers);
  const uint64_t steps = c->lookup_steps() - before;
  // load: one layer lookup and a few tensor lookups; find_layer: one. A scan would be 200k each.
  CHECK(steps <= uint64_t(kLayers) * 8);
  MESSAGE(fmt::format("{} lookup steps for {} layers", steps, kLayers));
}
