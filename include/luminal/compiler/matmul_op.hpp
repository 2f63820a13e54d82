// MatMul: the kernel the compiler selects for SumReduce(Mul(a_view, b_view)) over the
// shapes hlops' matmul produces: both views have shape [batch..., M, K, N], `a` is
// broadcast along N and `b` along M, and the sum runs over K. Its inputs are those two
// edges unchanged, so its reference semantics are exactly the sum of products.
#pragma once

#include <optional>

#include "luminal/custom_op.hpp"
#include "luminal/graph.hpp"

namespace luminal::compiler {

class MatMulOp final : public CustomOp {
 public:
  std::string name() const override { return "MatMul"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

/// MatMulAdd: a MatMul whose output has one or two values of its own type added as the
/// product stores it, y = a b + r (+ s): a bias row, a residual stream, a gradient being
/// summed. Inputs: MatMul's two, then the addends, each [batch..., M, N] read through its
/// view. Selected only where the backend asks (OptimizeOptions::gemm_epilogues); with two
/// addends, one of them is a row shared by every row and batch (a bias).
class MatMulAddOp final : public CustomOp {
 public:
  std::string name() const override { return "MatMulAdd"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
};

/// QMatMul: the same product when `b` is a weight kept in a block format (an input with
/// Node::quant set) read as its transpose, x W^T. Its inputs are the `a` edge, a
/// [batch..., M, K, N] view, and the weight input itself, [N, K] (reference semantics
/// see its decoded values); the output is [batch..., M, N].
class QMatMulOp final : public CustomOp {
 public:
  explicit QMatMulOp(uint32_t format) : format(format) {}
  std::string name() const override;
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
  uint32_t format;
};

/// NormQMatMul: a QMatMul whose activations are RMSNorm's output, normalised by the
/// product itself: y = (x * rsqrt(mean(x^2 over K) + eps) * g) W^T. Inputs: `x` as the
/// [batch..., M, K, N] product operand view (as QMatMul's `a`), the norm weight `g` as a
/// [batch..., M, K] view, and the block-stored weight W, [N, K]. Selected only for a
/// backend that asks for it (compiler::OptimizeOptions::product_fusions): one whose
/// products quantise their activation rows anyway, and then normalise in the same pass.
class NormQMatMulOp final : public CustomOp {
 public:
  NormQMatMulOp(uint32_t format, double eps) : format(format), eps(eps) {}
  std::string name() const override;
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
  uint32_t format;
  double eps;
};

/// QMatMulAdd: a QMatMul whose output is added to a residual stream, y = x W^T + r.
/// Inputs: QMatMul's two, then r ([batch..., M, N], f32, read as it lies). Selected, as
/// NormQMatMul is, only where the backend asks (OptimizeOptions::product_fusions).
class QMatMulAddOp final : public CustomOp {
 public:
  explicit QMatMulAddOp(uint32_t format) : format(format) {}
  std::string name() const override;
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
  uint32_t format;
};

/// True if SumReduce over `axis` of Mul(a_view, b_view) is x W^T for a block-stored
/// weight W of shape `w_shape`: `b` reads W transposed and broadcast along M and every
/// batch dim, and `a` is broadcast along N with unit stride along K.
bool is_qgemm(int axis, const View& a, const View& b, const std::vector<Expr>& w_shape);

/// True if `v`, a [batch..., M, N] addend of a product's output, is one row of N values
/// shared by every row and batch (a bias): unit stride along N, none along the rest, no
/// padding.
bool is_bias_row(const View& v);

/// True if SumReduce over `axis` of Mul(a_view, b_view) is a GEMM a BLAS can run: f32,
/// f16 or bf16, rank >= 3 with the sum over dim rank-2, `a` broadcast along the last dim and `b`
/// along dim rank-3, no padding, and unit stride along one dim of each matrix.
bool is_gemm(int axis, const View& a, const View& b, DType dtype);

/// is_gemm without its demands on how each operand is read (masks, unit strides): the
/// product a BLAS could run over copies of its operands.
bool is_gemm_of_copies(int axis, const View& a, const View& b, DType dtype);

/// An operand of a [batch..., M, K, N] product copied row-major for a BLAS to read:
/// `copy` is the copy's view of the operand's source (the operand's view less its
/// broadcast dims, in the order the source lays its matrix out, so two products reading
/// one value either way round share the copy) and `read` the product's view of the copy.
struct OperandCopy {
  View copy, read;
};
/// The copy of operand view `v` of a product, broadcast along `broadcast_dim` (N for the
/// left operand, M for the right); nullopt where a masked dim is broadcast.
std::optional<OperandCopy> gemm_operand_copy(const View& v, size_t broadcast_dim);

/// WindowMatMul: a MatMul whose left operand is read through a strided view of its
/// source with the product's rows and its sum each spread over several dims, as a
/// convolution reads its windows: [batch..., R_1..R_p, C_1..C_q, N] for the product's
/// [batch..., M, K, N], M = R_1 ... R_p and K = C_1 ... C_q in row-major order (rows:
/// image, output y, output x; sum: channel, kernel y, kernel x), broadcast along N. The
/// right operand is MatMul's [batch..., M, K, N] view. It computes MatMul over a
/// row-major copy of the left view without the copy (the im2col columns); `transposed`,
/// its output stored [batch..., N, M] (a convolution's NCHW: channels before pixels).
/// Selected only where the backend asks (OptimizeOptions::window_products).
class WindowMatMulOp final : public CustomOp {
 public:
  WindowMatMulOp(size_t row_dims, bool transposed) : row_dims(row_dims), transposed(transposed) {}
  std::string name() const override {
    return transposed ? "WindowMatMul(transposed)" : "WindowMatMul";
  }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
  size_t row_dims;  // p
  bool transposed;
};

/// The left operand of a WindowMatMul and its p.
struct WindowOperand {
  View view;
  size_t row_dims;
};
/// MatMul((View va (Contiguous (View vw x))), b) as a WindowMatMul reading x through the
/// returned view: where va reads the copy row-major as [batch..., M, K, N] (broadcast along
/// N), and vw, unpadded, has the product's batch dims first, then dims whose product is M,
/// then dims whose product is K. nullopt otherwise.
std::optional<WindowOperand> window_operand(const View& va, const View& vw);

/// A window product's source laid out again so that the gathered tiles' rows are runs of
/// memory: the source copied with one of its dims innermost (a convolution's channels:
/// NCHW to NHWC), and the sum's dims reordered to walk that dim last, so eight
/// consecutive elements of the sum are 16 contiguous bytes.
struct ChannelsLast {
  std::vector<int> order;  // the new copy's dims: the source's order[0], order[1], ...
  View window;             // WindowOperand::view over the new copy, its sum's dims reordered
  std::vector<int> sums;   // the sum's dims, new position i holding old position sums[i]
};
/// The relayout of `w` (over a row-major source of `source_shape`; `batch` batch dims):
/// the source dim walked by one sum dim alone with step 1 (by no row dim), of a size that
/// is a multiple of 8, goes last. nullopt where no dim qualifies, where the source is laid
/// out so already, or where a stride or size is symbolic.
std::optional<ChannelsLast> channels_last(const WindowOperand& w,
                                          const std::vector<Expr>& source_shape, size_t batch);
/// A right operand `vb` ([batch..., M, K, N]) copied to go with a relayout: K split into
/// the sum's dims `sum_dims` (sizes, in their old order), reordered as `sums` says, and the
/// copy laid out [batch..., N, K] (its broadcast dims dropped). `copy` is its view of the
/// operand's source and `read` the product's [batch..., M, K, N] view of it; nullopt
/// where K does not split so.
std::optional<OperandCopy> reordered_sum_copy(const View& vb, const std::vector<Expr>& sum_dims,
                                              const std::vector<int>& sums);

/// `vo`, a view of a row-major [batch..., M, N] value, over the same value stored
/// [batch..., N, M]: where each of vo's dims walks one dim of the value (within it), and
/// its innermost dim walks M (a reader along the rows, whom the transposed value serves
/// better). nullopt otherwise, or where a stride or size is symbolic.
std::optional<View> transposed_read(const View& vo, const std::vector<Expr>& value_shape);

}  // namespace luminal::compiler
