// Which vector instructions the CPU kernels use (private to src/backends/cpu). Kernels
// are compiled for the baseline x86-64 ISA; their AVX2 and AVX-512 versions carry
// LUM_AVX2 / LUM_AVX512 and run only where use_avx2() / use_avx512() say so.
#pragma once

#include <cstdint>

#include "luminal/dtype.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define LUM_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LUM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif

namespace luminal::cpugen {

#if defined(__x86_64__)
/// The sum of a vector's eight lanes.
LUM_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// Eight f16 / bf16 bit patterns from p, as floats.
LUM_AVX2 inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
LUM_AVX2 inline __m256 load8_bf16(const uint16_t* p) {
  // A bf16 value is the top half of an f32's bits.
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

/// Eight values from p as floats, for kernels templated on an f32 or f16 operand
/// (uint16_t: f16 bit patterns, as in a half-precision KV cache).
LUM_AVX2 inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
LUM_AVX2 inline __m256 load8(const uint16_t* p) {
  return load8_f16(p);
}
#endif

/// One value of such an operand as a float.
inline float load1(const float* p) {
  return *p;
}
inline float load1(const uint16_t* p) {
  return f16_bits_to_float(*p);
}

/// Reads LUMINAL_CPU_SIMD again (the CPU backend does at every compile). The kernels ask
/// use_avx2() a few times per product, and a decode step's weight traffic evicts the
/// environment strings that getenv would scan each time.
void reread_simd_env();

/// Whether the AVX2 kernels run: the CPU has AVX2, FMA and F16C, and LUMINAL_CPU_SIMD is
/// not "off" (which selects the portable kernels, for testing and comparison).
bool use_avx2();

/// Whether the AVX-512 kernels run: use_avx2(), the CPU has AVX-512 F, BW, VL and VNNI,
/// and LUMINAL_CPU_SIMD is not "avx2" (which keeps such a CPU on the AVX2 kernels).
bool use_avx512();

/// sum_i x[i] * y[i]; `avx2` is use_avx2(), asked once per product rather than per dot.
float dot_f32(const float* x, const float* y, int64_t n, bool avx2);

/// y[i] += alpha * x[i] for i < n.
void axpy(float alpha, const float* x, float* y, int64_t n, bool avx2);

/// sum_i w[i] * y[i] with w's f16 (dot_f16) or bf16 (dot_bf16) bit patterns widened as
/// they are loaded.
float dot_f16(const uint16_t* w, const float* y, int64_t n, bool avx2);
float dot_bf16(const uint16_t* w, const float* y, int64_t n, bool avx2);

/// out[i] = p[i] for i < n, p holding f16 (widen_f16) or bf16 (widen_bf16) bit patterns.
void widen_f16(const uint16_t* p, int64_t n, float* out, bool avx2);
void widen_bf16(const uint16_t* p, int64_t n, float* out, bool avx2);

}  // namespace luminal::cpugen
