// Fuzz target: a whole model directory. The input is
//   byte 0: what config.json is (bits 0-1) and what model.safetensors is (bits 2-3):
//           0 a regular file, 1 a FIFO, 2 a directory, 3 a link to /dev/zero
//   then the text of config.json, a 0xff 0xfe separator, the bytes of model.safetensors.
// Checkpoint::open must refuse with nibble::Error or give layers for which what explain decides
// is what run loads: a quantized layer's load() either succeeds with exactly spec_of()'s spec or
// fails on a value (Errc::format, never a contradiction in the spec), and lint never throws.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "nibble/checkpoint.h"
#include "nibble/error.h"

namespace fs = std::filesystem;

namespace {

const fs::path& dir() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("nibble_fuzz_checkpoint_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

void place(const fs::path& p, int kind, const std::string& bytes) {
  std::error_code ec;
  fs::remove_all(p, ec);
  switch (kind) {
    case 0: std::ofstream(p, std::ios::binary) << bytes; break;
    case 1: ::mkfifo(p.c_str(), 0600); break;
    case 2: fs::create_directory(p, ec); break;
    default: fs::create_symlink("/dev/zero", p, ec); break;
  }
}

bool same(const nibble::LinearSpec& a, const nibble::LinearSpec& b) {
  return a.k == b.k && a.n == b.n && a.bits == b.bits && a.group_size == b.group_size && a.weight_type == b.weight_type &&
         a.scale_dtype == b.scale_dtype && a.act_order == b.act_order && a.has_bias == b.has_bias && a.act_dtype == b.act_dtype;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::size_t sep = in.find("\xff\xfe");
  const std::string config = in.substr(0, sep), model = sep == std::string::npos ? "" : in.substr(sep + 2);
  place(dir() / "config.json", data[0] & 3, config);
  place(dir() / "model.safetensors", (data[0] >> 2) & 3, model);
  try {
    auto c = nibble::Checkpoint::open(dir());
    for (const auto& e : c->layers()) {
      (void)c->lint(e);
      if (e.scheme.kind != nibble::LayerScheme::Kind::quantized) continue;
      const nibble::LinearSpec s = c->spec_of(e);
      try {
        const nibble::CanonicalLinear w = c->load(e.name);
        if (!same(s, w.spec)) __builtin_trap();  // explain would have selected on another spec
      } catch (const nibble::Error& err) {
        // A layer explain accepted must load or fail on a value (or on a size limit), never on its spec.
        if (err.code() != nibble::Errc::format && err.code() != nibble::Errc::limit) __builtin_trap();
      }
    }
  } catch (const nibble::Error&) {
  }
  return 0;
}
