// Plugin discovery and careful loading: which files in which directories may be plugins, and the
// checks a file passes before anything in it is trusted.
#include <dlfcn.h>
#include <elf.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/dll/import.hpp>
#include <boost/dll/library_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <fstream>
#include <set>

#include "nibble/registry.h"
#include "registry_internal.h"

namespace fs = std::filesystem;

namespace nibble {

namespace {

using detail::safe_str;

// Turns a dlopen failure into a reason that names the missing library when there is one.
std::string explain_load_failure(const fs::path& file, const std::string& what) {
  static const std::string kMissing = ": cannot open shared object file";
  auto pos = what.find(kMissing);
  if (pos != std::string::npos) {
    auto start = what.rfind(' ', pos);
    auto paren = what.rfind('(', pos);
    if (paren != std::string::npos && (start == std::string::npos || paren > start)) start = paren;
    std::string lib = what.substr(start == std::string::npos ? 0 : start + 1,
                                  pos - (start == std::string::npos ? 0 : start + 1));
    if (lib != file.string() && lib != file.filename().string())
      return fmt::format("missing library {} (needed by {}; install it or add its directory to "
                         "LD_LIBRARY_PATH)", lib, file.filename().string());
  }
  return fmt::format("dlopen failed: {}", what);
}

bool valid_name(const char* s) {
  if (!s || !*s || strnlen(s, 65) > 64) return false;
  for (const char* p = s; *p; ++p)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  return true;
}

struct LoadFailure {
  SkippedFile::Kind kind;
  std::string reason;
};

// The library as Boost.DLL keeps it: import_alias's function object holds a shared_ptr to it.
using EntryFunction = decltype(boost::dll::import_alias<const nibble_plugin_api*(uint32_t)>(
    std::declval<boost::dll::shared_library>(), ""));

std::shared_ptr<Backend> load_or_fail(const fs::path& path, LoadFailure& failure) {
  // 1. Read the symbol table without loading: a stranger's initializers must never run.
  try {
    boost::dll::library_info info(path, true);
    auto symbols = info.symbols();
    if (std::find(symbols.begin(), symbols.end(), NIBBLE_PLUGIN_ENTRY_NAME) == symbols.end()) {
      failure = {SkippedFile::Kind::not_a_plugin,
                 "does not export " NIBBLE_PLUGIN_ENTRY_NAME " (not a nibble plugin; not loaded)"};
      return nullptr;
    }
  } catch (const std::exception& e) {
    failure = {SkippedFile::Kind::not_a_plugin,
               fmt::format("not a loadable shared object ({}); not loaded", e.what())};
    return nullptr;
  }
  // 2. Load it, resolving every symbol now so that a missing one is a reason, not a later crash.
  boost::dll::shared_library lib;
  try {
    lib.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    failure = {SkippedFile::Kind::load_failed, explain_load_failure(path, e.what())};
    return nullptr;
  }
  // 3. Ask the entry for the API struct and check it before trusting any field.
  std::shared_ptr<EntryFunction> entry;
  try {
    entry = std::make_shared<EntryFunction>(
        boost::dll::import_alias<const nibble_plugin_api*(uint32_t)>(lib, NIBBLE_PLUGIN_ENTRY_NAME));
  } catch (const std::exception& e) {
    failure = {SkippedFile::Kind::refused, fmt::format("cannot import {}: {}", NIBBLE_PLUGIN_ENTRY_NAME, e.what())};
    return nullptr;
  }
  const nibble_plugin_api* api = (*entry)(NIBBLE_ABI_VERSION);
  if (!api) {
    failure = {SkippedFile::Kind::refused, "its entry returned NULL (it declined this host)"};
    return nullptr;
  }
  if (api->abi_version != NIBBLE_ABI_VERSION) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("ABI version {} but this host speaks version {}; rebuild the plugin "
                           "against nibble {}'s plugin_abi.h",
                           api->abi_version, NIBBLE_ABI_VERSION, NIBBLE_VERSION_STRING)};
    return nullptr;
  }
  if (api->struct_size < NIBBLE_PLUGIN_API_V1_SIZE) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("API struct of {} bytes is smaller than the {} bytes of ABI version {}; "
                           "the plugin was built against a broken or foreign header",
                           api->struct_size, NIBBLE_PLUGIN_API_V1_SIZE, NIBBLE_ABI_VERSION)};
    return nullptr;
  }
  if (!valid_name(api->name)) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("invalid plugin name '{}' (expected 1-64 characters of [a-z0-9_])", safe_str(api->name, "(null)"))};
    return nullptr;
  }
  std::vector<const char*> missing;
  if (!api->probe) missing.push_back("probe");
  if (!api->can_implement) missing.push_back("can_implement");
  if (!api->process_weights) missing.push_back("process_weights");
  if (!api->apply) missing.push_back("apply");
  if (!api->release) missing.push_back("release");
  if (!api->device_alloc) missing.push_back("device_alloc");
  if (!api->device_free) missing.push_back("device_free");
  if (!api->device_copy) missing.push_back("device_copy");
  if (!api->device_sync) missing.push_back("device_sync");
  if (!missing.empty()) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("plugin '{}' leaves required entry points NULL: {}", api->name, fmt::join(missing, ", "))};
    return nullptr;
  }
  if (api->caps.num_group_sizes > NIBBLE_MAX_GROUP_SIZES) {
    failure = {SkippedFile::Kind::refused,
               fmt::format("plugin '{}' declares {} group sizes (at most {})", api->name,
                           api->caps.num_group_sizes, NIBBLE_MAX_GROUP_SIZES)};
    return nullptr;
  }
  return std::make_shared<Backend>(std::static_pointer_cast<void>(entry), api, path);
}

bool world_writable(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX);
}

// A shared-object name: *.so, *.so.N[.N...], *.dylib, *.dll.
bool shared_object_name(std::string name) {
  if (name.ends_with(".dylib") || name.ends_with(".dll")) return true;
  // Strip the version suffixes (".1", ".1.2"), then look for ".so".
  while (true) {
    const auto dot = name.rfind('.');
    if (dot == std::string::npos || dot + 1 == name.size()) return false;
    if (name.compare(dot, std::string::npos, ".so") == 0) return dot > 0;
    if (name.find_first_not_of("0123456789", dot + 1) != std::string::npos) return false;
    name.resize(dot);
  }
}

// An ELF shared object of this machine's byte order: type ET_DYN without a PT_INTERP program
// header (a position-independent executable is ET_DYN too, but names an interpreter).
template <class Ehdr, class Phdr>
bool elf_shared_object(std::ifstream& in, const unsigned char* ident) {
  Ehdr eh;
  std::memcpy(&eh, ident, EI_NIDENT);
  if (!in.read(reinterpret_cast<char*>(&eh) + EI_NIDENT, sizeof eh - EI_NIDENT)) return false;
  if (eh.e_type != ET_DYN) return false;
  if (eh.e_phentsize != sizeof(Phdr) || eh.e_phnum > 4096) return false;
  in.seekg(std::streamoff(eh.e_phoff));
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Phdr ph;
    if (!in.read(reinterpret_cast<char*>(&ph), sizeof ph)) return false;
    if (ph.p_type == PT_INTERP) return false;
  }
  return true;
}

bool elf_shared_object(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char ident[EI_NIDENT] = {0};
  if (!in.read(reinterpret_cast<char*>(ident), EI_NIDENT)) return false;
  if (std::memcmp(ident, ELFMAG, SELFMAG) != 0) return false;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (ident[EI_DATA] != ELFDATA2LSB) return false;
#else
  if (ident[EI_DATA] != ELFDATA2MSB) return false;
#endif
  if (ident[EI_CLASS] == ELFCLASS64) return elf_shared_object<Elf64_Ehdr, Elf64_Phdr>(in, ident);
  if (ident[EI_CLASS] == ELFCLASS32) return elf_shared_object<Elf32_Ehdr, Elf32_Phdr>(in, ident);
  return false;
}

// Relative NIBBLE_PLUGIN_PATH entries become warnings (never searched); absolute ones are returned.
std::vector<fs::path> env_plugin_dirs(std::vector<std::string>& warnings) {
  std::vector<fs::path> dirs;
  const char* env = std::getenv("NIBBLE_PLUGIN_PATH");
  if (!env) return dirs;
  const std::string s = env;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    std::string entry = s.substr(start, end - start);
    if (!entry.empty()) {
      if (fs::path(entry).is_absolute()) dirs.emplace_back(entry);
      else warnings.push_back(fmt::format(
               "NIBBLE_PLUGIN_PATH entry '{}' ignored: plugin directories must be absolute paths "
               "(nibble never loads plugins relative to the working directory)", entry));
    }
    start = end + 1;
  }
  return dirs;
}

bool could_be_plugin(const fs::path& file) {
  return shared_object_name(file.filename().string()) || elf_shared_object(file);
}

}  // namespace

const char* skipped_kind_name(SkippedFile::Kind k) noexcept {
  switch (k) {
    case SkippedFile::Kind::not_a_plugin: return "not a plugin";
    case SkippedFile::Kind::load_failed: return "load failed";
    case SkippedFile::Kind::refused: return "refused";
    case SkippedFile::Kind::duplicate: return "duplicate";
    case SkippedFile::Kind::unsafe: return "unsafe";
  }
  return "skipped";
}

std::shared_ptr<Backend> Backend::load(const fs::path& path) {
  LoadFailure failure{};
  auto b = load_or_fail(path, failure);
  if (!b) throw Error(Errc::plugin, fmt::format("{}: {}", path.string(), failure.reason));
  return b;
}

fs::path Registry::default_plugin_dir() { return fs::path(NIBBLE_PLUGIN_DIR); }

std::shared_ptr<Registry> Registry::discover(const DiscoveryOptions& options) {
  auto reg = std::make_shared<Registry>();
  std::vector<fs::path> dirs;
  for (const auto& d : options.dirs) dirs.push_back(fs::absolute(d));
  if (options.use_env)
    for (auto& d : env_plugin_dirs(reg->warnings_)) dirs.push_back(std::move(d));
  if (options.use_default_dirs) {
    dirs.push_back(default_plugin_dir());
    // Relocatable installs: <dir of libnibble>/nibble/plugins.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&Registry::default_plugin_dir), &info) && info.dli_fname) {
      std::error_code ec;
      fs::path lib = fs::canonical(info.dli_fname, ec);
      if (!ec) dirs.push_back(lib.parent_path() / "nibble" / "plugins");
    }
  }
  std::set<fs::path> seen_dirs;
  for (const fs::path& d : dirs) {
    std::error_code ec;
    fs::path canon = fs::weakly_canonical(d, ec);
    if (ec) canon = d;
    if (!seen_dirs.insert(canon).second) continue;
    reg->dirs_.push_back(d);
    if (!fs::is_directory(d, ec)) continue;
    if (world_writable(d)) {
      reg->skipped_.push_back({d, SkippedFile::Kind::unsafe,
                               "directory is world-writable (anyone could plant a plugin); not searched"});
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(d, ec))
      if (e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      if (!could_be_plugin(f)) continue;  // executables, static libraries, data: not ours to list
      if (world_writable(f)) {
        reg->skipped_.push_back({f, SkippedFile::Kind::unsafe, "file is world-writable; not loaded"});
        continue;
      }
      LoadFailure failure{};
      auto b = load_or_fail(f, failure);
      if (!b) {
        reg->skipped_.push_back({f, failure.kind, failure.reason});
        continue;
      }
      if (auto prev = reg->find(b->name())) {
        reg->skipped_.push_back({f, SkippedFile::Kind::duplicate,
                                 fmt::format("a plugin named '{}' was already loaded from {}", b->name(),
                                             prev->path().string())});
        continue;
      }
      reg->backends_.push_back(std::move(b));
    }
  }
  return reg;
}

std::vector<std::string> Registry::search_remarks() const {
  std::vector<std::string> out = warnings_;
  for (const auto& s : skipped_)
    if (s.kind == SkippedFile::Kind::unsafe)
      out.push_back(fmt::format("{} {}: {}", fs::is_directory(s.path) ? "plugin directory" : "plugin file",
                                s.path.string(), s.reason));
  if (backends_.empty()) {
    std::vector<std::string> dirs;
    for (const auto& d : dirs_) dirs.push_back(d.string());
    out.push_back(dirs.empty() ? std::string("no plugin directories to search (none given, NIBBLE_PLUGIN_PATH "
                                             "unset or ignored, install directory not searched)")
                               : fmt::format("no plugins in the search path: {}", fmt::join(dirs, ":")));
  }
  return out;
}

std::shared_ptr<Backend> Registry::find(const std::string& name) const {
  for (const auto& b : backends_)
    if (b->name() == name) return b;
  return nullptr;
}

std::string Registry::backend_names() const {
  std::vector<std::string> names;
  for (const auto& b : backends_) names.push_back(b->name());
  return names.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(names, ", "));
}

std::string Registry::missing_backend(const std::string& name, const std::string& asked_by) const {
  std::vector<std::string> dirs;
  for (const auto& d : dirs_) dirs.push_back(d.string());
  std::string why;
  for (const auto& r : search_remarks()) why += fmt::format("; {}", r);
  return fmt::format("backend '{}'{} does not exist; backends found: {} (searched: {}){}", name,
                     asked_by.empty() ? "" : " (" + asked_by + ")", backend_names(), fmt::join(dirs, ":"), why);
}

}  // namespace nibble
