// Fuzz target: canonicalize() on random layouts. The input chooses a packing, a bit width, a scheme and shapes
// (small, possibly inconsistent), then fills every tensor with its bytes; canonicalize must refuse
// with nibble::Error or return a layer that validates and that the reference kernel can run.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "nibble/error.h"
#include "nibble/formats.h"
#include "nibble/reference.h"

namespace {

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() { return n ? (--n, *p++) : 0; }
  int64_t small(int64_t max) { return int64_t(byte()) % (max + 1); }
};

nibble::Tensor filled(Reader& r, nibble::DType dt, nibble::Shape shape) {
  nibble::Tensor t = nibble::Tensor::zeros(dt, std::move(shape));
  auto* b = static_cast<uint8_t*>(t.mutable_data());
  for (size_t i = 0; i < t.nbytes(); ++i) b[i] = r.byte();
  if (dt == nibble::DType::f16 || dt == nibble::DType::bf16)  // keep most scales finite and small
    for (int64_t i = 0; i < t.numel(); ++i) reinterpret_cast<uint16_t*>(b)[i] &= 0x3bff;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  nibble::LayerScheme s;
  s.kind = nibble::LayerScheme::Kind::quantized;
  s.packing = nibble::Packing(r.small(3));
  const int widths[] = {4, 8, 3, 2, 5};
  s.bits = widths[r.small(4)];  // 5: refused by name
  const int gs[] = {-1, 8, 16, 32, 64, 128, 3, 0};
  s.group_size = gs[r.small(7)];
  s.symmetric = r.byte() & 1;
  s.act_order = r.byte() & 1;
  const int64_t k = 1 + r.small(40), n = 1 + r.small(40);
  const auto dims = [&](int64_t base) { return std::max<int64_t>(0, base + r.small(2) - 1); };  // off by one sometimes
  const int64_t groups = s.group_size > 0 ? (k + s.group_size - 1) / s.group_size : 1;
  std::map<std::string, nibble::Tensor> t;
  const auto i32 = nibble::DType::i32;
  const nibble::DType sdt = r.byte() & 1 ? nibble::DType::f16 : nibble::DType::bf16;
  switch (s.packing) {
    case nibble::Packing::gptq_v1:
    case nibble::Packing::gptq_v2:
      t["qweight"] = filled(r, i32, {dims((k * s.bits + 31) / 32), dims(n)});
      t["qzeros"] = filled(r, i32, {dims(groups), dims((n * s.bits + 31) / 32)});
      t["scales"] = filled(r, sdt, {dims(groups), dims(n)});
      if (r.byte() & 1) t["g_idx"] = filled(r, i32, {dims(k)});
      break;
    case nibble::Packing::awq_gemm:
      t["qweight"] = filled(r, i32, {dims(k), dims((n + 7) / 8)});
      t["qzeros"] = filled(r, i32, {dims(groups), dims((n + 7) / 8)});
      t["scales"] = filled(r, sdt, {dims(groups), dims(n)});
      break;
    case nibble::Packing::compressed_tensors: {
      nibble::Tensor shape = nibble::Tensor::zeros(i32, {2});
      shape.mutable_data_as<int32_t>()[0] = int32_t(dims(n));
      shape.mutable_data_as<int32_t>()[1] = int32_t(dims(k));
      t["weight_shape"] = shape;
      t["weight_packed"] = filled(r, i32, {dims(n), dims((k * s.bits + 31) / 32)});
      t["weight_scale"] = filled(r, sdt, {dims(n), dims(groups)});
      if (!s.symmetric) t["weight_zero_point"] = filled(r, i32, {dims((n * s.bits + 31) / 32), dims(groups)});
      if (s.act_order) t["weight_g_idx"] = filled(r, i32, {dims(k)});
      break;
    }
  }
  if (r.byte() & 1) t["bias"] = filled(r, nibble::DType::f16, {dims(n)});
  try {
    nibble::CanonicalLinear w = nibble::canonicalize("fuzz.layer", s, nibble::TensorSource::from_map(t), nibble::DType::f16);
    nibble::validate(w);
    nibble::Tensor x = nibble::random_activations(2, w.spec.k, nibble::DType::f16, 1);
    (void)nibble::reference_linear(w, x);
  } catch (const nibble::Error&) {
  }
  return 0;
}
