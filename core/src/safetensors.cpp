// safetensors reader and writer. Every number in the header is checked before it is used: the
// file is input that may be truncated, corrupted or hostile.
#include "nibble/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "input.h"
#include "nibble/error.h"

namespace nibble {

namespace {

struct DtypeName { const char* name; DType dtype; };
constexpr DtypeName kDtypes[] = {
    {"F16", DType::f16}, {"BF16", DType::bf16}, {"F32", DType::f32}, {"F64", DType::f64},
    {"I8", DType::i8},   {"U8", DType::u8},     {"I16", DType::i16}, {"U16", DType::u16},
    {"I32", DType::i32}, {"U32", DType::u32},   {"I64", DType::i64}, {"U64", DType::u64},
    {"BOOL", DType::boolean},
};

// Element sizes of dtypes nibble does not compute with but must still validate.
std::size_t foreign_dtype_size(const std::string& n) {
  if (n == "F8_E4M3" || n == "F8_E5M2" || n == "F8_E8M0") return 1;
  return 0;
}

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw Error(Errc::format, fmt::format("{}: {}", origin, what));
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDtypes)
    if (d.dtype == t) return d.name;
  return "?";
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path, const SafetensorsLimits& limits) {
  const std::string origin = detail::printable(path.string());
  detail::RegularFile file(path, "safetensors file");  // a FIFO or device is refused, never waited on
  const std::size_t size = file.size;
  if (size < 8) bad(origin, fmt::format("truncated: {} bytes, expected at least 8 (the header length)", size));
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (p == MAP_FAILED) throw Error(Errc::io, fmt::format("{}: mmap failed: {}", origin, std::strerror(errno)));
  std::shared_ptr<const void> owner(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  return parse(static_cast<const uint8_t*>(p), size, std::move(owner), origin, limits);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::parse(const uint8_t* data, std::size_t size,
                                                        std::shared_ptr<const void> owner, const std::string& origin,
                                                        const SafetensorsLimits& limits) {
  if (size < 8) bad(origin, fmt::format("truncated: {} bytes, expected at least 8 (the header length)", size));
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | data[i];
  if (hlen > limits.max_header_bytes)
    throw Error(Errc::limit, fmt::format("{}: header of {} bytes exceeds the limit of {} bytes", origin, hlen,
                                         limits.max_header_bytes));
  if (hlen > size - 8)
    bad(origin, fmt::format("truncated: header says {} bytes but the file has {} after the length", hlen, size - 8));
  // A header is {name: {dtype, shape: [...], data_offsets: [...]}}: 3 levels; __metadata__ 2.
  const nlohmann::json header =
      detail::parse_json(std::string_view(reinterpret_cast<const char*>(data + 8), std::size_t(hlen)), origin + ": header", 4);
  if (!header.is_object()) bad(origin, "header is not a JSON object");
  if (header.size() > limits.max_tensors)
    throw Error(Errc::limit, fmt::format("{}: {} header entries exceed the limit of {}", origin, header.size(), limits.max_tensors));

  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile);
  f->origin_ = origin;
  f->owner_ = std::move(owner);
  f->data_ = data + 8 + hlen;
  f->data_size_ = size - 8 - std::size_t(hlen);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(origin, "__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) bad(origin, fmt::format("__metadata__ value of '{}' is not a string", k));
        f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tname = detail::printable(name);  // (clang 14 cannot capture structured bindings)
    auto where = [&](const std::string& what) { bad(origin, fmt::format("tensor '{}': {}", tname, what)); };
    // A name is printed into listings and messages: control characters would let a file forge them.
    for (unsigned char ch : name)
      if (ch < 0x20 || ch == 0x7f) where("the name holds a control character (names are printed; refused)");
    if (!entry.is_object()) where("entry is not an object");
    TensorInfo ti;
    ti.name = name;
    const auto dt = entry.find("dtype");
    if (dt == entry.end() || !dt->is_string()) where("missing string 'dtype'");
    ti.dtype_name = dt->get<std::string>();
    std::size_t esize = 0;
    for (const auto& d : kDtypes)
      if (ti.dtype_name == d.name) ti.dtype = d.dtype, esize = dtype_size(d.dtype);
    if (!esize) esize = foreign_dtype_size(ti.dtype_name);
    if (!esize) where(fmt::format("unknown dtype '{}'", detail::printable(ti.dtype_name, 32)));
    const auto sh = entry.find("shape");
    if (sh == entry.end() || !sh->is_array()) where("missing array 'shape'");
    if (sh->size() > limits.max_rank) where(fmt::format("rank {} exceeds the limit of {}", sh->size(), limits.max_rank));
    for (const auto& d : *sh) {
      if (!d.is_number_unsigned()) where(fmt::format("shape {} holds something other than a non-negative integer", detail::printable_json(*sh)));
      const uint64_t v = d.get<uint64_t>();
      if (v > uint64_t(INT64_MAX)) where(fmt::format("dimension {} too large", v));
      ti.shape.push_back(int64_t(v));
    }
    int64_t numel = 0;
    try {
      numel = checked_numel(ti.shape);
    } catch (const Error&) {
      throw Error(Errc::limit, fmt::format("{}: tensor '{}': element count of shape {} overflows", origin, name, shape_str(ti.shape)));
    }
    const auto off = entry.find("data_offsets");
    if (off == entry.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      where("missing 'data_offsets' [begin, end] of non-negative integers");
    ti.begin = (*off)[0].get<uint64_t>();
    ti.end = (*off)[1].get<uint64_t>();
    if (ti.begin > ti.end) where(fmt::format("data_offsets [{}, {}] run backwards", ti.begin, ti.end));
    if (ti.end > f->data_size_)
      where(fmt::format("data_offsets [{}, {}] end past the data section of {} bytes (truncated file?)", ti.begin,
                        ti.end, f->data_size_));
    if (uint64_t(numel) > (UINT64_MAX / esize))
      throw Error(Errc::limit, fmt::format("{}: tensor '{}': {} {} needs more than 2^64 bytes", origin, tname,
                                           detail::printable(ti.dtype_name, 16), shape_str(ti.shape)));
    if (ti.end - ti.begin != uint64_t(numel) * esize)
      where(fmt::format("{} {} needs {} bytes but data_offsets [{}, {}] span {}", detail::printable(ti.dtype_name, 16),
                        shape_str(ti.shape), uint64_t(numel) * esize, ti.begin, ti.end, ti.end - ti.begin));
    f->tensors_.push_back(std::move(ti));
  }
  // No two tensors may share bytes.
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : f->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo* a = by_offset[i - 1];
    const TensorInfo* b = by_offset[i];
    if (b->begin < a->end && b->end > b->begin && a->end > a->begin)
      bad(origin, fmt::format("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", a->name, a->begin, a->end, b->name,
                              b->begin, b->end));
  }
  std::sort(f->tensors_.begin(), f->tensors_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  for (std::size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const TensorInfo* ti = find(name);
  if (!ti) throw Error(Errc::not_found, fmt::format("{}: no tensor '{}'", origin_, name));
  if (ti->dtype == DType::invalid)
    throw Error(Errc::unsupported, fmt::format("{}: tensor '{}' has dtype {}, which nibble does not read", origin_, name,
                                               ti->dtype_name));
  const uint8_t* p = data_ + ti->begin;
  Tensor view = Tensor::view(p, ti->dtype, ti->shape, owner_);
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(ti->dtype) != 0) return view.clone();  // unaligned: copy once
  return view;
}

SafetensorsWriter::SafetensorsWriter(std::filesystem::path path) : path_(std::move(path)) {
  tmp_ = path_.string() + ".data.tmp";
  data_ = std::fopen(tmp_.c_str(), "wb+");
  if (!data_) throw Error(Errc::io, fmt::format("{}: cannot create: {}", tmp_.string(), std::strerror(errno)));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (data_) std::fclose(data_);
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void SafetensorsWriter::add(const std::string& name, const Tensor& t) {
  if (finished_) throw Error(Errc::invalid_argument, "SafetensorsWriter: add() after finish()");
  const uint64_t bytes = t.nbytes();
  nlohmann::json e = {{"dtype", safetensors_dtype_name(t.dtype())}, {"shape", t.shape()},
                      {"data_offsets", {offset_, offset_ + bytes}}};
  entries_ += (entries_.empty() ? "" : ",") + nlohmann::json(name).dump() + ":" + e.dump();
  static const char zeros[8] = {0};
  const std::size_t pad = (8 - bytes % 8) % 8;
  if ((bytes && std::fwrite(t.data(), 1, bytes, data_) != bytes) || (pad && std::fwrite(zeros, 1, pad, data_) != pad))
    throw Error(Errc::io, fmt::format("{}: write failed: {}", tmp_.string(), std::strerror(errno)));
  offset_ += bytes + pad;
  names_.push_back(name);
}

void SafetensorsWriter::finish(const std::map<std::string, std::string>& metadata) {
  std::string h = "{";
  if (!metadata.empty()) h += "\"__metadata__\":" + nlohmann::json(metadata).dump() + (entries_.empty() ? "" : ",");
  h += entries_ + "}";
  h.append((8 - (h.size() % 8)) % 8, ' ');  // keep the data section 8-byte aligned
  const std::filesystem::path out_tmp = path_.string() + ".tmp";
  std::FILE* out = std::fopen(out_tmp.c_str(), "wb");
  if (!out) throw Error(Errc::io, fmt::format("{}: cannot create: {}", out_tmp.string(), std::strerror(errno)));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(h.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, out) == 8 && std::fwrite(h.data(), 1, h.size(), out) == h.size();
  std::fflush(data_);
  std::rewind(data_);
  std::vector<char> buf(std::size_t(1) << 22);
  for (std::size_t got; ok && (got = std::fread(buf.data(), 1, buf.size(), data_)) > 0;)
    ok = std::fwrite(buf.data(), 1, got, out) == got;
  ok = (std::fclose(out) == 0) && ok;
  if (!ok) throw Error(Errc::io, fmt::format("{}: write failed", out_tmp.string()));
  std::filesystem::rename(out_tmp, path_);
  finished_ = true;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w(path);
  for (const auto& [name, t] : tensors) w.add(name, t);
  w.finish(metadata);
}

}  // namespace nibble
