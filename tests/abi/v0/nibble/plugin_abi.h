/* The plugin ABI as it was before version 1 (kept for the ABI-compatibility test): the same two
 * header fields, then a different, smaller layout. A plugin built against this header must be
 * refused by a version-1 host with a reason, never called. Do not use for anything else. */
#ifndef NIBBLE_PLUGIN_ABI_V0_H
#define NIBBLE_PLUGIN_ABI_V0_H

#include <stddef.h>
#include <stdint.h>

#define NIBBLE_ABI_VERSION 0u

typedef struct nibble_plugin_api {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* name;
  int32_t (*matmul)(const void* w, const void* x, void* y, int64_t m, int64_t k, int64_t n);
} nibble_plugin_api;

#endif
