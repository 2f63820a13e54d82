// Attention: the kernel the compiler selects for softmax(where(mask, (q k^T) * scale, -inf))
// v, the decomposition nn::Attention writes (rules `softmax` and `attention` in
// hlir.rules). One kernel instead of eight: the scores, the masked softmax and the value
// product run in one pass over the keys and values, which decoding reads straight after
// the weights have evicted them from every cache.
#pragma once

#include <optional>

#include "luminal/custom_op.hpp"
#include "luminal/graph.hpp"

namespace luminal::compiler {

/// Inputs, read through the two products' views: q and k as the score product's operands,
/// both [batch..., M, D, T]; v as the value product's, [batch..., M, T, Dv]; the mask,
/// [batch..., M, T] (bool; false drops the key). Output [batch..., M, Dv], of the
/// queries' type (the scores' and so the weights'), stored with its dims in `out_order`
/// where that is set (stored dim i is dim out_order[i]; Dv stays last): the node's shape
/// is the stored one (OptimizeOptions::attention_output_orders).
class AttentionOp final : public CustomOp {
 public:
  explicit AttentionOp(double scale) : scale(scale) {}
  std::string name() const override { return "Attention"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
  double scale;
  std::vector<int64_t> out_order;  // empty: [batch..., M, Dv]

  /// Each of the dims [batch..., M]'s stride in rows of Dv where the output is stored in
  /// out_order, for those dims' sizes `dims` (row-major where out_order is empty).
  std::vector<int64_t> row_strides(const std::vector<int64_t>& dims) const;
};

/// Attention's backward pass, in three kernels the compiler selects for the products
/// autograd writes over the materialised scores (rules `attention-*-gradient` in
/// hlir.rules). Each recomputes the scores tile by tile instead of storing them:
/// - Stats: per query row, the log2-sum-exp2 of the scaled scores (scores times scale
///   times log2(e), over the keys the mask keeps; -inf where it keeps none) and
///   delta = sum_t p_t dp_t, the weights times the output gradient's products with the
///   values. Output [batch..., M, 2], f32.
/// - Queries: dq = scale sum_t p_t (dp_t - delta) k_t. Output [batch..., M, D], of the
///   queries' type.
/// - KeysValues: over a batch point's M rows, dk_t = scale sum_m p (dp - delta) q_m and
///   dv_t = sum_m p dout_m, side by side. Output [batch..., T, D + Dv], of the keys' type.
/// Inputs, read through views as Attention's are: q, k [batch..., M, D, T], v
/// [batch..., M, T, Dv], mask [batch..., M, T], the output's gradient dout
/// [batch..., M, Dv], and for Queries and KeysValues the Stats [batch..., M, 2].
enum class AttentionGradPart { Stats, Queries, KeysValues };

class AttentionGradOp final : public CustomOp {
 public:
  AttentionGradOp(double scale, AttentionGradPart part) : scale(scale), part(part) {}
  std::string name() const override;
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;
  double scale;
  AttentionGradPart part;
};

/// True if `v` reads a contiguous tensor of v's shape without its last dim, repeated along
/// that last dim (stride 0 or size 1): how a keepdim reduction's result, or softmax's
/// probabilities as a product's left operand, are broadcast back.
bool is_broadcast_along_last(const View& v);

/// The most symbolic dims a computed mask may read (a kernel's argument block holds them).
constexpr size_t kMaxComputedMaskDims = 8;

/// An Attention or AttentionGrad node's mask as an index expression, where the mask is an iota of
/// bools that every batch point reads alike: keep(lum_m, lum_t), nonzero where query row lum_m
/// keeps key lum_t, simplified knowing both ranges, over at most kMaxComputedMaskDims of
/// the graph's symbolic dims. A causal mask becomes `past + lum_m >= lum_t`. A backend
/// that evaluates it inside its kernels need not store the mask (plan_kernels'
/// `computed_masks`): for a prompt of n tokens, n^2 bytes written and read back.
std::optional<Expr> computed_mask(const Graph& g, const Node& attention);

}  // namespace luminal::compiler
