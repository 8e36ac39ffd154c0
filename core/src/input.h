// Reading untrusted input: files (only regular files, never more than a limit), JSON with a bounded
// nesting depth, and values quoted into messages with a bounded length and no control characters.
// Every reader of checkpoints, configs and policies goes through these, so that a FIFO, a device
// file, a huge or deeply nested document is refused with its name instead of hanging, growing
// without bound or overflowing the stack.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace nibble::detail {

/// Nesting depth at which JSON documents are refused (config.json nests about 6 deep).
constexpr int kMaxJsonDepth = 64;

/// An open file descriptor of a regular file, and its size. Opens without blocking (a FIFO's open
/// would wait for a writer), then refuses anything but a regular file, naming what it is: Errc::io
/// ("is a directory", "is a FIFO", "is a character device", ...) or Errc::not_found.
struct RegularFile {
  int fd = -1;
  std::size_t size = 0;
  RegularFile(const std::filesystem::path& path, std::string_view what);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
};

/// The whole of a regular file of at most `limit` bytes (Errc::limit beyond it, before reading).
/// `what` names the file's role in messages ("config.json", "policy").
std::string read_regular_file(const std::filesystem::path& path, std::size_t limit, std::string_view what);

/// Refuses (Errc::format, naming `origin`) JSON text nested deeper than `max_depth`, in one linear
/// pass that does not parse it.
void check_json_depth(std::string_view text, const std::string& origin, int max_depth = kMaxJsonDepth);

/// Parses JSON text, refusing (Errc::format, naming `origin`) invalid syntax and nesting deeper
/// than `max_depth`.
nlohmann::json parse_json(std::string_view text, const std::string& origin, int max_depth = kMaxJsonDepth);
/// The same, keeping the objects' keys in the order of the text (configs whose per-layer rules
/// apply in file order, as Python's dicts keep it: GPTQModel dynamic, AutoRound extra_config).
/// Its objects find keys by a linear search: for small documents only.
nlohmann::ordered_json parse_json_ordered(std::string_view text, const std::string& origin,
                                          int max_depth = kMaxJsonDepth);

/// `s` for a message: control characters and non-ASCII bytes escaped (\x1b), at most `max` bytes
/// of it, then "..." and the length. Names from a file can then never forge lines of output.
std::string printable(std::string_view s, std::size_t max = 200);
/// A JSON value for a message: its compact text through printable().
std::string printable_json(const nlohmann::json& v, std::size_t max = 80);
std::string printable_json(const nlohmann::ordered_json& v, std::size_t max = 80);

}  // namespace nibble::detail
