// CUDA C++ generation for the CUDA backend (private to src/backends/cuda). Each planned
// kernel becomes
//   extern "C" __global__ void lum_kernel_<k>(OUT* out, const IN* in1, ..., int64_t* err,
//                                             LumDims dims)
// over a grid-stride loop, so any grid size covers any bound dims: elementwise kernels
// give each thread output elements, reductions give each warp output elements, and a
// Scatter is a copy kernel followed by an ordered one (lum_kernel_<k>_scatter).
#pragma once

#include <string>
#include <vector>

#include "luminal/compiler/plan.hpp"

namespace luminal::cudagen {

enum class KernelShape { Map, Reduce, Scatter, Library };

struct KernelLaunch {
  KernelShape shape = KernelShape::Library;
  std::string function;          // the __global__ function (identical kernels share one)
  std::string scatter_function;  // a Scatter's ordered second kernel
  Expr threads;          // threads the grid-stride loop wants: output elements (x32 for Reduce)
};

struct CudaSource {
  std::string code;
  std::vector<std::string> dims;       // symbolic dims, in LumDims order
  std::vector<KernelLaunch> launches;  // by kernel
};

CudaSource generate_cuda_source(const Graph& g, const compiler::KernelPlan& plan);

/// Helpers included at the top of every generated file, before runtime::scalar_prelude.
std::string_view cuda_prelude();

}  // namespace luminal::cudagen
