// How a strided view walks a row-major value, dim by dim: what lets a reader's view be
// re-expressed over the same value laid out in another order of its dims (a convolution's
// image copied channels last, a product stored transposed, a value computed in the order
// its operand lies in memory).
#pragma once

#include <optional>
#include <vector>

#include "luminal/view.hpp"

namespace luminal::compiler {

/// For each of a view's dims, the value's dim it walks (-1: none, a dim of 1 or stride 0)
/// and its step there (the outermost dim whose row stride divides the view's stride), and
/// for each value dim the index the walks start from (`origin`: the view's offset, split
/// over the value's dims). The walks stay inside their dims over the view's valid elements,
/// so the index along each value dim is its origin plus the sum of its walks, in any
/// layout of the value. Sizes are constants but the value's outermost (a batch), which one
/// unmasked view dim of that size walks, step 1, alone; its size is recorded as -1.
struct Walks {
  std::vector<int> dim;
  std::vector<int64_t> step, view_size, value_size, origin;
};
/// nullopt where a stride is symbolic or negative, a mask symbolic, or a walk leaves its dim.
std::optional<Walks> walks_of(const View& v, const std::vector<Expr>& shape);

/// The strides and offset of the walks over the value laid out with its dims in `order`
/// (outermost first); nullopt where a symbolic size would be a factor of a stride (it is
/// not outermost).
struct Restrided {
  std::vector<Expr> strides;
  Expr offset;
};
std::optional<Restrided> strides_over(const Walks& w, const std::vector<int>& order);

/// `v`, a view of a row-major value of `shape`, over the same value stored with its dims
/// in `order` (the stored value's dim i is the value's order[i]); masks kept. nullopt
/// where walks_of or strides_over declines.
std::optional<View> over_order(const View& v, const std::vector<Expr>& shape,
                               const std::vector<int>& order);

}  // namespace luminal::compiler
