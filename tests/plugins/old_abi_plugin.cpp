// A plugin built against the pre-version-1 ABI header (tests/abi/v0). A version-1 host must read
// its version, refuse it with a reason, and never call anything else in it.
#include <boost/dll/alias.hpp>
#include <cstdlib>

#include "nibble/plugin_abi.h"  // resolves to tests/abi/v0/nibble/plugin_abi.h

namespace {
int32_t matmul(const void*, const void*, void*, int64_t, int64_t, int64_t) {
  std::abort();  // a host that calls into an old plugin has already lost
}
const nibble_plugin_api kApi = {NIBBLE_ABI_VERSION, sizeof(nibble_plugin_api), "test_old_abi", matmul};
}  // namespace

extern "C" const nibble_plugin_api* old_entry(uint32_t) { return &kApi; }

BOOST_DLL_ALIAS(old_entry, nibble_plugin_entry)
