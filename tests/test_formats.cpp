// Checkpoints: every shared fixture, round trips through every format nibble writes, bad inputs
// with their specific errors, quantization_config parsing, and tensor-parallel sharding.
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
#include "nibble/shard.h"
#include "test_util.h"

using namespace nibble;
namespace fs = std::filesystem;

std::string nibble::test::skip_reason() { return {}; }

namespace {

fs::path data_dir() { return test::env_or("NIBBLE_TEST_DATA"); }

using test::TempDir;

using test::contains;
using test::error_of;

void write_text(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

// A safetensors file with a hand-written header (for malformed inputs).
void write_raw(const fs::path& p, const std::string& header, std::size_t data_bytes) {
  std::ofstream f(p, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header;
  std::string zeros(data_bytes, '\0');
  f << zeros;
}

// Copies a fixture into a temp dir, with some tensors replaced (or removed when the tensor is empty)
// and optionally another config.json.
void rewrite_fixture(const std::string& fixture, const fs::path& out, const std::map<std::string, Tensor>& replace,
                     const std::string& config = "") {
  auto src = SafetensorsFile::open(data_dir() / "fixtures" / fixture / "model.safetensors");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& t : src->tensors()) {
    auto it = replace.find(t.name);
    if (it == replace.end()) tensors.emplace_back(t.name, src->get(t.name));
    else if (!it->second.empty()) tensors.emplace_back(t.name, it->second);
  }
  write_safetensors(out / "model.safetensors", tensors);
  if (config.empty()) fs::copy_file(data_dir() / "fixtures" / fixture / "config.json", out / "config.json");
  else write_text(out / "config.json", config);
}

Tensor transposed(const Tensor& t) {
  Tensor o = Tensor::zeros(t.dtype(), {t.dim(1), t.dim(0)});
  const std::size_t es = dtype_size(t.dtype());
  for (int64_t r = 0; r < t.dim(0); ++r)
    for (int64_t c = 0; c < t.dim(1); ++c)
      std::memcpy(static_cast<uint8_t*>(o.mutable_data()) + (c * t.dim(0) + r) * es,
                  static_cast<const uint8_t*>(t.data()) + (r * t.dim(1) + c) * es, es);
  return o;
}

void check_same(const CanonicalLinear& a, const CanonicalLinear& b) {
  REQUIRE(a.spec.k == b.spec.k);
  REQUIRE(a.spec.n == b.spec.n);
  CHECK(a.spec.weight_type == b.spec.weight_type);
  CHECK(a.spec.act_order == b.spec.act_order);
  CHECK(a.spec.group_size == b.spec.group_size);
  int64_t bad = 0;
  for (int64_t k = 0; k < a.spec.k; ++k)
    for (int64_t n = 0; n < a.spec.n; ++n) bad += a.weight(k, n) != b.weight(k, n) || a.code(k, n) != b.code(k, n);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("every shared fixture loads, and matches the tool's codes, weights and outputs") {
  const char* fixtures[] = {"gptq_v1_sym_g128", "gptq_v1_asym_g64", "gptq_v1_sym_actorder_g128", "gptq_v1_sym_perchannel",
                            "awq_gemm_g128", "ct_pack_sym_g128", "ct_pack_asym_g64", "ct_pack_sym_actorder_g128",
                            "autoround_gptq_sym_g128", "autoround_gptqmodel_asym_g32"};
  for (const char* f : fixtures) {
    CAPTURE(f);
    auto ckpt = Checkpoint::open(data_dir() / "fixtures" / f);
    auto ref = SafetensorsFile::open(data_dir() / "fixtures" / f / "reference.safetensors");
    const LayerEntry* head = ckpt->find_layer("lm_head");
    REQUIRE(head);
    CHECK(head->scheme.kind == LayerScheme::Kind::unquantized);
    int layers = 0;
    for (const auto& e : ckpt->layers()) {
      if (e.scheme.kind != LayerScheme::Kind::quantized) continue;
      ++layers;
      CAPTURE(e.name);
      CanonicalLinear w = ckpt->load(e.name);
      const int64_t K = w.spec.k, N = w.spec.n;
      Tensor codes = ref->get(e.name + ".codes"), weight = ref->get(e.name + ".weight");
      REQUIRE(codes.shape() == Shape{N, K});
      int64_t bad_codes = 0, bad_weights = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          bad_codes += w.code(k, n) != codes.data_as<uint8_t>()[n * K + k];
          const double want = weight.at(std::size_t(n * K + k));
          bad_weights += std::fabs(w.weight(k, n) - want) > 0x1p-10 * std::fabs(want) + 1e-9;
        }
      CHECK(bad_codes == 0);
      CHECK(bad_weights == 0);
      Tensor x = ref->get(e.name + ".x"), y = ref->get(e.name + ".y");
      Comparison c = compare_to_reference(reference_linear(w, x), y, reference_magnitude(w, x), DType::f32);
      CHECK_MESSAGE(c.ok, "worst error " << c.max_abs_err);
    }
    CHECK(layers == 2);
  }
}

TEST_CASE("round trip: quantize -> pack in each format -> read back gives the same canonical layer") {
  Tensor weight = Tensor::zeros(DType::f16, {80, 256});
  for (int64_t i = 0; i < weight.numel(); ++i)
    store_float(weight.mutable_data(), DType::f16, std::size_t(i), std::sin(double(i) * 0.37) * 0.05 + (i % 7) * 0.001);
  for (const auto& fname : output_format_names()) {
    const OutputFormat f = output_format(fname);
    for (int g : {32, 64, 128, -1})
      for (bool sym : {true, false})
        for (bool ao : {false, true}) {
          if (ao && (g == -1 || f.packing == Packing::awq_gemm)) continue;
          CAPTURE(fname);
          CAPTURE(g);
          CAPTURE(sym);
          CAPTURE(ao);
          CanonicalLinear w = quantize_rtn("model.layers.0.mlp.down_proj", weight, g, sym, ao, DType::f16,
                                           f.packing == Packing::gptq_v1 ? 1 : 0);
          std::map<std::string, Tensor> packed;
          for (auto& [suffix, t] : pack_layer(w, f.packing)) packed[suffix] = t;
          LayerScheme s;
          s.kind = LayerScheme::Kind::quantized;
          s.packing = f.packing;
          s.group_size = g;
          s.symmetric = sym;
          s.act_order = ao;
          CanonicalLinear back = canonicalize(w.spec.name, s, TensorSource::from_map(packed), DType::f16);
          check_same(w, back);
          // And the dequantized weight is close to what was quantized (RTN error <= half a step).
          int64_t far = 0;
          for (int64_t k = 0; k < 256; ++k)
            for (int64_t n = 0; n < 80; ++n) {
              const double step = w.scale(w.group_of(k), n);
              far += std::fabs(w.weight(k, n) - weight.at(std::size_t(n * 256 + k))) > 0.5 * step + 1e-6 &&
                     std::fabs(weight.at(std::size_t(n * 256 + k))) < 7 * step;
            }
          CHECK(far == 0);
        }
  }
}

TEST_CASE("quantize a 16-bit model directory in every format, sharded, and load it back") {
  TempDir in;
  Tensor a = Tensor::zeros(DType::bf16, {96, 128}), b = Tensor::zeros(DType::bf16, {128, 96}), emb = Tensor::zeros(DType::bf16, {10, 128});
  for (int64_t i = 0; i < a.numel(); ++i) store_float(a.mutable_data(), DType::bf16, std::size_t(i), std::cos(i * 0.11) * 0.03);
  for (int64_t i = 0; i < b.numel(); ++i) store_float(b.mutable_data(), DType::bf16, std::size_t(i), std::sin(i * 0.7) * 0.02);
  write_safetensors(in.path / "model.safetensors", {{"model.embed_tokens.weight", emb},
                                                    {"model.layers.0.mlp.up_proj.weight", a},
                                                    {"model.layers.0.mlp.down_proj.weight", b},
                                                    {"lm_head.weight", emb}});
  write_text(in.path / "config.json", R"({"model_type": "llama", "torch_dtype": "bfloat16"})");
  for (const auto& fname : output_format_names()) {
    CAPTURE(fname);
    TempDir out;
    QuantizeOptions o;
    o.format = fname;
    o.group_size = 32;
    o.symmetric = false;
    o.dtype = DType::bf16;
    o.max_shard_bytes = 8000;  // forces several shards and an index
    quantize_model_dir(in.path, out.path, o);
    CHECK(fs::exists(out.path / "model.safetensors.index.json"));
    auto ckpt = Checkpoint::open(out.path);
    CHECK(ckpt->num_files() > 1);
    CHECK(ckpt->config().model_dtype() == DType::bf16);
    const OutputFormat f = output_format(fname);
    for (auto [name, t] : {std::pair{"model.layers.0.mlp.up_proj", a}, std::pair{"model.layers.0.mlp.down_proj", b}}) {
      const LayerEntry* e = ckpt->find_layer(name);
      REQUIRE(e);
      CHECK(e->scheme.kind == LayerScheme::Kind::quantized);
      check_same(ckpt->load(name), quantize_rtn(name, t, 32, false, false, DType::bf16, f.packing == Packing::gptq_v1 ? 1 : 0));
    }
    CHECK(ckpt->find_layer("lm_head")->scheme.kind == LayerScheme::Kind::unquantized);
    CHECK(ckpt->tensor("model.embed_tokens.weight").shape() == Shape{10, 128});
  }
}

TEST_CASE("bad safetensors files give specific errors") {
  TempDir d;
  const fs::path p = d.path / "x.safetensors";
  write_raw(p, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8);
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "tensor 'a': data_offsets [0, 16] end past the data section of 8 bytes"));

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}, "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16);
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "overlap"));

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16);
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "F32 [3] needs 12 bytes but data_offsets [0, 16] span 16"));

  write_raw(p, R"({"a": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 2]}})", 2);
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "unknown dtype 'Q4'"));

  write_raw(p, R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 0]}})", 0);
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "overflows"));

  write_raw(p, "{not json", 0);
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "not valid JSON"));

  // A root that is not an object, with entries nested in it (the fuzzer's find: an array root
  // whose objects were read as entries that did not exist, undefined behaviour).
  for (const char* root : {R"([{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}])", R"([{}, [1, 2]])",
                           R"([[{"a": 1}]])", "[]", R"("a")", "7"}) {
    write_raw(p, root, 4);
    CHECK_MESSAGE(contains(error_of([&] { SafetensorsFile::open(p); }), "header is not a JSON object"), root);
  }

  {  // header length larger than the file
    std::ofstream f(p, std::ios::binary);
    uint64_t n = 1000;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "truncated: header says 1000 bytes"));
  {
    std::ofstream f(p, std::ios::binary);
    uint64_t n = uint64_t(1) << 40;
    f.write(reinterpret_cast<const char*>(&n), 8);
  }
  CHECK(contains(error_of([&] { SafetensorsFile::open(p); }), "exceeds the limit"));

  // A real checkpoint cut short: the last tensor runs past the end of the file.
  TempDir t;
  fs::copy_file(data_dir() / "fixtures" / "gptq_v1_sym_g128" / "model.safetensors", t.path / "model.safetensors");
  fs::resize_file(t.path / "model.safetensors", fs::file_size(t.path / "model.safetensors") - 100);
  fs::copy_file(data_dir() / "fixtures" / "gptq_v1_sym_g128" / "config.json", t.path / "config.json");
  const std::string e = error_of([&] { Checkpoint::open(t.path); });
  CHECK(contains(e, "end past the data section"));
  CHECK(contains(e, "model.layers.0.self_attn.q_proj.scales"));
}

TEST_CASE("bad checkpoints name the layer, the tensor, the expected and the found value") {
  const std::string layer = "model.layers.0.self_attn.q_proj";
  auto fixture_tensor = [](const std::string& fx, const std::string& name) {
    return SafetensorsFile::open(data_dir() / "fixtures" / fx / "model.safetensors")->get(name).clone();
  };
  {  // compressed-tensors zero points in GPTQ's orientation: refused, not silently transposed
    TempDir d;
    Tensor zp = fixture_tensor("ct_pack_asym_g64", layer + ".weight_zero_point");
    REQUIRE(zp.shape() == Shape{16, 4});
    rewrite_fixture("ct_pack_asym_g64", d.path, {{layer + ".weight_zero_point", transposed(zp)}});
    const std::string e = error_of([&] { Checkpoint::open(d.path)->load(layer); });
    CHECK(contains(e, "layer 'model.layers.0.self_attn.q_proj': tensor 'model.layers.0.self_attn.q_proj.weight_zero_point': expected shape [16, 4]"));
    CHECK(contains(e, "found [4, 16]"));
  }
  {  // GPTQ qzeros in compressed-tensors' orientation
    TempDir d;
    Tensor qz = fixture_tensor("gptq_v1_asym_g64", layer + ".qzeros");
    rewrite_fixture("gptq_v1_asym_g64", d.path, {{layer + ".qzeros", transposed(qz)}});
    const std::string e = error_of([&] { Checkpoint::open(d.path)->load(layer); });
    CHECK(contains(e, "qzeros': expected shape [4, 16]"));
    CHECK(contains(e, "found [16, 4]: the transposed orientation of compressed-tensors"));
  }
  {  // wrong dtype
    TempDir d;
    Tensor sc = fixture_tensor("gptq_v1_sym_g128", layer + ".scales");
    rewrite_fixture("gptq_v1_sym_g128", d.path, {{layer + ".scales", Tensor::zeros(DType::i32, sc.shape())}});
    CHECK(contains(error_of([&] { Checkpoint::open(d.path)->load(layer); }), "scales': expected dtype f16|bf16|f32, found i32 [4, 256]"));
  }
  {  // desc_act without g_idx
    TempDir d;
    rewrite_fixture("gptq_v1_sym_actorder_g128", d.path, {{layer + ".g_idx", Tensor()}});
    CHECK(contains(error_of([&] { Checkpoint::open(d.path)->load(layer); }), "g_idx': missing, but the config promises act order"));
  }
  {  // g_idx out of range
    TempDir d;
    Tensor g = fixture_tensor("gptq_v1_sym_actorder_g128", layer + ".g_idx");
    g.mutable_data_as<int32_t>()[5] = 99;
    rewrite_fixture("gptq_v1_sym_actorder_g128", d.path, {{layer + ".g_idx", g}});
    CHECK(contains(error_of([&] { Checkpoint::open(d.path)->load(layer); }), "expected values in [0, 4), found 99 at row 5"));
  }
  {  // a GPTQ v1 zero nibble of 15 cannot be a 4-bit zero point
    TempDir d;
    Tensor qz = fixture_tensor("gptq_v1_asym_g64", layer + ".qzeros");
    qz.mutable_data_as<uint32_t>()[0] |= 0xfu;
    rewrite_fixture("gptq_v1_asym_g64", d.path, {{layer + ".qzeros", qz}});
    CHECK(contains(error_of([&] { Checkpoint::open(d.path)->load(layer); }), "GPTQ v1 zero 15 at group 0, column 0"));
  }
  {  // unknown quant_method
    TempDir d;
    rewrite_fixture("gptq_v1_sym_g128", d.path, {}, R"({"quantization_config": {"quant_method": "hqq"}})");
    CHECK(contains(error_of([&] { Checkpoint::open(d.path); }), "quant_method 'hqq' (quantization_config.quant_method)"));
  }
  {  // missing tensor
    TempDir d;
    rewrite_fixture("gptq_v1_sym_g128", d.path, {{layer + ".scales", Tensor()}});
    CHECK(contains(error_of([&] { Checkpoint::open(d.path)->load(layer); }), "tensor 'model.layers.0.self_attn.q_proj.scales': missing"));
  }
}

TEST_CASE("quantization_config: unsupported schemes and unquantized layers carry the config key") {
  auto scheme = [](const std::string& cfg, const std::string& layer) {
    return QuantConfig::parse(R"({"quantization_config": )" + cfg + "}", "config.json").scheme_for(layer);
  };
  LayerScheme s = scheme(R"({"quant_method": "gptq", "bits": 5, "group_size": 128, "sym": true})", "model.layers.0.mlp.up_proj");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "5-bit weights (quantization_config.bits): nibble reads GPTQ at 2, 3, 4, 8 bits"));
  s = scheme(R"({"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": true})", "model.layers.0.mlp.up_proj");
  CHECK(s.kind == LayerScheme::Kind::quantized);
  CHECK(s.bits == 8);

  s = scheme(R"({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "version": "gemv"})", "x.q_proj");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "AWQ version 'gemv' (quantization_config.version)"));

  s = scheme(R"({"quant_method": "awq", "version": "GEMM", "modules_to_not_convert": ["visual"]})", "model.visual.proj");
  CHECK(s.kind == LayerScheme::Kind::unquantized);
  CHECK(contains(s.reason, "modules_to_not_convert"));

  const std::string ct = R"({"quant_method": "compressed-tensors", "format": "pack-quantized",
    "ignore": ["lm_head", "re:.*mlp\\.gate$"],
    "config_groups": {"g0": {"targets": ["re:.*self_attn.*"], "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "channel"}},
                      "g1": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32}}}})";
  s = scheme(ct, "model.layers.0.self_attn.k_proj");
  CHECK(s.kind == LayerScheme::Kind::quantized);
  CHECK(s.group_size == -1);
  s = scheme(ct, "model.layers.0.mlp.gate");
  CHECK(s.kind == LayerScheme::Kind::unquantized);
  CHECK(contains(s.reason, "quantization_config.ignore"));
  s = scheme(ct, "model.layers.0.mlp.up_proj");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "weights type 'float'"));

  const std::string ar = R"({"quant_method": "auto-round", "packing_format": "auto_round:auto_awq", "bits": 4, "group_size": 128, "sym": false,
    "block_name_to_quantize": "model.layers",
    "extra_config": {"model.layers.0.mlp.down_proj": {"bits": 16}, ".*\\.1\\.self_attn\\..*": {"bits": 4, "group_size": 32, "sym": true}}})";
  s = scheme(ar, "model.layers.0.mlp.down_proj");
  CHECK(s.kind == LayerScheme::Kind::unquantized);
  CHECK(contains(s.reason, "extra_config"));
  s = scheme(ar, "model.layers.1.self_attn.q_proj");
  CHECK(s.kind == LayerScheme::Kind::quantized);
  CHECK(s.group_size == 32);
  CHECK(s.symmetric);
  CHECK(s.packing == Packing::awq_gemm);
  s = scheme(ar, "model.vision.proj");
  CHECK(s.kind == LayerScheme::Kind::unquantized);
  CHECK(contains(s.reason, "block_name_to_quantize"));
  s = scheme(R"({"quant_method": "auto-round", "packing_format": "auto_round:fp8"})", "model.layers.0.q");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "packing_format"));

  s = scheme(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"})", "model.layers.0.q");
  CHECK(s.kind == LayerScheme::Kind::unsupported);
  CHECK(contains(s.reason, "checkpoint_format 'marlin'"));

  s = scheme(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": {"-:.*down_proj": {}}})", "model.layers.3.mlp.down_proj");
  CHECK(s.kind == LayerScheme::Kind::unquantized);
  CHECK(contains(s.reason, "dynamic"));

  CHECK(contains(error_of([] { QuantConfig::parse(R"({"quantization_config": {"quant_method": "gptq", "bits": "four"}})", "c.json"); }),
                 "quantization_config.bits: expected an integer, found \"four\""));
  // Absurd numbers are errors, never allocations.
  CHECK(contains(error_of([] { QuantConfig::parse(R"({"quantization_config": {"quant_method": "gptq", "group_size": 1099511627776}})", "c.json"); }),
                 "quantization_config.group_size: expected an integer in ["));
  CHECK(contains(error_of([] { QuantConfig::parse(R"({"quantization_config": {"quant_method": "gptq", "group_size": -7}})", "c.json"); }),
                 "quantization_config.group_size: expected -1 (per channel) or a positive group size, found -7"));
}

TEST_CASE("tensor-parallel shards reproduce the full layer") {
  LinearSpec s;
  s.name = "tp";
  s.k = 512; s.n = 96; s.group_size = 64;
  s.weight_type = WeightType::uint4; s.act_dtype = DType::f32; s.scale_dtype = DType::f16; s.has_bias = true;
  for (bool ao : {false, true}) {
    s.act_order = ao;
    CanonicalLinear w = random_canonical(s, 77 + ao);
    Tensor x = random_activations(3, s.k, DType::f32, 78);
    Tensor full = reference_linear(w, x);
    // column: concatenate
    for (int world : {2, 4}) {
      for (int r = 0; r < world; ++r) {
        CanonicalLinear p = shard(w, Parallel::column, r, world);
        CHECK(p.spec.n == s.n / world);
        Tensor y = reference_linear(p, x);
        for (int64_t m = 0; m < 3; ++m)
          for (int64_t n = 0; n < p.spec.n; ++n) CHECK(y.at(std::size_t(m * p.spec.n + n)) == doctest::Approx(full.at(std::size_t(m * s.n + r * p.spec.n + n))));
      }
      // row: sum
      std::vector<double> sum(std::size_t(3 * s.n), 0.0);
      for (int r = 0; r < world; ++r) {
        CanonicalLinear p = shard(w, Parallel::row, r, world);
        CHECK(p.spec.k == s.k / world);
        Tensor xs = Tensor::zeros(DType::f32, {3, p.spec.k});
        for (int64_t m = 0; m < 3; ++m)
          for (int64_t k = 0; k < p.spec.k; ++k) xs.mutable_data_as<float>()[m * p.spec.k + k] = x.data_as<float>()[m * s.k + r * p.spec.k + k];
        Tensor y = reference_linear(p, xs);
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += y.at(i);
      }
      for (std::size_t i = 0; i < sum.size(); ++i) CHECK(sum[i] == doctest::Approx(full.at(i)).epsilon(1e-9));
    }
  }
  // Groups that would straddle ranks are refused with the numbers.
  s.act_order = false;
  CanonicalLinear w = random_canonical(s, 5);
  CHECK(contains(error_of([&] { shard(w, Parallel::row, 0, 16); }), "K_part 32 is not a multiple of the group size 64"));
  CHECK(contains(error_of([&] { shard(w, Parallel::column, 0, 5); }), "N 96 over 5 ranks: not divisible"));
}
