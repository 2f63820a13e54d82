#include "backends/cpu/simd.hpp"

#include <cstdlib>
#include <cstring>

namespace luminal::cpugen {

bool use_avx2() {
#if defined(__x86_64__)
  static const bool cpu = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  const char* env = std::getenv("LUMINAL_CPU_SIMD");
  return cpu && !(env && std::strcmp(env, "off") == 0);
#else
  return false;
#endif
}

bool use_avx512() {
#if defined(__x86_64__)
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  const char* env = std::getenv("LUMINAL_CPU_SIMD");
  return cpu && use_avx2() && !(env && std::strcmp(env, "avx2") == 0);
#else
  return false;
#endif
}

#if defined(__x86_64__)
namespace {

LUM_AVX2 float dot_f32_avx2(const float* x, const float* y, int64_t n) {
  // Four accumulators: enough independent FMAs in flight to hide their latency.
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u)
      acc[u] =
          _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * u), _mm256_loadu_ps(y + i + 8 * u), acc[u]);
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
  const __m256 v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  float lanes[4];
  _mm_storeu_ps(lanes, h);
  float sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

}  // namespace
#endif

float dot_f32(const float* x, const float* y, int64_t n, bool avx2) {
#if defined(__x86_64__)
  if (avx2) return dot_f32_avx2(x, y, n);
#endif
  (void)avx2;
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

}  // namespace luminal::cpugen
