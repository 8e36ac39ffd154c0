// The nibble core API in one include.
#pragma once

#include "nibble/canonical.h"
#include "nibble/checkpoint.h"
#include "nibble/dtype.h"
#include "nibble/error.h"
#include "nibble/formats.h"
#include "nibble/plugin_abi.h"
#include "nibble/policy.h"
#include "nibble/quant_config.h"
#include "nibble/quantize.h"
#include "nibble/reference.h"
#include "nibble/registry.h"
#include "nibble/safetensors.h"
#include "nibble/shard.h"
#include "nibble/spec.h"
#include "nibble/tensor.h"
#include "nibble/version.h"
