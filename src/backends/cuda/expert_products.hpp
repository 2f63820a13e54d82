// ExpertMatMul on the GPU (luminal/expert_matmul_op.hpp; private to src/backends/cuda):
// each (row, slot) pair's expert id is read on the device by the product kernel, which
// then streams only that expert's matrix. Block-format experts run through QuantProducts'
// kernels (the integer ones for Q8_0/Q4_K/Q5_K/Q6_K); f32, f16 and bf16 experts through
// a warp-per-row kernel of this file's own, compiled by NVRTC on first use.
#pragma once

#include <memory>
#include <span>
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

/// Whether stacks stored in ggml type `format` have a kernel: F32, F16, BF16 or a block
/// format QuantProducts decodes.
bool expert_products_support(uint32_t format);

class ExpertProducts {
 public:
  ExpertProducts(const Device& device, QuantProducts& quant, ViewCopy& copy)
      : device_(device), quant_(quant), copy_(copy) {}

  /// y ([rows, slots, n_0 + n_1 + ...], f32) for x ([rows, 1 or slots, k] f32), ids
  /// ([rows, slots], i32 or i64) and stacks of experts ([count, n_i, k], each whole, in
  /// ggml type formats[i]: F32/F16/BF16 for plain storage), all views over device memory:
  /// stacks of one format as one launch. False, launching nothing, where a kernel cannot
  /// read them (the caller runs the op elsewhere).
  bool run(const ConcreteView& x, const void* x_data, const ConcreteView& ids, const void* ids_data,
           DType ids_type, std::span<const ConcreteView> stacks,
           std::span<const void* const> stack_data, std::span<const uint32_t> formats, void* y);

 private:
  // Stacks of f32, f16 or bf16 (`format`) experts as one launch of this file's kernel.
  bool run_float(uint32_t format, const Experts& experts, const float* x, void* y);

  const Device& device_;
  QuantProducts& quant_;
  ViewCopy& copy_;
  std::unique_ptr<Module> module_;  // the float kernels, loaded on first use
  DeviceBuffer rows_;               // x packed where its view is not dense
};

}  // namespace luminal::cudagen
