// Everything the CUDA backend's compile() does short of touching a device: plan the
// graph, render its kernels, compile them with NVRTC for an architecture (private to
// src/backends/cuda). CI calls it with "sm_90" to compile every kernel the backend would
// generate, on machines without a GPU.
#pragma once

#include <future>
#include <string>
#include <vector>

#include "backends/cuda/codegen.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "runtime/program.hpp"

namespace luminal::cudagen {

struct CompiledProgram {
  runtime::PlannedProgram planned;
  CudaSource source;
  std::vector<Cubin> cubins;                        // by source part
  std::vector<std::future<void>> library_compiles;  // (compile_in_background's tasks)
};

/// What the CUDA backend asks of the e-graph stage (its rewrites and passes); `avoid` as
/// compiler::OptimizeOptions::avoid.
compiler::OptimizeOptions optimize_options(const std::vector<std::string>& avoid = {});

/// `library_in_background`: the library kernels the plan will load (library_sources) are
/// compiled on threads of their own while NVRTC compiles the generated kernels. `avoid`:
/// kernel kinds the extraction takes only where it must (compiler::OptimizeOptions).
CompiledProgram compile_program(const Graph& graph, const std::string& arch, bool fuse,
                                bool library_in_background = false,
                                const std::vector<std::string>& avoid = {});

/// The sources of the library modules whose kernels the planned graph's ops run on (the
/// one-row products, the quantised products of each block format, view copies); not the
/// attention kernels, whose specialisations follow the run's dims.
std::vector<std::string> library_sources(const Graph& g, const compiler::KernelPlan& plan);

}  // namespace luminal::cudagen
