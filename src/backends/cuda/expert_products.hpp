// ExpertMatMul on the GPU (luminal/expert_matmul_op.hpp; private to src/backends/cuda):
// each (row, slot) pair's expert id is read on the device by the product kernel, which
// then streams only that expert's matrix. Block-format experts run through QuantProducts'
// kernels (the integer ones for Q8_0/Q4_K/Q5_K/Q6_K); f32, f16 and bf16 experts through
// a warp-per-row kernel of this file's own, compiled by NVRTC on first use.
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "backends/cuda/quant_products.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// The float kernels' CUDA source (CI compiles it for sm_90).
std::string expert_products_source();

class ExpertProducts {
 public:
  ExpertProducts(const Device& device, QuantProducts& quant, ViewCopy& copy)
      : device_(device), quant_(quant), copy_(copy) {}

  /// y ([rows, slots, n], f32) for x ([rows, 1 or slots, k] f32), the experts ([count,
  /// n, k], whole: `format` a ggml type, F32/F16/BF16 for plain storage) and ids ([rows,
  /// slots], i32 or i64), all views over device memory. False, launching nothing, where a
  /// kernel cannot read them (the caller runs the op elsewhere).
  bool run(const ConcreteView& x, const void* x_data, const ConcreteView& w, const void* w_data,
           uint32_t format, const ConcreteView& ids, const void* ids_data, DType ids_type,
           void* y);

 private:
  const Device& device_;
  QuantProducts& quant_;
  ViewCopy& copy_;
  std::unique_ptr<Module> module_;  // the float kernels, loaded on first use
  DeviceBuffer rows_;               // x packed where its view is not dense
};

}  // namespace luminal::cudagen
