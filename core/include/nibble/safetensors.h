// safetensors: a memory-mapped, validating reader (zero-copy tensor views) and a writer.
//
// File layout: u64 little-endian header length H, H bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data section; offsets are
// relative to the data section.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "nibble/tensor.h"

namespace nibble {

struct SafetensorsLimits {
  uint64_t max_header_bytes = 100'000'000;  ///< as the reference implementation allows
  uint64_t max_tensors = 1'000'000;
  std::size_t max_rank = 8;
};

struct TensorInfo {
  std::string name;
  std::string dtype_name;  ///< as written: "F16", "BF16", "I32", ...
  DType dtype = DType::invalid;  ///< invalid for dtypes nibble does not read (F8_E4M3, ...)
  Shape shape;
  uint64_t begin = 0, end = 0;  ///< byte offsets in the data section
};

class SafetensorsFile {
 public:
  /// Maps and validates a file. Throws Errc::io / Errc::format / Errc::limit naming the file, the
  /// tensor and what is wrong.
  static std::shared_ptr<SafetensorsFile> open(const std::filesystem::path& path, const SafetensorsLimits& limits = {});
  /// Validates bytes already in memory (kept alive by `owner`); `origin` names them in errors.
  static std::shared_ptr<SafetensorsFile> parse(const uint8_t* data, std::size_t size, std::shared_ptr<const void> owner,
                                                const std::string& origin, const SafetensorsLimits& limits = {});

  const std::string& origin() const noexcept { return origin_; }
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// Info of a tensor, or null.
  const TensorInfo* find(const std::string& name) const;
  /// Zero-copy view of a tensor (copied only if its bytes are not aligned for its dtype). Throws
  /// Errc::not_found or Errc::unsupported (a dtype nibble does not read).
  Tensor get(const std::string& name) const;

 private:
  std::string origin_;
  std::shared_ptr<const void> owner_;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::size_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

/// Safetensors dtype name for a DType ("F16", "I32", ...).
const char* safetensors_dtype_name(DType t);

/// Streams tensors into a safetensors file: each add() writes its bytes at once (to a temporary
/// data file), finish() writes the header and assembles the file, so that a model of any size is
/// written with one tensor in memory at a time. Tensors are 8-byte aligned.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::filesystem::path path);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;
  void add(const std::string& name, const Tensor& t);
  uint64_t data_bytes() const noexcept { return offset_; }
  const std::vector<std::string>& names() const noexcept { return names_; }
  void finish(const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

 private:
  std::filesystem::path path_, tmp_;
  std::FILE* data_ = nullptr;
  uint64_t offset_ = 0;
  std::vector<std::string> names_;
  std::string entries_;  // JSON entries written so far
  bool finished_ = false;
};

/// Writes tensors (in the given order) and metadata to `path`, aligning each tensor to 8 bytes.
void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace nibble
