// C++ source generation for the CPU backend (private to src/backends/cpu).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/compiler/plan.hpp"

namespace luminal::cpugen {

/// One generated translation unit for a whole graph: every kernel is
///   extern "C" void lum_kernel_<k>(void** bufs, const int64_t* dims, int64_t* err)
/// with bufs[0] the output and bufs[1..] the kernel's reads in plan order.
struct GeneratedSource {
  std::string code;
  std::vector<std::string> dims;  // symbolic dimension names, in `dims[]` order
};

GeneratedSource generate_source(const Graph& g, const compiler::KernelPlan& plan);

/// Generated kernels split their loops over the threads above this many output elements
/// (at or below it, a parallel region costs more than it saves).
constexpr int64_t kParallelElements = 16384;

/// Helpers included at the top of every generated file.
std::string_view kernel_prelude();

}  // namespace luminal::cpugen
