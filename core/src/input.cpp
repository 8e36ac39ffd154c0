// Bounded, checked reading of untrusted files and documents (input.h).
#include "input.h"

#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "nibble/error.h"

namespace nibble::detail {

namespace {

const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path, std::string_view what) {
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    throw Error(err == ENOENT ? Errc::not_found : Errc::io,
                fmt::format("{} {}: cannot open: {}", what, printable(path.string()), std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t m = st.st_mode;
    ::close(fd);
    fd = -1;
    throw Error(Errc::io, fmt::format("{} {}: expected a regular file, found {}", what, printable(path.string()), file_kind(m)));
  }
  // Reads of a regular file never block; the flag only mattered for open().
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  size = std::size_t(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd >= 0) ::close(fd);
}

std::string read_regular_file(const std::filesystem::path& path, std::size_t limit, std::string_view what) {
  RegularFile f(path, what);
  if (f.size > limit)
    throw Error(Errc::limit, fmt::format("{} {}: {} bytes, more than the limit of {} bytes", what, printable(path.string()),
                                         f.size, limit));
  std::string text(f.size, '\0');
  std::size_t done = 0;
  while (done < f.size) {
    const ssize_t got = ::read(f.fd, text.data() + done, f.size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(Errc::io, fmt::format("{} {}: read failed: {}", what, printable(path.string()), std::strerror(errno)));
    if (got == 0) break;  // shrank while reading
    done += std::size_t(got);
  }
  text.resize(done);
  return text;
}

void check_json_depth(std::string_view text, const std::string& origin, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        throw Error(Errc::format, fmt::format("{}: JSON nested deeper than {} levels (at byte {})", origin, max_depth, i));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

nlohmann::json parse_json(std::string_view text, const std::string& origin, int max_depth) {
  // The nesting depth, from one linear pass before the parser sees the text (the parser's own
  // callbacks cost time quadratic in the size of large objects).
  check_json_depth(text, origin, max_depth);
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(Errc::format, fmt::format("{}: not valid JSON: {}", origin, printable(std::string_view(e.what()))));
  }
}

namespace {

// Builds an ordered_json from SAX events in time linear in the text: nlohmann's own parser inserts
// each key of an ordered_json object with a linear search for a duplicate (quadratic in the keys:
// an AutoRound MoE config has tens of thousands of extra_config keys). Here each open object keeps
// a hash index of its keys while it is built. A key given twice keeps its first position and its
// last value, as Python's json does. Open containers stay in place while their children are built
// (a parent gains its next element only after the child closes), so the pointers on the stack hold.
class OrderedBuilder : public nlohmann::json_sax<nlohmann::ordered_json> {
 public:
  using J = nlohmann::ordered_json;
  J root;

  bool null() override { return put(J(nullptr)); }
  bool boolean(bool v) override { return put(J(v)); }
  bool number_integer(number_integer_t v) override { return put(J(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(J(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(J(v)); }
  bool string(string_t& v) override { return put(J(std::move(v))); }
  bool binary(binary_t& v) override { return put(J::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(J::object()); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(J::array()); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  struct Open {
    J* value;
    std::unordered_map<std::string, std::size_t> index;  // objects: key -> position
  };
  std::vector<Open> stack_;
  std::string key_, error_;

  J* place(J&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    Open& top = stack_.back();
    if (top.value->is_array()) {
      auto& a = top.value->get_ref<J::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    auto& o = top.value->get_ref<J::object_t&>();
    const auto [it, fresh] = top.index.emplace(key_, o.size());
    if (!fresh) {
      (o.begin() + std::ptrdiff_t(it->second))->second = std::move(v);
      return &(o.begin() + std::ptrdiff_t(it->second))->second;
    }
    o.Container::emplace_back(key_, std::move(v));
    return &o.back().second;
  }
  bool put(J&& v) {
    place(std::move(v));
    return true;
  }
  bool open(J&& v) {
    stack_.push_back({place(std::move(v)), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }
};

}  // namespace

nlohmann::ordered_json parse_json_ordered(std::string_view text, const std::string& origin, int max_depth) {
  check_json_depth(text, origin, max_depth);
  OrderedBuilder b;
  try {
    if (nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &b)) return std::move(b.root);
  } catch (const nlohmann::ordered_json::exception& e) {
    throw Error(Errc::format, fmt::format("{}: not valid JSON: {}", origin, printable(std::string_view(e.what()))));
  }
  throw Error(Errc::format, fmt::format("{}: not valid JSON: {}", origin, printable(std::string_view(b.error()))));
}

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  const std::size_t n = std::min(s.size(), max);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') out += "\\\\";
    else if (c < 0x20 || c >= 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += char(c);
  }
  if (s.size() > max) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string printable_json(const nlohmann::json& v, std::size_t max) {
  // The depth is bounded (parse_json), so dump() cannot recurse deeply; its length is bounded here.
  return printable(std::string_view(v.dump()), max);
}

std::string printable_json(const nlohmann::ordered_json& v, std::size_t max) {
  return printable(std::string_view(v.dump()), max);
}

}  // namespace nibble::detail
