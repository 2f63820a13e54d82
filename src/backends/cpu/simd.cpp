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

}  // namespace luminal::cpugen
