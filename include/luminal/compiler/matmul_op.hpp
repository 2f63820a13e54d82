// MatMul: the kernel the compiler selects for SumReduce(Mul(a_view, b_view)) over the
// shapes hlops' matmul produces: both views have shape [batch..., M, K, N], `a` is
// broadcast along N and `b` along M, and the sum runs over K. Its inputs are those two
// edges unchanged, so its reference semantics are exactly the sum of products.
#pragma once

#include "luminal/custom_op.hpp"
#include "luminal/graph.hpp"

namespace luminal::compiler {

class MatMulOp final : public CustomOp {
 public:
  std::string name() const override { return "MatMul"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

/// True if SumReduce over `axis` of Mul(a_view, b_view) is a GEMM a BLAS can run: f32,
/// rank >= 3 with the sum over dim rank-2, `a` broadcast along the last dim and `b`
/// along dim rank-3, no padding, and unit stride along one dim of each matrix.
bool is_gemm(int axis, const View& a, const View& b, DType dtype);

}  // namespace luminal::compiler
