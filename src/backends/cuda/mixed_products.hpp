// Products of f32 activations with a half-precision operand (private to
// src/backends/cuda), which neither cuBLASLt nor the same-type kernels take as they are:
// - QMatMul over weights kept in F16 or BF16 blocks (a half-precision checkpoint): one row
//   streams W through the one-row kernel at f32 precision for x; several rows round x to
//   W's type and take cuBLASLt's half-precision product with f32 accumulation and output,
//   as a half-precision model computes (widening W instead would read and write it twice
//   and run the product on f32 units, an order of magnitude slower for a prompt);
// - MatMul of f32 a by an f16 or bf16 b read where it lies (a half-precision KV cache
//   under attention that is not fused): one row as above; several rows widen b, exactly,
//   into f32 for the f32 product.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/gemv.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// The half-precision type of a QMatMul's weights stored as ggml type `format`, if they
/// are (F16 or BF16).
std::optional<DType> half_weight_type(uint32_t format);

class MixedProducts {
 public:
  MixedProducts(const Device& device, Gemv& gemv, Gemm& gemm, ViewCopy& copy)
      : device_(device), gemv_(gemv), gemm_(gemm), copy_(copy) {}

  /// y[batch..., M, N] (f32, contiguous) = x W^T, where `x` is the QMatMul's
  /// [batch..., M, K, N] operand view over f32 device data and `w` the [N, K] weight's
  /// view over its blocks of ggml type `format`; plus `residual` (y's shape, f32) where
  /// given. False, with nothing written, for a format or layout not handled here: the
  /// caller runs the op another way.
  bool qmatmul(uint32_t format, const ConcreteView& x, const void* x_data, const ConcreteView& w,
               const void* w_data, void* y, const float* residual = nullptr);

  /// QMatMuls of the same activations x (one row) by several half-precision weights of
  /// ggml type `format`, each GemvMatrix a weight's [N, K] view, its data and its output,
  /// as one launch. False, with nothing written, where one launch cannot take them all.
  bool qmatmul_shared(uint32_t format, const ConcreteView& x, const void* x_data,
                      const std::vector<GemvMatrix>& weights);

  /// c[batch..., M, N] (f32, contiguous) = a b for MatMul operand views, a over f32 and b
  /// over `b_type` (f16 or bf16) device data. False, with nothing written, where the
  /// views are not ones these kernels read.
  bool matmul(const ConcreteView& a, const void* a_data, const ConcreteView& b, const void* b_data,
              DType b_type, void* c);

 private:
  void* scratch(size_t bytes);

  const Device& device_;
  Gemv& gemv_;
  Gemm& gemm_;
  ViewCopy& copy_;
  DeviceBuffer scratch_;                     // the converted operand, grown as needed
  std::vector<GemvMatrix> shared_operands_;  // qmatmul_shared's, kept for their capacity
  ConcreteView w_operand_;                   // qmatmul's, the same
};

}  // namespace luminal::cudagen
