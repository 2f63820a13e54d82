// One gradient rule per primitive op, in a table generated from ops.def: a new op
// without a rule here does not compile (see gradient_rules.hpp).
#include "train/gradient_rules.hpp"

#include <algorithm>
#include <numbers>

#include "core/hlops/common.hpp"
#include "luminal/error.hpp"

namespace luminal::train {

Tensor GradientStep::input(size_t i) const {
  const Edge& e = node.inputs.at(i);
  return Tensor(graph, e.source, e.view, graph->node(e.source).dtype);
}

namespace {

using Grads = std::vector<std::optional<InputGradient>>;
constexpr double kLn2 = std::numbers::ln2;

// Sources have no inputs.
Grads grad_Input(const GradientStep&, const std::vector<bool>&) {
  return {};
}
Grads grad_Constant(const GradientStep&, const std::vector<bool>&) {
  return {};
}
Grads grad_Iota(const GradientStep&, const std::vector<bool>&) {
  return {};
}

// A cast carries the gradient back in the input's type; from an integer or bool there
// is none.
Grads grad_Cast(const GradientStep& s, const std::vector<bool>&) {
  const DType in = s.graph->node(s.node.inputs[0].source).dtype;
  if (!is_float(in) || !is_float(s.node.dtype)) return {std::nullopt};
  return {s.grad.cast(in)};
}
Grads grad_Contiguous(const GradientStep& s, const std::vector<bool>&) {
  return {s.grad};
}
// The gradient times a local derivative that may be infinite (2^x overflowed, 1/0,
// log2 at 0, sqrt at 0): where the gradient is zero the product is zero, not NaN, so a
// value that does not reach the loss passes nothing back (a saturated sigmoid,
// 1 / (1 + e^-x) at x = -100, has gradient 0 as PyTorch's has). A NaN gradient stays
// NaN (the composite eq alone is true for NaN; |NaN| < 1 is false).
Tensor times(const Tensor& grad, const Tensor& local) {
  const Tensor zero = logical_and(eq(grad, 0.0), lt(grad.abs(), 1.0));
  return where(zero, 0.0, grad * local);
}

// d log2(x) = 1 / (x ln 2)
Grads grad_Log2(const GradientStep& s, const std::vector<bool>&) {
  return {times(s.grad, s.input(0).recip() * (1.0 / kLn2))};
}
// d 2^x = 2^x ln 2
Grads grad_Exp2(const GradientStep& s, const std::vector<bool>&) {
  return {times(s.grad, s.out * kLn2)};
}
// d sin(x) = cos(x)
Grads grad_Sin(const GradientStep& s, const std::vector<bool>&) {
  return {s.grad * s.input(0).cos()};
}
// d sqrt(x) = 1 / (2 sqrt(x))
Grads grad_Sqrt(const GradientStep& s, const std::vector<bool>&) {
  return {times(s.grad, s.out.recip() * 0.5)};
}
// d (1 / x) = -1 / x^2
Grads grad_Recip(const GradientStep& s, const std::vector<bool>&) {
  return {times(s.grad, -(s.out * s.out))};
}
Grads grad_Add(const GradientStep& s, const std::vector<bool>&) {
  return {s.grad, s.grad};
}
// The gradient of one factor of a product, d = grad * other, which the factor's
// broadcast dims then sum. Where that sum is a contraction, as in a matrix product's
// Mul (a [.., M, K, N] broadcast along N, b along M, grad along K), it is written as a
// matrix product (grad @ b^T, a^T @ grad) so the compiler runs it as one instead of a
// reduction over a broadcast product. The dims of the factor's view:
//   J  broadcast in the factor, varying in both grad and other: summed (the contraction);
//   Mg varying in grad only; No varying in other only; B varying in both (batch).
// A contraction needs J, Mg and No all present; anything else is the plain product.
InputGradient factor_gradient(const Tensor& grad, const Tensor& factor, const Tensor& other) {
  const size_t rank = factor.rank();
  auto zero = [](const Tensor& t, size_t d) { return t.view().strides()[d] == Expr(0); };
  std::vector<int> sum, only_grad, only_other, both;
  for (size_t d = 0; d < rank; ++d) {
    const bool g = !zero(grad, d) && grad.shape()[d] != Expr(1);
    const bool o = !zero(other, d) && other.shape()[d] != Expr(1);
    const int axis = static_cast<int>(d);
    if (zero(factor, d) && factor.shape()[d] != Expr(1)) {
      if (!(g && o)) return grad * other;  // a sum that is not a contraction
      sum.push_back(axis);
    } else if (g && o) {
      both.push_back(axis);
    } else if (g) {
      only_grad.push_back(axis);
    } else if (o) {
      only_other.push_back(axis);
    } else {
      both.push_back(axis);  // constant along it in both: a batch dim of one value
    }
  }
  if (sum.empty() || only_grad.empty() || only_other.empty()) return grad * other;
  // Padding along a broadcast dim would make it vary after all.
  auto masked = [](const Tensor& t, const std::vector<int>& dims) {
    return std::any_of(dims.begin(), dims.end(),
                       [&](int d) { return t.view().is_masked(static_cast<size_t>(d)); });
  };
  if (masked(factor, sum) || masked(grad, only_other) || masked(other, only_grad))
    return grad * other;
  // Each side's dims in [batch, rows, contraction] order, the dims it does not vary along
  // dropped (index 0 of a broadcast dim reads the same values).
  auto arrange = [&](Tensor t, const std::vector<int>& drop, const std::vector<int>& rows,
                     bool rows_first) {
    std::vector<int> order = both;
    const std::vector<int>& first = rows_first ? rows : sum;
    const std::vector<int>& second = rows_first ? sum : rows;
    order.insert(order.end(), first.begin(), first.end());
    order.insert(order.end(), second.begin(), second.end());
    std::vector<Expr> shape;
    for (int d : both) shape.push_back(t.shape()[static_cast<size_t>(d)]);
    Expr a = 1, b = 1;
    for (int d : first) a = a * t.shape()[static_cast<size_t>(d)];
    for (int d : second) b = b * t.shape()[static_cast<size_t>(d)];
    shape.push_back(a);
    shape.push_back(b);
        // Drop the dims this side is broadcast along, then order and merge the rest.
    std::vector<int> dropped = drop;
    std::sort(dropped.begin(), dropped.end());
    for (auto d = dropped.rbegin(); d != dropped.rend(); ++d) t = t.slice(*d, 0, 1).squeeze(*d);
    std::vector<int> perm;
        for (int d : order) {
      int shift = 0;
      for (int x : dropped) shift += x < d;
      perm.push_back(d - shift);
    }
    return t.permute(perm).reshape(shape);
  };
  const Tensor lhs = arrange(grad, only_other, only_grad, true);    // [B, Mg, J]
  const Tensor rhs = arrange(other, only_grad, only_other, false);  // [B, J, No]
  // [B, Mg, No] back to the factor's order of its remaining dims.
  std::vector<Expr> split;
  std::vector<int> produced = both;
  for (int d : both) split.push_back(factor.shape()[static_cast<size_t>(d)]);
  for (int d : only_grad)
    split.push_back(factor.shape()[static_cast<size_t>(d)]), produced.push_back(d);
  for (int d : only_other)
    split.push_back(factor.shape()[static_cast<size_t>(d)]), produced.push_back(d);
  Tensor out = lhs.matmul(rhs).reshape(split);
  std::vector<int> remaining;  // the factor's dims but the summed ones, in order
  for (size_t d = 0; d < rank; ++d)
    if (std::find(sum.begin(), sum.end(), static_cast<int>(d)) == sum.end())
      remaining.push_back(static_cast<int>(d));
  std::vector<int> perm;
  for (int d : remaining)
    perm.push_back(
        static_cast<int>(std::find(produced.begin(), produced.end(), d) - produced.begin()));
  return InputGradient(out.permute(perm), sum);
}

Grads grad_Mul(const GradientStep& s, const std::vector<bool>& wanted) {
  const Tensor a = s.input(0), b = s.input(1);
  return {wanted[0] ? std::optional(factor_gradient(s.grad, a, b)) : std::nullopt,
          wanted[1] ? std::optional(factor_gradient(s.grad, b, a)) : std::nullopt};
}
// fmod(a, b) = a - trunc(a / b) b: d/da = 1, d/db = -trunc(a / b) = (out - a) / b.
Grads grad_Mod(const GradientStep& s, const std::vector<bool>& wanted) {
  if (!is_float(s.node.dtype)) return {std::nullopt, std::nullopt};
  return {s.grad,
          wanted[1] ? std::optional(s.grad * (s.out - s.input(0)) / s.input(1)) : std::nullopt};
}
Grads grad_LessThan(const GradientStep&, const std::vector<bool>&) {
  return {std::nullopt, std::nullopt};
}
Grads grad_Where(const GradientStep& s, const std::vector<bool>& wanted) {
  const Tensor cond = s.input(0);
  return {std::nullopt, wanted[1] ? std::optional(where(cond, s.grad, 0.0)) : std::nullopt,
          wanted[2] ? std::optional(where(cond, 0.0, s.grad)) : std::nullopt};
}
// Every element of the reduced axis gets its sum's gradient.
Grads grad_SumReduce(const GradientStep& s, const std::vector<bool>&) {
  const Tensor x = s.input(0);
  return {s.grad.expand(s.node.axis, x.dim(s.node.axis))};
}
// The largest elements share the gradient equally (as torch.amax): ties split it.
Grads grad_MaxReduce(const GradientStep& s, const std::vector<bool>&) {
  const Tensor x = s.input(0);
  const int axis = s.node.axis;
  const Expr n = x.dim(axis);
  const Tensor top = eq(x, s.out.expand(axis, n));
  const Tensor ties = top.cast(x.dtype()).sum({axis});
  return {where(top, (s.grad / ties).expand(axis, n), 0.0)};
}
// A gather along one axis (Tensor::gather_axis, index_select): its positions are
// flat_positions' iota of the output's other coordinates plus index * the axis's stride.
// Recognised by rebuilding that expression for each axis of the data.
struct AxisGather {
  int axis;
  Tensor index;  // the index as the positions read it: the output's shape
};
std::optional<AxisGather> axis_gather(const GradientStep& s) {
  Graph& g = *s.graph;
  const Edge& positions = s.node.inputs[1];
  const Node& add = g.node(positions.source);
  if (add.op != Op::Add || positions.view != View::contiguous(add.shape)) return std::nullopt;
  const Node& base = g.node(add.inputs[0].source);
  const Node& mul = g.node(add.inputs[1].source);
  if (base.op != Op::Iota || mul.op != Op::Mul) return std::nullopt;
  const Node& stride = g.node(mul.inputs[1].source);
  if (stride.op != Op::Iota || !stride.shape.empty()) return std::nullopt;
  const std::vector<Expr> data = s.input(0).shape(), out = add.shape;
  if (data.size() != out.size()) return std::nullopt;
    for (size_t a = 0; a < data.size(); ++a) {
    const hlops::FlatPositionParts expected = hlops::flat_position_parts(data, out, a);
    if (simplify(expected.base) != simplify(base.iota) ||
        simplify(expected.stride) != simplify(stride.iota))
      continue;
    // The index as flat_positions widened it; through that cast, where it read the index
    // whole, the index itself (so a broadcast along other dims still shows).
    Edge index = mul.inputs[0];
    const Node& widened = g.node(index.source);
    if (widened.op == Op::Cast && index.view == View::contiguous(widened.shape))
      index = widened.inputs[0];
    return AxisGather{static_cast<int>(a),
                      Tensor(&g, index.source, index.view, g.node(index.source).dtype)};
  }
  return std::nullopt;
}

// out[j] = flat(data)[idx[j]]: every element of data adds the gradients of the outputs
// that read it. Along one axis, with the index the same across the other dims (an
// embedding's index_select), that is a product with the one-hot matrix of the index
// (outputs x the axis's size) that the compiler runs as a matrix product; along one
// axis otherwise, a one-hot over that axis summed; any other gather, the one-hot of its
// flat positions (elements x outputs). All exact where indices repeat.
Grads grad_Gather(const GradientStep& s, const std::vector<bool>& wanted) {
  if (!wanted[0]) return {std::nullopt, std::nullopt};
  Graph& g = *s.graph;
  const Tensor data = s.input(0);
  const std::vector<Expr> shape = data.shape();
  if (const auto along = axis_gather(s)) {
    const int a = along->axis, rank = static_cast<int>(shape.size());
    const Expr size = shape[static_cast<size_t>(a)];
    const std::vector<Expr> out = along->index.shape();
    bool one_line = true;  // the index varies along the axis alone, other dims whole
    for (int d = 0; d < rank; ++d)
      if (d != a)
        one_line = one_line && along->index.view().strides()[static_cast<size_t>(d)] == Expr(0) &&
                   out[static_cast<size_t>(d)] == shape[static_cast<size_t>(d)];
    std::vector<int> to_last(static_cast<size_t>(rank)), back(static_cast<size_t>(rank));
    for (int d = 0, k = 0; d < rank; ++d)
      if (d != a) to_last[static_cast<size_t>(k++)] = d;
    to_last.back() = a;
    for (int d = 0; d < rank; ++d) back[static_cast<size_t>(to_last[static_cast<size_t>(d)])] = d;
    if (one_line) {
      Tensor line = along->index;
      for (int d = 0; d < rank; ++d)
        if (d != a) line = line.slice(d, 0, 1);
      const Expr n = out[static_cast<size_t>(a)];
      // A width padded to a multiple of 64 (no index reaches the extra columns, which the
      // slice drops): products over an unaligned width run several times slower.
      const auto constant = size.as_const();
      const Expr wide = constant ? Expr((*constant + 63) / 64 * 64) : size;
      const Tensor hot = eq(line.reshape({n, 1}).broadcast_to({n, wide}),
                            g.iota(Expr("z") % wide, {n, wide}, line.dtype()))
                             .cast(s.grad.dtype());
      Tensor grad = s.grad.permute(to_last).matmul(hot);
      if (wide != size) grad = grad.slice(rank - 1, 0, size);
      return {grad.permute(back), std::nullopt};
    }
    std::vector<Expr> wide = out;
    wide.push_back(size);
    const Tensor hot = eq(along->index.unsqueeze(rank).broadcast_to(wide),
                          g.iota(Expr("z") % size, wide, along->index.dtype()));
    Tensor grad = where(hot, s.grad.unsqueeze(rank).broadcast_to(wide), 0.0).sum({a});
    grad = grad.permute(back);  // the axis's size back at a; the other dims the output's
    for (int d = 0; d < rank; ++d)
      if (d != a)
        grad = grad.pad(d, 0, shape[static_cast<size_t>(d)] - out[static_cast<size_t>(d)]);
    return {grad, std::nullopt};
  }
  const Tensor idx = s.input(1);
  const Expr elements = data.numel(), outputs = idx.numel();
  const Tensor flat_idx = idx.reshape({1, outputs});
  const Tensor position = g.iota(Expr("z") / outputs, {elements, outputs}, idx.dtype());
  const Tensor hits = eq(position, flat_idx.broadcast_to({elements, outputs}));
  const Tensor spread =
      where(hits, s.grad.reshape({1, outputs}).broadcast_to({elements, outputs}), 0.0);
  return {spread.sum({1}).reshape(shape), std::nullopt};
}
// out = dest with out[idx[j]] = src[j]: the overwritten elements of dest get nothing,
// src[j] gets the gradient of the element it was written to (indices distinct).
Grads grad_Scatter(const GradientStep& s, const std::vector<bool>& wanted) {
  const Tensor idx = s.input(1), src = s.input(2);
  std::optional<Tensor> dest, from;
  if (wanted[0]) dest = s.grad.scatter(idx, src.zeros_like());
  if (wanted[2]) from = s.grad.gather(idx);
  return {dest, std::nullopt, from};
}
Grads grad_Custom(const GradientStep& s, const std::vector<bool>&) {
  LUM_CHECK(false) << "gradients: no gradient rule for the custom op "
                   << (s.node.custom ? s.node.custom->name() : std::string("?"))
                   << " between the parameters and the loss";
  return {};
}

constexpr GradientRule kRules[] = {
#define LUM_OP(name, arity, category, float_only, commutative) &grad_##name,
#include "luminal/ops.def"
#undef LUM_OP
};
static_assert(std::size(kRules) == kNumOps);

}  // namespace

GradientRule gradient_rule(Op op) {
  return kRules[static_cast<size_t>(op)];
}

}  // namespace luminal::train
