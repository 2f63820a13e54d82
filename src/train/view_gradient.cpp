// The transpose of a view (see view_gradient.hpp).
//
// A view reads element offset + sum_d i_d * stride_d of its producer's buffer for every
// index i inside its masks. Its transpose adds each read's gradient back at that
// position. After the masked ranges are sliced away, broadcast (stride 0) dims summed
// and flipped dims turned around, what is left is a set of positive strides. Sorted
// largest first they usually nest: each dim's stride is at least the extent of the dims
// inside it, so the gradient can be laid out by padding: innermost first, each dim's
// rows padded out to its stride and merged into one run, and the final run padded out
// to the producer's size at the view's offset. Where an inner dim's extent exceeds an
// outer stride (unfold's overlapping windows), the inner dim is taken one index at a
// time and the pieces added.
#include "train/view_gradient.hpp"

#include <algorithm>
#include <numeric>

#include "core/expr_probe.hpp"
#include "luminal/error.hpp"

namespace luminal::train {
namespace {

// Tensor t holds the gradient of buffer element offset + sum_d i_d * strides[d] for every
// index i of its shape (dims).
struct Strided {
  Tensor t;
  std::vector<Expr> dims, strides;
  Expr offset;

  void erase(size_t d) {
    dims.erase(dims.begin() + static_cast<std::ptrdiff_t>(d));
    strides.erase(strides.begin() + static_cast<std::ptrdiff_t>(d));
  }
};

// The gradient of the `n`-element buffer Strided reads (all strides positive).
Tensor place(Strided s, Expr n, const ExprProbe& probe) {
  const size_t rank = s.dims.size();
  std::vector<int> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return probe.compare(s.strides[static_cast<size_t>(a)], s.strides[static_cast<size_t>(b)]) > 0;
  });
  if (rank > 1) {
    Strided sorted{s.t.permute(order), {}, {}, s.offset};
    for (int d : order) {
      sorted.dims.push_back(s.dims[static_cast<size_t>(d)]);
      sorted.strides.push_back(s.strides[static_cast<size_t>(d)]);
    }
    s = std::move(sorted);
  }

  // Innermost first: u's last axis is a run of `extent` buffer elements starting where
  // the outer dims' indices point.
  Tensor u = s.t.unsqueeze(static_cast<int>(rank));
  Expr extent = 1;
  for (size_t d = rank; d-- > 0;) {
    if (probe.compare(s.strides[d], extent) < 0) {
      // Dim d's rows overlap the run inside them: take the inner dim of the smallest
      // constant size one index at a time (each piece then nests further) and add.
      size_t pick = rank;
      for (size_t j = d + 1; j < rank; ++j) {
        const auto size = s.dims[j].as_const();
        const auto best = pick < rank ? s.dims[pick].as_const() : std::nullopt;
        if (size && (!best || *size < *best)) pick = j;
      }
      LUM_CHECK(pick < rank) << "gradients: a view's windows overlap along dims of symbolic size ("
                             << to_string(s.dims) << " with strides " << to_string(s.strides)
                             << "), which has no transpose here";
      const int64_t count = *s.dims[pick].as_const();
      std::optional<Tensor> sum;
      for (int64_t k = 0; k < count; ++k) {
        Strided piece = s;
        piece.t = s.t.slice(static_cast<int>(pick), k, k + 1).squeeze(static_cast<int>(pick));
        piece.offset = s.offset + s.strides[pick] * k;
        piece.erase(pick);
        Tensor part = place(std::move(piece), n, probe);
        sum = sum ? *sum + part : part;
      }
      return *sum;
    }
    // Pad the run out to the stride, merge it with dim d, and drop the padding after
    // the last row.
    if (s.strides[d] != extent) u = u.pad(-1, 0, s.strides[d] - extent);
    std::vector<Expr> shape(s.dims.begin(), s.dims.begin() + static_cast<std::ptrdiff_t>(d));
    shape.push_back(s.dims[d] * s.strides[d]);
    u = u.reshape(shape);
    const Expr merged = (s.dims[d] - 1) * s.strides[d] + extent;
    if (merged != s.dims[d] * s.strides[d]) u = u.slice(-1, 0, merged);
    extent = merged;
  }
  if (s.offset != Expr(0) || extent != n) u = u.pad(0, s.offset, n - s.offset - extent);
  return u;
}

// Where each dim of the view steps one of the source's own dims (a convolution's windows
// over an image: its rows and its window's rows both step a row), the transpose is pads
// along the source's dims, reads with a bound check a dim; place's reshapes instead cost
// a division and a remainder a dim for every element, nine times over for a 3x3 window.
// Dims stepping the same source dim (overlapping windows) are taken one index of the
// shorter at a time, the pieces added. Constant shapes only; nullopt where the view is
// not so.
std::optional<Tensor> place_along_dims(const Strided& s, const std::vector<int64_t>& shape,
                                       int pieces_left = 64) {
  const size_t rank = shape.size(), dims = s.dims.size();
  std::vector<int64_t> step(rank, 1);  // the source's row-major strides
  for (size_t j = rank; j-- > 1;) step[j - 1] = step[j] * shape[j];
  const auto offset = s.offset.as_const();
  if (!offset || *offset < 0 || *offset >= step[0] * shape[0]) return std::nullopt;
  std::vector<int64_t> extent(dims);
  std::vector<std::vector<size_t>> by_dim(rank);  // the view dims stepping each source dim
  for (size_t d = 0; d < dims; ++d) {
    const auto stride = s.strides[d].as_const(), size = s.dims[d].as_const();
    if (!stride || !size) return std::nullopt;
    // The outermost source dim of that stride longer than one (dims of one share it).
    size_t j = rank;
    for (size_t k = 0; k < rank; ++k)
      if (step[k] == *stride && (j == rank || shape[k] > shape[j])) j = k;
    if (j == rank) return std::nullopt;
    extent[d] = *size;
    by_dim[j].push_back(d);
  }
  for (size_t j = 0; j < rank; ++j) {
    if (by_dim[j].size() < 2) continue;
    // Overlapping along source dim j: the shorter of two dims one index at a time.
    size_t pick = by_dim[j][0];
    for (size_t d : by_dim[j])
      if (extent[d] < extent[pick]) pick = d;
    if (extent[pick] > pieces_left) return std::nullopt;
    std::optional<Tensor> sum;
    for (int64_t k = 0; k < extent[pick]; ++k) {
      Strided piece = s;
      piece.t = s.t.slice(static_cast<int>(pick), k, k + 1).squeeze(static_cast<int>(pick));
      piece.offset = s.offset + s.strides[pick] * k;
      piece.erase(pick);
      std::optional<Tensor> part =
          place_along_dims(piece, shape, pieces_left / static_cast<int>(extent[pick]));
      if (!part) return std::nullopt;
      sum = sum ? *sum + *part : *part;
    }
    return sum;
  }
  // One view dim at most a source dim: its start is the offset's digit there.
  std::vector<int> order;  // view dims in source order
  for (size_t j = 0; j < rank; ++j)
    if (!by_dim[j].empty()) order.push_back(static_cast<int>(by_dim[j][0]));
  Tensor u = dims > 1 ? s.t.permute(order) : s.t;
  int axis = 0;
  for (size_t j = 0; j < rank; ++j, ++axis) {
    const int64_t start = *offset / step[j] % shape[j];
    const int64_t length = by_dim[j].empty() ? 1 : extent[by_dim[j][0]];
    if (start + length > shape[j]) return std::nullopt;  // rows that wrap into the next
    if (by_dim[j].empty()) u = u.unsqueeze(axis);
    if (start != 0 || length != shape[j]) u = u.pad(axis, start, shape[j] - start - length);
  }
  return u;
}

// `shape` with dims split where a view dim steps inside one of them (a head's columns
// within a row of fused q/k/v projections: stride 64 inside a dim of 2304 becomes 36 x
// 64), so that every view dim steps a dim of its own. Unchanged where no split fits.
std::vector<int64_t> split_for_view(const Strided& s, std::vector<int64_t> shape) {
  for (bool split = true; split;) {
    split = false;
    std::vector<int64_t> step(shape.size(), 1);
    for (size_t j = shape.size(); j-- > 1;) step[j - 1] = step[j] * shape[j];
    for (const Expr& e : s.strides) {
      const auto stride = e.as_const();
      if (!stride || std::find(step.begin(), step.end(), *stride) != step.end()) continue;
      for (size_t j = 0; j < shape.size(); ++j) {
        const int64_t outer = step[j] * shape[j];
        if (*stride <= step[j] || *stride >= outer || *stride % step[j] || outer % *stride)
          continue;
        shape[j] = outer / *stride;
        shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(j) + 1, *stride / step[j]);
        split = true;
        break;
      }
      if (split) break;
    }
  }
  return shape;
}

}  // namespace

Tensor view_gradient(const Tensor& g, const View& view, std::vector<Expr> source_shape) {
  LUM_ASSERT(g.shape() == view.shape()) << "a view's gradient has the view's shape";
  if (view == View::contiguous(source_shape)) return g;
  Strided s{g, view.shape(), view.strides(), view.offset()};

  // Elements outside a dim's mask read padding: only the masked range reads the buffer.
  for (size_t d = 0; d < view.rank(); ++d) {
    if (!view.is_masked(d)) continue;
    const Expr lo = view.mask_lo(d), hi = view.mask_hi(d);
    s.t = s.t.slice(static_cast<int>(d), lo, hi);
    s.offset = s.offset + lo * s.strides[d];
    s.dims[d] = hi - lo;
  }
  // Dims of one element read one place; broadcast dims read the same places again.
  for (size_t d = s.dims.size(); d-- > 0;) {
    if (s.dims[d] == Expr(1)) {
      s.t = s.t.squeeze(static_cast<int>(d));
    } else if (s.strides[d] == Expr(0)) {
      s.t = s.t.sum({static_cast<int>(d)});
    } else {
      continue;
    }
    s.erase(d);
  }

  const Expr n = product(source_shape);
  std::vector<Expr> exprs = s.strides;
  exprs.insert(exprs.end(), s.dims.begin(), s.dims.end());
  exprs.push_back(s.offset);
  exprs.push_back(n);
  const ExprProbe probe(exprs, "gradients: the view's transpose is unknown");
  // A negative stride walks the buffer backwards from its first element's position.
  for (size_t d = 0; d < s.dims.size(); ++d) {
    if (probe.compare(s.strides[d], 0) >= 0) continue;
    s.t = s.t.flip(static_cast<int>(d));
    s.offset = s.offset + (s.dims[d] - 1) * s.strides[d];
    s.strides[d] = -s.strides[d];
  }
  std::vector<int64_t> sizes;
  for (const Expr& d : source_shape)
    if (const auto c = d.as_const()) sizes.push_back(*c);
  if (sizes.size() == source_shape.size() && !sizes.empty()) {
    const std::vector<int64_t> split = split_for_view(s, sizes);
    if (std::optional<Tensor> along = place_along_dims(s, split))
      return split == sizes ? *along : along->reshape(source_shape);
  }
  return place(std::move(s), n, probe).reshape(source_shape);
}

}  // namespace luminal::train
