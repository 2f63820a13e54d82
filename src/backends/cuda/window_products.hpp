// WindowMatMul on the GPU (compiler::WindowMatMulOp; private to src/backends/cuda): a
// product whose left operand is gathered through a strided view, a convolution's windows
// read in place of its im2col columns. Each block multiplies a 128-row tile of the left
// operand by a 64- or 128-column tile of the right on tensor cores (f16 or bf16, f32
// accumulation): a thread gathers one row of each 32-wide slice of the sum, its offset
// worked out once (the rows' dims) plus the slice's column offsets (the sum's dims), shared
// by the block. The alternative, the columns copied out and multiplied by cuBLASLt, is
// kept as a candidate: each new shape's way is searched (runtime/search.hpp). Compiled by
// NVRTC on first use.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"
#include "runtime/search.hpp"

namespace luminal::cudagen {

/// The kernels' CUDA source (CI compiles it for sm_90).
std::string window_products_source();

class WindowProducts {
 public:
  WindowProducts(const Device& device, runtime::Searcher& searcher, Gemm& gemm, ViewCopy& copy)
      : device_(device), searcher_(searcher), gemm_(gemm), copy_(copy) {}

  /// out[batch..., M, N] = a b for a WindowMatMul's operands of type `t` (f16 or bf16):
  /// `a` [batch..., R.., C.., N] with `row_dims` R dims, `b` [batch..., M, K, N]. False,
  /// with nothing written, where the views do not fit the kernels (padding, more dims
  /// than they take).
  bool run(const ConcreteView& a, const void* a_data, const ConcreteView& b, const void* b_data,
           DType t, size_t row_dims, void* out);

 private:
  const Device& device_;
  runtime::Searcher& searcher_;
  Gemm& gemm_;
  ViewCopy& copy_;
  std::unique_ptr<Module> module_;     // loaded on first use
  DeviceBuffer columns_;               // the copied columns, where that way is taken
  std::map<std::string, size_t> way_;  // signature -> the way taken (an index of kWays)
};

}  // namespace luminal::cudagen
