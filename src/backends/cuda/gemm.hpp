// Matrix products through cuBLASLt (private to src/backends/cuda): the MatMul kernel's
// [batch..., M, K, N] operand views mapped onto cuBLASLt's column-major, strided-batch
// layouts, with f32 accumulation for every input type. Of the algorithms cuBLASLt's
// heuristic offers for a shape, the fastest on the device is timed and kept.
#pragma once

#include <cublasLt.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/device.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

class Gemm {
 public:
  explicit Gemm(const Device& device);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  /// c[batch..., M, N] (contiguous) = sum over K of a * b, where `a` and `b` are MatMul
  /// operand views over device buffers of `dtype` (f32, f16 or bf16; c has it too).
  /// False when the views are not strided matrices cuBLASLt can read (padding, no unit
  /// stride along either matrix dim): the caller computes the product another way.
  bool run(const ConcreteView& a, const void* a_data, const ConcreteView& b, const void* b_data,
           DType dtype, void* c_data);

 private:
  struct Plan;
  void call(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const ConcreteView& a,
            const void* a_data, const ConcreteView& b, const void* b_data, void* c_data,
            const std::vector<int64_t>& count, const std::vector<int64_t>& sa,
            const std::vector<int64_t>& sb, const std::vector<int64_t>& sc, size_t esize);
  cublasLtMatmulAlgo_t fastest(const cublasLtMatmulHeuristicResult_t* candidates, int count,
                               const std::function<void(const cublasLtMatmulAlgo_t&)>& run);

  const Device& device_;
  cublasLtHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
  std::map<std::string, Plan*> plans_;  // by the call's shapes, strides, types, alignments
};

}  // namespace luminal::cudagen
