// Switches read from the environment by every backend (LUMINAL_LOG, LUMINAL_DUMP, ...).
#pragma once

#include <cstdlib>
#include <cstring>

namespace luminal::runtime {

/// Whether environment variable `var` is set and contains `word` (LUMINAL_LOG=info,
/// LUMINAL_DUMP=hlir,kernels, ...).
inline bool env_has(const char* var, const char* word) {
  const char* v = std::getenv(var);
  return v && std::strstr(v, word);
}

}  // namespace luminal::runtime
