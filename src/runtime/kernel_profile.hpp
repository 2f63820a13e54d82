// LUMINAL_PROFILE=1: time spent per kernel, summed over runs, printed as a table when a
// compiled program is destroyed. Every backend fills one and prints it through here.
#pragma once

#include <string>
#include <vector>

#include "luminal/compiler/plan.hpp"

namespace luminal::runtime {

struct KernelProfile {
  std::vector<double> kernels;  // seconds, by kernel
  double run_seconds = 0;       // whole runs, kernels and what the executor does between
  size_t runs = 0;
};

/// Prints `p` to stderr under `title` ("dims as bound", "seq = 1"): kernels of the same
/// op and shape summed into one line (a transformer's layers show up as one line per
/// kind of kernel), largest first.
void print_kernel_profile(const Graph& g, const compiler::KernelPlan& plan,
                          const std::string& title, const KernelProfile& p);

}  // namespace luminal::runtime
