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

// One header entry as the SAX reader saw it; `problem` is the first thing wrong with its shape.
struct RawEntry {
  std::string name;
  bool is_object = false, has_dtype = false, has_shape = false, has_offsets = false;
  std::string dtype;
  std::vector<uint64_t> shape, offsets;
  std::string problem;
};

// Reads a safetensors header straight into entries, without a JSON document: the document of a
// header with hundreds of thousands of tensors costs more than everything else that reads it.
// Structure: {name: {dtype: str, shape: [uint...], data_offsets: [uint, uint], ...}, __metadata__: {str: str}}.
class HeaderReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<RawEntry> entries;
  std::map<std::string, std::string> metadata;
  std::string error;  // what makes the whole header unreadable
  bool root_object = false;

  bool null() override { return scalar("null", nullptr, nullptr); }
  bool boolean(bool) override { return scalar("a boolean", nullptr, nullptr); }
  bool number_integer(number_integer_t v) override {
    const uint64_t u = uint64_t(v);
    return v >= 0 ? scalar("a number", nullptr, &u) : scalar("a negative number", nullptr, nullptr);
  }
  bool number_unsigned(number_unsigned_t v) override { return scalar("a number", nullptr, &v); }
  bool number_float(number_float_t, const string_t&) override { return scalar("a fraction", nullptr, nullptr); }
  bool binary(binary_t&) override { return scalar("binary data", nullptr, nullptr); }
  bool string(string_t& v) override { return scalar("a string", &v, nullptr); }

  bool key(string_t& k) override {
    if (depth_ == 1) {
      meta_ = k == "__metadata__";
      field_ = Field::other;  // a field of the entry before is not one of this entry
      if (!meta_) {
        entries.emplace_back();
        entries.back().name = k;
      }
    } else if (depth_ == 2 && meta_) {
      meta_key_ = k;
    } else if (depth_ == 2) {
      field_ = k == "dtype" ? Field::dtype : k == "shape" ? Field::shape : k == "data_offsets" ? Field::offsets : Field::other;
      RawEntry& e = entries.back();  // a repeated field: the last one counts
      if (field_ == Field::dtype) e.has_dtype = false;
      if (field_ == Field::shape) e.shape.clear(), e.has_shape = false;
      if (field_ == Field::offsets) e.offsets.clear(), e.has_offsets = false;
    }
    return true;
  }
  bool start_object(std::size_t) override { return container(false); }
  bool start_array(std::size_t) override { return container(true); }
  bool end_object() override { return --depth_, true; }
  bool end_array() override { return --depth_, true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = fmt::format("header is not valid JSON: {}", detail::printable(std::string_view(e.what())));
    return false;
  }

 private:
  enum class Field { dtype, shape, offsets, other };
  bool in_array_field() const { return field_ == Field::shape || field_ == Field::offsets; }
  const char* field_name() const { return field_ == Field::shape ? "'shape'" : "'data_offsets'"; }
  void note(const std::string& what) {
    if (!entries.empty() && entries.back().problem.empty()) entries.back().problem = what;
  }
  bool metadata_not_string() {
    error = fmt::format("__metadata__ value of '{}' is not a string", detail::printable(meta_key_));
    return false;
  }

  // A value at the current depth: 1 an entry, 2 a field (or a metadata value), 3 an array element.
  bool scalar(const char* what, const std::string* str, const uint64_t* num) {
    switch (depth_) {
      case 0: return true;  // the root is not an object: root_object stays false
      case 1:
        if (meta_) return error = "__metadata__ is not an object", false;
        return true;  // an entry that is not an object
      case 2:
        if (meta_) return str ? (metadata[meta_key_] = *str, true) : metadata_not_string();
        if (field_ == Field::dtype && str) entries.back().dtype = *str, entries.back().has_dtype = true;
        if (in_array_field()) note(fmt::format("{} is {}, not an array", field_name(), what));
        return true;
      default:
        if (meta_ || !in_array_field()) return true;
        if (depth_ == 3 && num) (field_ == Field::shape ? entries.back().shape : entries.back().offsets).push_back(*num);
        else note(fmt::format("{} holds {}", field_name(), depth_ == 3 ? what : "nested values"));
        return true;
    }
  }
  bool container(bool array) {
    const int d = depth_++;
    switch (d) {
      case 0:
        // An array root stops here: what is nested in it belongs to no entry (entries are the
        // keys of a root object), and nothing below may assume one.
        if (array) return error = "header is not a JSON object (it is an array)", false;
        root_object = true;
        return true;
      case 1:
        if (meta_ && array) return error = "__metadata__ is not an object", false;
        if (!meta_) entries.back().is_object = !array;
        return true;
      case 2:
        if (meta_) return metadata_not_string();
        if (in_array_field()) {
          if (array) (field_ == Field::shape ? entries.back().has_shape : entries.back().has_offsets) = true;
          else note(fmt::format("{} is an object, not an array", field_name()));
        }
        return true;
      default:
        if (!meta_ && in_array_field()) note(fmt::format("{} holds nested values", field_name()));
        return true;
    }
  }

  int depth_ = 0;
  bool meta_ = false;
  std::string meta_key_;
  Field field_ = Field::other;
};

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
  const std::string_view text(reinterpret_cast<const char*>(data + 8), std::size_t(hlen));
  detail::check_json_depth(text, origin + ": header", 4);
  HeaderReader reader;
  nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
  if (!reader.error.empty()) bad(origin, reader.error);
  if (!reader.root_object) bad(origin, "header is not a JSON object");
  if (reader.entries.size() > limits.max_tensors)
    throw Error(Errc::limit, fmt::format("{}: {} header entries exceed the limit of {}", origin, reader.entries.size(),
                                         limits.max_tensors));

  auto f = std::shared_ptr<SafetensorsFile>(new SafetensorsFile);
  f->origin_ = origin;
  f->owner_ = std::move(owner);
  f->data_ = data + 8 + hlen;
  f->data_size_ = size - 8 - std::size_t(hlen);
  f->metadata_ = std::move(reader.metadata);
  // A name given twice: the last entry counts, as in a JSON document.
  std::map<std::string_view, std::size_t> last;
  for (std::size_t i = 0; i < reader.entries.size(); ++i) last[reader.entries[i].name] = i;
  f->tensors_.reserve(last.size());

  for (const auto& [name_view, index] : last) {
    RawEntry& e = reader.entries[index];
    const std::string& name = e.name;
    const std::string tname = detail::printable(name);
    auto where = [&](const std::string& what) { bad(origin, fmt::format("tensor '{}': {}", tname, what)); };
    // A name is printed into listings and messages: control characters would let a file forge them.
    for (unsigned char ch : name)
      if (ch < 0x20 || ch == 0x7f) where("the name holds a control character (names are printed; refused)");
    if (!e.is_object) where("entry is not an object");
    TensorInfo ti;
    if (!e.has_dtype) where("missing string 'dtype'");
    ti.dtype_name = std::move(e.dtype);
    std::size_t esize = 0;
    for (const auto& d : kDtypes)
      if (ti.dtype_name == d.name) ti.dtype = d.dtype, esize = dtype_size(d.dtype);
    if (!esize) esize = foreign_dtype_size(ti.dtype_name);
    if (!esize) where(fmt::format("unknown dtype '{}'", detail::printable(ti.dtype_name, 32)));
    if (!e.has_shape) where("missing array 'shape'");
    if (!e.problem.empty()) where(e.problem + " (expected 'shape' and 'data_offsets' arrays of non-negative integers)");
    if (e.shape.size() > limits.max_rank) where(fmt::format("rank {} exceeds the limit of {}", e.shape.size(), limits.max_rank));
    for (const uint64_t v : e.shape) {
      if (v > uint64_t(INT64_MAX)) where(fmt::format("dimension {} too large", v));
      ti.shape.push_back(int64_t(v));
    }
    int64_t numel = 0;
    try {
      numel = checked_numel(ti.shape);
    } catch (const Error&) {
      throw Error(Errc::limit, fmt::format("{}: tensor '{}': element count of shape {} overflows", origin, tname, shape_str(ti.shape)));
    }
    if (!e.has_offsets || e.offsets.size() != 2) where("missing 'data_offsets' [begin, end] of non-negative integers");
    ti.begin = e.offsets[0];
    ti.end = e.offsets[1];
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
    ti.name = std::move(e.name);
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
  // tensors_ is in name order already (the entries were taken in the order of their names).
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
