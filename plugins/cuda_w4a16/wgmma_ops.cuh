// wgmma.mma_async in its RS form (A from registers, B from shared memory through a descriptor),
// f32 accumulators, one struct per (dtype, N): m64nNk16 with N / 2 accumulators per thread. Inline
// PTX takes no arrays, so the operand lists are spelled out once per accumulator count below and
// every instance is stamped from them; every instance accumulates (scale-d true), A and B
// unscaled, B K-major.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace nibble::cuda {
namespace {

template <class T, int N>
struct Wgmma;

// The PTX operand list of an m64nNk16 with `n` accumulators (%0 .. %n-1), the A registers, the
// descriptor, and the predicate operand that sets scale-d.
#define NIBBLE_WG_OPERANDS_8 \
    "{%0, %1, %2, %3, %4, %5, %6, %7}, " \
    "{%8, %9, %10, %11}, %12, p, 1, 1, 0;"
#define NIBBLE_WG_PRED_8 "%13"
#define NIBBLE_WG_OPERANDS_16 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, " \
    "{%16, %17, %18, %19}, %20, p, 1, 1, 0;"
#define NIBBLE_WG_PRED_16 "%21"
#define NIBBLE_WG_OPERANDS_32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, " \
    "{%32, %33, %34, %35}, %36, p, 1, 1, 0;"
#define NIBBLE_WG_PRED_32 "%37"
#define NIBBLE_WG_OPERANDS_64 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, " \
    "{%64, %65, %66, %67}, %68, p, 1, 1, 0;"
#define NIBBLE_WG_PRED_64 "%69"
#define NIBBLE_WG_OPERANDS_128 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31," \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47," \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63," \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79," \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95," \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111," \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, " \
    "{%128, %129, %130, %131}, %132, p, 1, 1, 0;"
#define NIBBLE_WG_PRED_128 "%133"

// The accumulators as "+f" operands.
#define NIBBLE_WG_D8(b) \
  "+f"(d[b]), "+f"(d[b + 1]), "+f"(d[b + 2]), "+f"(d[b + 3]), "+f"(d[b + 4]), "+f"(d[b + 5]), "+f"(d[b + 6]), "+f"(d[b + 7])
#define NIBBLE_WG_D16(b) NIBBLE_WG_D8(b), NIBBLE_WG_D8(b + 8)
#define NIBBLE_WG_D32(b) NIBBLE_WG_D16(b), NIBBLE_WG_D16(b + 16)
#define NIBBLE_WG_D64(b) NIBBLE_WG_D32(b), NIBBLE_WG_D32(b + 32)
#define NIBBLE_WG_D128(b) NIBBLE_WG_D64(b), NIBBLE_WG_D64(b + 64)

#define NIBBLE_WGMMA(T, PTX_T, N, ACC)                                                                \
  template <>                                                                                         \
  struct Wgmma<T, N> {                                                                                \
    __device__ __forceinline__ static void mma(float (&d)[ACC], const uint32_t (&a)[4], uint64_t desc) { \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " NIBBLE_WG_PRED_##ACC ", 0;\n"                 \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_T "." PTX_T " "              \
                   NIBBLE_WG_OPERANDS_##ACC "\n}\n"                                                   \
                   : NIBBLE_WG_D##ACC(0)                                                              \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(1));                  \
    }                                                                                                 \
  };

NIBBLE_WGMMA(__half, "f16", 16, 8)
NIBBLE_WGMMA(__half, "f16", 32, 16)
NIBBLE_WGMMA(__half, "f16", 64, 32)
NIBBLE_WGMMA(__half, "f16", 128, 64)
NIBBLE_WGMMA(__half, "f16", 256, 128)
NIBBLE_WGMMA(__nv_bfloat16, "bf16", 16, 8)
NIBBLE_WGMMA(__nv_bfloat16, "bf16", 32, 16)
NIBBLE_WGMMA(__nv_bfloat16, "bf16", 64, 32)
NIBBLE_WGMMA(__nv_bfloat16, "bf16", 128, 64)
NIBBLE_WGMMA(__nv_bfloat16, "bf16", 256, 128)

#undef NIBBLE_WGMMA
#undef NIBBLE_WG_D128
#undef NIBBLE_WG_D64
#undef NIBBLE_WG_D32
#undef NIBBLE_WG_D16
#undef NIBBLE_WG_D8

}  // namespace
}  // namespace nibble::cuda
