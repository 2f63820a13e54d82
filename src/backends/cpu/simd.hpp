// Which vector instructions the CPU kernels use (private to src/backends/cpu). Kernels
// are compiled for the baseline x86-64 ISA; their AVX2 and AVX-512 versions carry
// LUM_AVX2 / LUM_AVX512 and run only where use_avx2() / use_avx512() say so.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#define LUM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LUM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif

namespace luminal::cpugen {

/// Whether the AVX2 kernels run: the CPU has AVX2, FMA and F16C, and LUMINAL_CPU_SIMD is
/// not "off" (which selects the portable kernels, for testing and comparison).
bool use_avx2();

/// Whether the AVX-512 kernels run: use_avx2(), the CPU has AVX-512 F, BW, VL and VNNI,
/// and LUMINAL_CPU_SIMD is not "avx2" (which keeps such a CPU on the AVX2 kernels).
bool use_avx512();

/// sum_i x[i] * y[i]; `avx2` is use_avx2(), asked once per product rather than per dot.
float dot_f32(const float* x, const float* y, int64_t n, bool avx2);

/// sum_i w[i] * y[i] with w's f16 (dot_f16) or bf16 (dot_bf16) bit patterns widened as
/// they are loaded.
float dot_f16(const uint16_t* w, const float* y, int64_t n, bool avx2);
float dot_bf16(const uint16_t* w, const float* y, int64_t n, bool avx2);

/// out[i] = p[i] for i < n, p holding f16 (widen_f16) or bf16 (widen_bf16) bit patterns.
void widen_f16(const uint16_t* p, int64_t n, float* out, bool avx2);
void widen_bf16(const uint16_t* p, int64_t n, float* out, bool avx2);

}  // namespace luminal::cpugen
