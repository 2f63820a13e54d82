// Matrix products as broadcast-multiply-sum, the pattern the compiler turns into GEMM.
#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

Tensor Tensor::matmul(const Tensor& other) const {
  LUM_CHECK(rank() >= 1 && other.rank() >= 1)
      << "matmul: operands must have at least one dimension, got " << to_string(shape()) << " and "
      << to_string(other.shape());
  // 1-D operands become a row (left) or a column (right) and lose it again at the end.
  const Tensor a = rank() == 1 ? unsqueeze(0) : *this;
  const Tensor b = other.rank() == 1 ? other.unsqueeze(1) : other;
  const Expr k = a.shape().back();
  LUM_CHECK(k == b.shape()[b.rank() - 2])
      << "matmul: inner dimensions differ: " << to_string(shape()) << " @ "
      << to_string(other.shape());
  // a [..., M, K, 1] * b [..., 1, K, N] summed over K.
  Tensor out = binary(Op::Mul, a.unsqueeze(-1), b.unsqueeze(-3)).sum({-2});
  if (other.rank() == 1) out = out.squeeze(-1);
  if (rank() == 1) out = out.squeeze(-2 + (other.rank() == 1 ? 1 : 0));
  return out;
}

Tensor Tensor::dot(const Tensor& other) const {
  LUM_CHECK(rank() == 1 && other.rank() == 1)
      << "dot: needs two 1-D tensors, got " << to_string(shape()) << " and "
      << to_string(other.shape());
  return matmul(other);
}

Tensor Tensor::outer(const Tensor& other) const {
  LUM_CHECK(rank() == 1 && other.rank() == 1)
      << "outer: needs two 1-D tensors, got " << to_string(shape()) << " and "
      << to_string(other.shape());
  return unsqueeze(1) * other.unsqueeze(0);
}

}  // namespace luminal
