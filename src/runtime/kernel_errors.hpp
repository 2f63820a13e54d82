// Errors a generated kernel records while it runs (an out-of-range Gather or Scatter
// index, an integer division by zero) as three integers: code, value, position. Every
// backend's kernels write them the same way (lum_fail in the prelude) and every backend
// raises them through here.
#pragma once

#include <cstdint>

#include "luminal/compiler/plan.hpp"

namespace luminal::runtime {

/// Raises the luminal::Error `err` (err[0] != 0) describes for kernel `k` of `g`.
[[noreturn]] void raise_kernel_error(const Graph& g, const compiler::Kernel& k, const int64_t* err);

}  // namespace luminal::runtime
