// WindowMatMul on the GPU (compiler::WindowMatMulOp; private to src/backends/cuda): a
// product whose left operand, the image, is gathered through a strided view: a
// convolution's windows read in place of its im2col columns. A block multiplies a tile of
// rows by a tile of columns of the output over slices of the sum on tensor cores (f16 or
// bf16, f32 accumulation); the rows are the image's pixels, or, for an output stored
// transposed (channels before pixels, as NCHW has them), the weight's channels. An
// element's offset is its row's (the rows' dims, worked out once) plus its column's in
// the slice (the sum's dims). Each new shape's way is searched (runtime/search.hpp) among
// the kernels' tile shapes, the product transposed after, the columns copied out and
// multiplied by cuBLASLt, and cuDNN's convolutions where the windows are a 2-D
// convolution's (cudnn_convolutions.hpp). Compiled by NVRTC on first use.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/cudnn_convolutions.hpp"
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
      : device_(device), searcher_(searcher), gemm_(gemm), copy_(copy), cudnn_(device) {}

  /// out[batch..., M, N] = a b (`transposed`: its transpose, out[batch..., N, M]) for a
  /// WindowMatMul's operands of type `t` (f16 or bf16): `a` [batch..., R.., C.., N] with
  /// `row_dims` R dims, `b` [batch..., M, K, N]. False, with nothing written, where the
  /// views do not fit the kernels (padding, more dims than they take).
  bool run(const ConcreteView& a, const void* a_data, const ConcreteView& b, const void* b_data,
           DType t, size_t row_dims, bool transposed, void* out);

 private:
  const Device& device_;
  runtime::Searcher& searcher_;
  Gemm& gemm_;
  ViewCopy& copy_;
  CudnnConvolutions cudnn_;
  std::unique_ptr<Module> module_;  // loaded on first use
  DeviceBuffer columns_;            // the copied columns, where that way is taken
  DeviceBuffer unflipped_;          // an output asked transposed, before it is
  // A way (window_products.cpp), whether an output asked transposed is stored as the
  // product comes, in scratch, and transposed after, and cuDNN's algorithm (its way's).
  struct Choice {
    size_t way;
    bool after;
    int algorithm = -1;
  };
  std::map<std::string, Choice> way_;  // signature -> the way taken
};

}  // namespace luminal::cudagen
