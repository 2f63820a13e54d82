// x W^T for a QMatMul on the GPU (private to src/backends/cuda): f32 activations against
// a weight kept on the device in its stored block format. F16 and BF16 weights (an HF
// checkpoint's or a GGUF's half-precision matrices): one row streams W through the
// one-row kernel at f32 precision for x; several rows round x to W's type and take
// cuBLASLt's half-precision product with f32 accumulation and output (what a bf16
// model's products do). Other formats are not read here yet.
#pragma once

#include <cstdint>

#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/gemv.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

class QuantizedProduct {
 public:
  QuantizedProduct(const Device& device, Gemv& gemv, Gemm& gemm, ViewCopy& copy)
      : device_(device), gemv_(gemv), gemm_(gemm), copy_(copy) {}

  /// y[batch..., M, N] (f32, contiguous) = x W^T, where `x` is the QMatMul's
  /// [batch..., M, K, N] operand view over f32 device data and `w` the [N, K] weight's
  /// view over its blocks of ggml type `format`. False, with nothing written, for a
  /// format or layout not handled here: the caller runs the op another way.
  bool run(uint32_t format, const ConcreteView& x, const void* x_data, const ConcreteView& w,
           const void* w_data, void* y);

 private:
  const Device& device_;
  Gemv& gemv_;
  Gemm& gemm_;
  ViewCopy& copy_;
  DeviceBuffer rounded_;  // x in W's type, grown as needed
};

}  // namespace luminal::cudagen
