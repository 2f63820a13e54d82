// Movement composites: view edits where possible, Gather / Scatter / Where otherwise.
#include <algorithm>

#include "core/hlops/common.hpp"
#include "luminal/error.hpp"

namespace luminal {

Tensor Tensor::transpose(int a, int b) const {
  std::vector<int> axes(rank());
  for (size_t d = 0; d < rank(); ++d) axes[d] = static_cast<int>(d);
  std::swap(axes[normalize_axis(a, rank(), "transpose")],
            axes[normalize_axis(b, rank(), "transpose")]);
  return permute(axes);
}

Tensor Tensor::flatten(int start, int end) const {
  if (rank() == 0) return reshape({1});
  const size_t s = normalize_axis(start, rank(), "flatten");
  const size_t e = normalize_axis(end, rank(), "flatten");
  LUM_CHECK(s <= e) << "flatten: start axis " << start << " is after end axis " << end;
  std::vector<Expr> out(shape().begin(), shape().begin() + static_cast<std::ptrdiff_t>(s));
  Expr merged = 1;
  for (size_t d = s; d <= e; ++d) merged = merged * shape()[d];
  out.push_back(merged);
  out.insert(out.end(), shape().begin() + static_cast<std::ptrdiff_t>(e) + 1, shape().end());
  return reshape(out);
}

Tensor Tensor::unsqueeze(int axis) const {
  return expand(axis, 1);
}

Tensor Tensor::squeeze(int axis) const {
  const size_t a = normalize_axis(axis, rank(), "squeeze");
  LUM_CHECK(shape()[a] == Expr(1))
      << "squeeze: dimension " << a << " of " << to_string(shape()) << " is not 1";
  std::vector<Expr> out = shape();
  out.erase(out.begin() + static_cast<std::ptrdiff_t>(a));
  return reshape(out);
}

Tensor Tensor::squeeze() const {
  std::vector<Expr> out;
  for (Expr d : shape())
    if (d != Expr(1)) out.push_back(d);
  return reshape(out);
}

Tensor Tensor::repeat(const std::vector<Expr>& times) const {
  LUM_CHECK(times.size() >= rank())
      << "repeat: " << times.size() << " repeat counts for a rank-" << rank() << " tensor";
  // [n0, n1] -> [1, n0, 1, n1] -> broadcast [r0, n0, r1, n1] -> [r0*n0, r1*n1].
  Tensor t = reshape([&] {
    std::vector<Expr> s(times.size() - rank(), Expr(1));
    s.insert(s.end(), shape().begin(), shape().end());
    return s;
  }());
  std::vector<Expr> spread, target, merged;
  for (size_t d = 0; d < times.size(); ++d) {
    spread.push_back(1);
    spread.push_back(t.shape()[d]);
    target.push_back(times[d]);
    target.push_back(t.shape()[d]);
    merged.push_back(times[d] * t.shape()[d]);
  }
  return t.reshape(spread).broadcast_to(target).reshape(merged);
}

Tensor Tensor::roll(int64_t shift, int axis) const {
  const size_t a = normalize_axis(axis, rank(), "roll");
  const Expr n = shape()[a];
  const Expr s = Expr(shift) % n;  // floor modulo: a left shift becomes a right one
  const int ax = static_cast<int>(a);
  return concat({slice(ax, n - s, n), slice(ax, 0, n - s)}, ax);
}

std::vector<Tensor> Tensor::split(Expr size, int axis) const {
  const size_t a = normalize_axis(axis, rank(), "split");
  const auto n = shape()[a].as_const();
  const auto k = size.as_const();
  LUM_CHECK(n && k && *k > 0) << "split: needs a concrete dimension and a positive size, got "
                              << shape()[a] << " and " << size;
  std::vector<Tensor> parts;
  for (int64_t start = 0; start < *n; start += *k)
    parts.push_back(slice(static_cast<int>(a), start, std::min(*n, start + *k)));
  return parts;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int axis) const {
  LUM_CHECK(chunks > 0) << "chunk: needs a positive number of chunks, got " << chunks;
  const size_t a = normalize_axis(axis, rank(), "chunk");
  return split(ceil_div(shape()[a], Expr(chunks)), axis);
}

Tensor concat(const std::vector<Tensor>& parts, int axis) {
  LUM_CHECK(!parts.empty()) << "concat: no tensors";
  const size_t a = normalize_axis(axis, parts[0].rank(), "concat");
  Expr total = 0;
  for (const Tensor& p : parts) {
    LUM_CHECK(p.rank() == parts[0].rank()) << "concat: rank mismatch " << to_string(p.shape())
                                           << " vs " << to_string(parts[0].shape());
    total = total + p.shape()[a];
  }
  // Each part, zero-padded to the full extent at its offset; the sum is the concatenation.
  Tensor out;
  Expr offset = 0;
  for (const Tensor& p : parts) {
    const Expr len = p.shape()[a];
    Tensor placed = p.pad(static_cast<int>(a), offset, total - offset - len);
    out = offset == Expr(0) ? placed : out + placed;
    offset = offset + len;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& parts, int axis) {
  LUM_CHECK(!parts.empty()) << "stack: no tensors";
  std::vector<Tensor> expanded;
  const size_t a = normalize_axis(axis, parts[0].rank() + 1, "stack");
  for (const Tensor& p : parts) expanded.push_back(p.unsqueeze(static_cast<int>(a)));
  return concat(expanded, static_cast<int>(a));
}

namespace hlops {

FlatPositionParts flat_position_parts(const std::vector<Expr>& shape,
                                      const std::vector<Expr>& out_shape, size_t axis) {
  // Row-major strides of the data and the output's own coordinates from the flat index z.
  const size_t r = shape.size();
  std::vector<Expr> strides(r);
  Expr s = 1, inner = 1;
  for (size_t d = r; d-- > 0;) {
    strides[d] = s;
    s = s * shape[d];
  }
  Expr base = 0;
  const Expr z = "z";
  for (size_t d = r; d-- > 0;) {
    if (d != axis) base = base + (z / inner % out_shape[d]) * strides[d];
    inner = inner * out_shape[d];
  }
  return {base, strides[axis]};
}

Tensor flat_positions(const std::vector<Expr>& shape, const std::vector<Expr>& out_shape, int axis,
                      const Tensor& index) {
  const size_t r = shape.size();
  LUM_CHECK(out_shape.size() == r)
      << "index tensor rank " << out_shape.size() << " differs from the data rank " << r;
  const FlatPositionParts parts = flat_position_parts(shape, out_shape, static_cast<size_t>(axis));
  Graph& g = index.graph();
  const Tensor along = index.cast(DType::I64).broadcast_to(out_shape);
  return g.iota(parts.base, out_shape, DType::I64) + along * g.iota(parts.stride, {}, DType::I64);
}

}  // namespace hlops

Tensor Tensor::gather_axis(int axis, const Tensor& indices) const {
  const size_t a = normalize_axis(axis, rank(), "gather");
  return gather(hlops::flat_positions(shape(), indices.shape(), static_cast<int>(a), indices));
}

Tensor Tensor::index_select(int axis, const Tensor& indices) const {
  LUM_CHECK(indices.rank() == 1) << "index_select: indices must be 1-D, got "
                                 << to_string(indices.shape());
  const size_t a = normalize_axis(axis, rank(), "index_select");
  std::vector<Expr> out = shape(), line(rank(), Expr(1));
  out[a] = indices.shape()[0];
  line[a] = indices.shape()[0];
  return gather_axis(static_cast<int>(a), indices.reshape(line).broadcast_to(out));
}

Tensor Tensor::scatter_axis(int axis, const Tensor& indices, const Tensor& src) const {
  const size_t a = normalize_axis(axis, rank(), "scatter");
  LUM_CHECK(src.rank() == indices.rank())
      << "scatter: source rank " << src.rank() << " differs from index rank " << indices.rank();
  Tensor values = src;
  for (size_t d = 0; d < src.rank(); ++d)
    values = values.slice(static_cast<int>(d), 0, indices.shape()[d]);
  return scatter(hlops::flat_positions(shape(), indices.shape(), static_cast<int>(a), indices),
                 values);
}

namespace {

// A bool [rows, cols] mask from a predicate on (row, col) expressions.
template <class Pred>
Tensor triangle_mask(const Tensor& x, Pred pred) {
  LUM_CHECK(x.rank() >= 2) << "tril/triu: needs at least 2 dimensions, got "
                           << to_string(x.shape());
  const Expr rows = x.shape()[x.rank() - 2], cols = x.shape()[x.rank() - 1];
  const Expr z = "z";
  return x.graph().iota(pred(z / cols, z % cols), {rows, cols}, DType::Bool);
}

}  // namespace

Tensor Tensor::tril(int64_t k) const {
  const Tensor keep = triangle_mask(*this, [&](Expr r, Expr c) { return ge(r + k, c); });
  return where(keep, *this, 0.0);
}

Tensor Tensor::triu(int64_t k) const {
  const Tensor keep = triangle_mask(*this, [&](Expr r, Expr c) { return ge(c, r + k); });
  return where(keep, *this, 0.0);
}

Tensor Tensor::diagonal(int64_t k) const {
  LUM_CHECK(rank() >= 2) << "diagonal: needs at least 2 dimensions, got " << to_string(shape());
  const Expr rows = shape()[rank() - 2], cols = shape()[rank() - 1];
  const Expr r0 = k < 0 ? Expr(-k) : Expr(0), c0 = k > 0 ? Expr(k) : Expr(0);
  const Expr len = luminal::max(luminal::min(rows - r0, cols - c0), Expr(0));
  std::vector<Expr> out(shape().begin(), shape().end() - 2);
  out.push_back(len);
  const Expr z = "z", i = z % len;
  const Expr pos = z / len * (rows * cols) + (i + r0) * cols + (i + c0);
  return gather(graph().iota(pos, out, DType::I64));
}

}  // namespace luminal
