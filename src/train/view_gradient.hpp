// The transpose of a view (private to src/train): where a consumer's gradient goes in
// its producer's buffer.
#pragma once

#include <vector>

#include "luminal/tensor.hpp"
#include "luminal/view.hpp"

namespace luminal::train {

/// The gradient of a producer's elements (shape `source_shape`, stored row-major) given
/// `g`, the gradient of the elements a consumer reads through `view` (g's shape is the
/// view's). Every valid element of the view adds its gradient to the element it reads:
/// broadcast dims sum, padding contributes nothing, slices and flips land where they
/// came from, overlapping windows (unfold) add up. Built from movement ops, sums and
/// copies, so the result stays an ordinary graph value. Throws luminal::Error for a view
/// whose layout depends on the values of symbolic dims in a way it cannot order.
/// (The shape is taken by value: it is often a graph node's, which adding nodes moves.)
Tensor view_gradient(const Tensor& g, const View& view, std::vector<Expr> source_shape);

}  // namespace luminal::train
