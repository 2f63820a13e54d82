// Which computed values a run holds when: each kernel's output gets a slot (its kernel
// index), and after kernel k runs, the slots no later kernel reads are released. Both
// backends walk these flat arrays in kernel order; the buffer pools behind them reuse
// what is released.
#pragma once

#include <cstdint>
#include <vector>

#include "luminal/compiler/plan.hpp"

namespace luminal::runtime {

struct Liveness {
  std::vector<int32_t> slot_of;       // by node: the kernel computing it, or -1 (user input)
  std::vector<uint32_t> frees_begin;  // by kernel, into `frees`; one extra entry at the end
  std::vector<int32_t> frees;         // slots released after each kernel, in kernel order
};

/// Graph outputs are never released: the run hands them to the caller.
Liveness plan_liveness(const Graph& g, const compiler::KernelPlan& plan);

}  // namespace luminal::runtime
