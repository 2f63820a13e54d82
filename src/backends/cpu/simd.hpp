// Which vector instructions the CPU kernels use (private to src/backends/cpu). Kernels
// are compiled for the baseline x86-64 ISA; their AVX2 versions carry LUM_AVX2 and run
// only where use_avx2() says so.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#define LUM_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace luminal::cpugen {

/// Whether the AVX2 kernels run: the CPU has AVX2, FMA and F16C, and LUMINAL_CPU_SIMD is
/// not "off" (which selects the portable kernels, for testing and comparison).
bool use_avx2();

}  // namespace luminal::cpugen
