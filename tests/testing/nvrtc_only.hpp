// The CUDA backend's code generation where no GPU is needed: every kernel it would launch
// is rendered and compiled by NVRTC for Hopper (sm_90), then the graph runs on the
// reference interpreter. CI has no GPU; this keeps every generated kernel compiling.
#pragma once

#include "backends/cuda/compile.hpp"
#include "luminal/luminal.hpp"

namespace luminal::testing {

class NvrtcOnly final : public Backend {
 public:
  std::string name() const override { return "cuda-nvrtc"; }
  std::unique_ptr<Executable> compile(const Graph& graph) const override {
    cudagen::compile_program(graph, "sm_90", true);
    return reference().compile(graph);
  }
};

}  // namespace luminal::testing
