// Products with one row, y[N] = x[K] W^T with W[N, K] read along K: a decode step's
// every projection (private to src/backends/cuda). They are bound by reading W, which
// cuBLASLt's general kernels do short of the bandwidth; this kernel streams W with
// 16-byte loads, four warps per output. Its source is compiled by NVRTC on first use, like
// the generated kernels (cached, no nvcc at build time).
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/device.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/dtype.hpp"
#include "luminal/view.hpp"

namespace luminal::cudagen {

/// The kernels' CUDA source (compiled on first use; CI compiles it for sm_90).
std::string gemv_source();

class Gemv {
 public:
  explicit Gemv(const Device& device) : device_(device) {}

  /// c[1, N] = a[1, K] b[K, N] for MatMul operand views a, b ([batch..., M, K, N], all
  /// batch dims 1, M = 1) over device buffers, a and c of `a_type`, b of `b_type`: both
  /// f32, f16 or bf16, or f32 a over f16 or bf16 b (a QMatMul's half-precision weights);
  /// when b is a matrix read along K with 16-byte aligned rows and a is contiguous.
  /// False otherwise: the caller uses the general product.
  bool run(const ConcreteView& a, const void* a_data, DType a_type, const ConcreteView& b,
           const void* b_data, DType b_type, void* c_data);

 private:
  const Device& device_;
  std::unique_ptr<Module> module_;  // loaded on first use
};

}  // namespace luminal::cudagen
