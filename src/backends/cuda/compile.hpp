// Everything the CUDA backend's compile() does short of touching a device: plan the
// graph, render its kernels, compile them with NVRTC for an architecture (private to
// src/backends/cuda). CI calls it with "sm_90" to compile every kernel the backend would
// generate, on machines without a GPU.
#pragma once

#include <string>

#include "backends/cuda/codegen.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "runtime/program.hpp"

namespace luminal::cudagen {

struct CompiledProgram {
  runtime::PlannedProgram planned;
  CudaSource source;
  Cubin cubin;
};

CompiledProgram compile_program(const Graph& graph, const std::string& arch, bool fuse);

}  // namespace luminal::cudagen
