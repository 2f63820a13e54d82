// CUDA C++ generation for the CUDA backend (private to src/backends/cuda). Each planned
// kernel becomes
//   extern "C" __global__ void lum_kernel_<k>(OUT* out, const IN* in1, ..., int64_t* err,
//                                             const LumDims* dims)
// over a grid-stride loop, so any grid size covers any bound dims: elementwise kernels
// give each thread output elements, reductions give each warp output elements, and a
// Scatter is a copy kernel followed by an ordered one (lum_kernel_<k>_scatter). A chain
// of reductions over the same rows, perhaps closed by an elementwise kernel over their
// elements (softmax, RMSNorm, LayerNorm), is one function in which each block takes
// rows through every member in turn (a row group): its parameters are each member's
// output and reads in order, then the first member's error slot and the dims. The dims
// are read from device memory, not passed by value: a decode step's kernels then keep
// their parameters while the context length moves on, and its recorded CUDA graph has
// fewer nodes to update (stream_recorder.hpp).
#pragma once

#include <string>
#include <vector>

#include "luminal/compiler/plan.hpp"

namespace luminal::cudagen {

/// Threads per block the generated functions are compiled for at most.
constexpr int kMaxBlock = 256;

// InRowGroup: computed by the row group launched at a later kernel (Rows).
enum class KernelShape { Map, Reduce, Scatter, Rows, InRowGroup, Library };

struct KernelLaunch {
  KernelShape shape = KernelShape::Library;
  std::string function;          // the __global__ function (identical kernels share one)
  std::string scatter_function;  // a Scatter's ordered second kernel
  // Map: output elements; Reduce: output elements x 32 (a warp each); Rows: rows (a block
  // each).
  Expr threads;
  size_t group_begin = 0;    // Rows: the group's first kernel (this one is its last)
  Expr row_threads;          // Rows: threads a row keeps busy (its elements / those a step)
  int64_t shared_bytes = 0;  // Rows: the row cache's dynamic shared memory
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
