// View algebra: movement ops as metadata edits, and index/valid expressions.
#include "luminal/view.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "luminal/error.hpp"

namespace luminal {

size_t normalize_axis(int64_t axis, size_t rank, const char* op) {
  const auto r = static_cast<int64_t>(rank);
  LUM_CHECK(axis >= -r && axis < r) << op << ": axis " << axis << " out of range for rank " << rank
                                    << " (valid: " << -r << ".." << r - 1 << ")";
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

int64_t ConcreteView::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

bool ConcreteView::has_mask() const {
  for (size_t d = 0; d < dims.size(); ++d)
    if (mask_lo[d] > 0 || mask_hi[d] < dims[d]) return true;
  return false;
}

bool ConcreteView::is_dense() const {
  if (has_mask()) return false;
  int64_t expected = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (dims[d] != 1 && strides[d] != expected) return false;
    expected *= dims[d];
  }
  return true;
}

std::optional<std::pair<int64_t, int64_t>> ConcreteView::physical_range() const {
  int64_t lo = offset, hi = offset;
  for (size_t d = 0; d < dims.size(); ++d) {
    const int64_t a = std::max<int64_t>(mask_lo[d], 0);
    const int64_t b = std::min<int64_t>(mask_hi[d], dims[d]);
    if (a >= b) return std::nullopt;  // nothing valid
    const int64_t x = a * strides[d], y = (b - 1) * strides[d];
    lo += std::min(x, y);
    hi += std::max(x, y);
  }
  return std::make_pair(lo, hi);
}

Buffer read_view(const Buffer& src, const ConcreteView& v) {
  if (auto range = v.physical_range()) {
    LUM_CHECK(range->first >= 0 && static_cast<uint64_t>(range->second) < src.numel())
        << "view reads elements " << range->first << ".." << range->second << " of a buffer of "
        << src.numel();
  }
  const size_t size = dtype_size(src.dtype());
  const auto* in = static_cast<const std::byte*>(src.data());
  const size_t rank = v.dims.size();
  // Row-major, unmasked, unit innermost stride: one copy (the common case of reading
  // back an output).
  bool dense = true;
  int64_t expect = 1;
  for (size_t d = rank; d-- > 0;) {
    dense = dense && (v.dims[d] == 1 || v.strides[d] == expect) && v.mask_lo[d] <= 0 &&
            v.mask_hi[d] >= v.dims[d];
    expect *= v.dims[d];
  }
  if (dense) {
    Buffer out(src.dtype(), static_cast<size_t>(v.numel()), Buffer::Uninitialized{});
    std::memcpy(out.data(), in + v.offset * static_cast<int64_t>(size), out.bytes());
    return out;
  }
  Buffer out(src.dtype(), static_cast<size_t>(v.numel()));
  auto* dst = static_cast<std::byte*>(out.data());
  std::vector<int64_t> idx(rank, 0);
  // Row-major walk with an odometer; the physical index follows incrementally.
  int64_t phys = v.offset;
  for (int64_t k = 0, n = v.numel(); k < n; ++k) {
    bool valid = true;
    for (size_t d = 0; d < rank; ++d)
      valid = valid && idx[d] >= v.mask_lo[d] && idx[d] < v.mask_hi[d];
    if (valid)
      std::memcpy(dst + static_cast<size_t>(k) * size, in + phys * static_cast<int64_t>(size),
                  size);
    for (size_t d = rank; d-- > 0;) {
      phys += v.strides[d];
      if (++idx[d] < v.dims[d]) break;
      phys -= v.strides[d] * v.dims[d];
      idx[d] = 0;
    }
  }
  return out;
}

View View::contiguous(const std::vector<Expr>& shape) {
  View v;
  v.dims_ = shape;
  v.strides_.resize(shape.size());
  Expr s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    v.strides_[i] = s;
    s = s * shape[i];
  }
  v.mask_lo_.assign(shape.size(), Expr(0));
  v.mask_hi_ = shape;
  return v;
}

bool View::is_masked(size_t d) const {
  return mask_lo_[d] != Expr(0) || mask_hi_[d] != dims_[d];
}

bool View::has_mask() const {
  for (size_t d = 0; d < rank(); ++d)
    if (is_masked(d)) return true;
  return false;
}

bool View::is_contiguous() const {
  if (!(offset_ == Expr(0)) || has_mask()) return false;
  const View row_major = contiguous(dims_);
  for (size_t d = 0; d < rank(); ++d)
    if (!(dims_[d] == Expr(1)) && !(strides_[d] == row_major.strides_[d])) return false;
  return true;
}

bool View::repeats() const {
  for (size_t d = 0; d < rank(); ++d)
    if (strides_[d] == Expr(0) && !(dims_[d] == Expr(1))) return true;
  return false;
}

View View::substitute(const std::vector<std::pair<std::string, Expr>>& map) const {
  View v = *this;
  for (auto* part : {&v.dims_, &v.strides_, &v.mask_lo_, &v.mask_hi_})
    for (Expr& e : *part) e = e.substitute(map);
  v.offset_ = offset_.substitute(map);
  return v;
}

View View::permute(const std::vector<int>& axes) const {
  LUM_CHECK(axes.size() == rank()) << "permute: got " << axes.size() << " axes for a rank-"
                                   << rank() << " view of shape " << to_string();
  std::vector<bool> seen(rank(), false);
  View out;
  out.offset_ = offset_;
  for (int a : axes) {
    const size_t d = normalize_axis(a, rank(), "permute");
    LUM_CHECK(!seen[d]) << "permute: axis " << a << " repeated";
    seen[d] = true;
    out.dims_.push_back(dims_[d]);
    out.strides_.push_back(strides_[d]);
    out.mask_lo_.push_back(mask_lo_[d]);
    out.mask_hi_.push_back(mask_hi_[d]);
  }
  return out;
}

View View::expand_dim(int axis, Expr size) const {
  const size_t d = normalize_axis(axis, rank() + 1, "expand");
  View out = *this;
  out.dims_.insert(out.dims_.begin() + static_cast<std::ptrdiff_t>(d), size);
  out.strides_.insert(out.strides_.begin() + static_cast<std::ptrdiff_t>(d), Expr(0));
  out.mask_lo_.insert(out.mask_lo_.begin() + static_cast<std::ptrdiff_t>(d), Expr(0));
  out.mask_hi_.insert(out.mask_hi_.begin() + static_cast<std::ptrdiff_t>(d), size);
  return out;
}

std::vector<Expr> broadcast_shapes(const std::vector<Expr>& a, const std::vector<Expr>& b,
                                   const char* op) {
  const size_t r = std::max(a.size(), b.size());
  std::vector<Expr> out(r);
  for (size_t i = 0; i < r; ++i) {
    const bool has_a = i < a.size(), has_b = i < b.size();
    const Expr da = has_a ? a[a.size() - 1 - i] : Expr(1);
    const Expr db = has_b ? b[b.size() - 1 - i] : Expr(1);
    Expr d;
    if (da == db || db == Expr(1)) {
      d = da;
    } else if (da == Expr(1)) {
      d = db;
    } else {
      LUM_FAIL() << op << ": cannot broadcast shapes " << luminal::to_string(a) << " and "
                 << luminal::to_string(b) << " (dimension " << i << " from the right: " << da
                 << " vs " << db << ")";
    }
    out[r - 1 - i] = d;
  }
  return out;
}

View View::broadcast_to(const std::vector<Expr>& shape) const {
  LUM_CHECK(shape.size() >= rank()) << "broadcast_to: cannot broadcast " << to_string()
                                    << " to fewer dimensions " << luminal::to_string(shape);
  View out = *this;
  while (out.rank() < shape.size()) out = out.expand_dim(0, 1);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (out.dims_[d] == shape[d]) continue;
    LUM_CHECK(out.dims_[d] == Expr(1))
        << "broadcast_to: cannot broadcast shape " << luminal::to_string(dims_) << " to "
        << luminal::to_string(shape) << " (dimension " << d << ": " << out.dims_[d] << " vs "
        << shape[d] << ")";
    // The single element is either valid or padding; it stays so along the new extent.
    const Expr single_valid = logical_and(ge(0, out.mask_lo_[d]), lt(0, out.mask_hi_[d]));
    out.dims_[d] = shape[d];
    out.strides_[d] = 0;
    out.mask_lo_[d] = 0;
    out.mask_hi_[d] = shape[d] * single_valid;
  }
  return out;
}

namespace {

// True when q is provably a factor of p (as products of the same symbols).
bool divides(Expr p, Expr q) {
  return exact_quotient(p, q).has_value();
}

// Products of sums multiplied out, so that one count written two ways ((a + b)*c and
// a*c + b*c, as traced shapes give them) compares equal.
Expr multiplied_out(Expr e) {
  if (e.op() == ExprOp::Add) return multiplied_out(e.lhs()) + multiplied_out(e.rhs());
  if (e.op() != ExprOp::Mul) return e;
  const Expr a = multiplied_out(e.lhs()), b = multiplied_out(e.rhs());
  if (a.op() == ExprOp::Add) return multiplied_out(a.lhs() * b) + multiplied_out(a.rhs() * b);
  if (b.op() == ExprOp::Add) return multiplied_out(a * b.lhs()) + multiplied_out(a * b.rhs());
  return a * b;
}

bool same_count(Expr a, Expr b) {
  return a == b || multiplied_out(a) == multiplied_out(b);
}

}  // namespace

std::optional<View> View::reshape(const std::vector<Expr>& shape) const {
  LUM_CHECK(same_count(numel(), product(shape)))
      << "reshape: cannot reshape " << luminal::to_string(dims_) << " (" << numel()
      << " elements) to " << luminal::to_string(shape) << " (" << product(shape) << " elements)";
  // An empty tensor reads nothing, so any layout serves.
  if (numel() == Expr(0)) return contiguous(shape);
  // Size-1 dims carry no addressing; they may be dropped if fully valid.
  std::vector<size_t> old_dims;
  for (size_t d = 0; d < rank(); ++d) {
    if (dims_[d] == Expr(1)) {
      if (is_masked(d)) return std::nullopt;
    } else {
      old_dims.push_back(d);
    }
  }
  std::vector<size_t> new_dims;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != Expr(1)) new_dims.push_back(d);

  View out;
  out.offset_ = offset_;
  out.dims_ = shape;
  out.strides_.assign(shape.size(), Expr(0));
  out.mask_lo_.assign(shape.size(), Expr(0));
  out.mask_hi_ = shape;

  size_t i = 0, j = 0;
  while (i < old_dims.size() && j < new_dims.size()) {
    // Grow a group of old dims [i, i2) and new dims [j, j2) until both products agree.
    size_t i2 = i + 1, j2 = j + 1;
    Expr po = dims_[old_dims[i]], pn = shape[new_dims[j]];
    while (!same_count(po, pn)) {
      const auto co = po.as_const(), cn = pn.as_const();
      const bool grow_new = (co && cn) ? *cn < *co : divides(po, pn);
      if (grow_new && j2 < new_dims.size()) {
        pn = pn * shape[new_dims[j2++]];
      } else if (i2 < old_dims.size()) {
        po = po * dims_[old_dims[i2++]];
      } else if (j2 < new_dims.size()) {
        pn = pn * shape[new_dims[j2++]];
      } else {
        return std::nullopt;  // products never met symbolically
      }
    }
    if (i2 - i == 1 && j2 - j == 1) {
      const size_t o = old_dims[i], n = new_dims[j];
      out.strides_[n] = strides_[o];
      out.mask_lo_[n] = mask_lo_[o];
      out.mask_hi_[n] = mask_hi_[o];
    } else {
      // Merging or splitting needs the old dims to be one strided run, unmasked.
      for (size_t k = i; k < i2; ++k) {
        const size_t o = old_dims[k];
        if (is_masked(o)) return std::nullopt;
        if (k + 1 < i2) {
          const size_t o2 = old_dims[k + 1];
          if (strides_[o] != strides_[o2] * dims_[o2]) return std::nullopt;
        }
      }
      Expr stride = strides_[old_dims[i2 - 1]];
      for (size_t k = j2; k-- > j;) {
        out.strides_[new_dims[k]] = stride;
        stride = stride * shape[new_dims[k]];
      }
    }
    i = i2;
    j = j2;
  }
  if (i != old_dims.size() || j != new_dims.size()) return std::nullopt;
  return out;
}

View View::from_parts(std::vector<Expr> dims, std::vector<Expr> strides, Expr offset,
                      std::vector<Expr> mask_lo, std::vector<Expr> mask_hi) {
  LUM_CHECK(strides.size() == dims.size() && mask_lo.size() == dims.size() &&
            mask_hi.size() == dims.size())
      << "View::from_parts: parts of different ranks";
  View v;
  v.dims_ = std::move(dims);
  v.strides_ = std::move(strides);
  v.offset_ = offset;
  v.mask_lo_ = std::move(mask_lo);
  v.mask_hi_ = std::move(mask_hi);
  return v;
}

View View::slice(int axis, Expr start, Expr end) const {
  const size_t d = normalize_axis(axis, rank(), "slice");
  // Symbolic bounds are checked where provable; the rest is checked when bound.
  const Expr len = end - start;
  LUM_CHECK(start.upper_bound() >= 0) << "slice: negative start " << start << " on axis " << d;
  LUM_CHECK(len.upper_bound() >= 0)
      << "slice: end " << end << " < start " << start << " on axis " << d;
  LUM_CHECK((end - dims_[d]).lower_bound() <= 0)
      << "slice: end " << end << " exceeds dimension " << d << " of size " << dims_[d];
  View out = *this;
  out.offset_ = offset_ + start * strides_[d];
  out.dims_[d] = len;
  out.mask_lo_[d] = max(mask_lo_[d] - start, Expr(0));
  out.mask_hi_[d] = min(mask_hi_[d] - start, len);
  return out;
}

View View::pad(int axis, Expr before, Expr after) const {
  const size_t d = normalize_axis(axis, rank(), "pad");
  LUM_CHECK(before.upper_bound() >= 0 && after.upper_bound() >= 0)
      << "pad: padding (" << before << ", " << after << ") of dimension " << d
      << " must be non-negative";
  View out = *this;
  out.offset_ = offset_ - before * strides_[d];
  out.dims_[d] = dims_[d] + before + after;
  out.mask_lo_[d] = mask_lo_[d] + before;
  out.mask_hi_[d] = mask_hi_[d] + before;
  return out;
}

View View::flip(int axis) const {
  const size_t d = normalize_axis(axis, rank(), "flip");
  View out = *this;
  out.offset_ = offset_ + (dims_[d] - 1) * strides_[d];
  out.strides_[d] = -strides_[d];
  out.mask_lo_[d] = dims_[d] - mask_hi_[d];
  out.mask_hi_[d] = dims_[d] - mask_lo_[d];
  return out;
}

std::optional<View> View::unfold(int axis, Expr size, Expr step, Expr dilation) const {
  const size_t d = normalize_axis(axis, rank(), "unfold");
  const Expr span = dilation * (size - 1) + 1;
  LUM_CHECK((dims_[d] - span).upper_bound() >= 0)
      << "unfold: window of " << span << " elements does not fit dimension " << d << " of size "
      << dims_[d];
  if (is_masked(d)) return std::nullopt;
  View out = *this;
  out.dims_[d] = (dims_[d] - span) / step + 1;
  out.strides_[d] = strides_[d] * step;
  out.mask_hi_[d] = out.dims_[d];
  out.dims_.push_back(size);
  out.strides_.push_back(strides_[d] * dilation);
  out.mask_lo_.push_back(0);
  out.mask_hi_.push_back(size);
  return out;
}

Expr View::index(const std::vector<Expr>& idx) const {
  LUM_ASSERT(idx.size() == rank()) << "index: " << idx.size() << " indices for rank " << rank();
  Expr e = offset_;
  for (size_t d = 0; d < rank(); ++d) e = e + idx[d] * strides_[d];
  return e;
}

Expr View::valid(const std::vector<Expr>& idx) const {
  LUM_ASSERT(idx.size() == rank()) << "valid: " << idx.size() << " indices for rank " << rank();
  Expr v = 1;
  for (size_t d = 0; d < rank(); ++d) {
    if (mask_lo_[d] != Expr(0)) v = logical_and(v, ge(idx[d], mask_lo_[d]));
    if (mask_hi_[d] != dims_[d]) v = logical_and(v, lt(idx[d], mask_hi_[d]));
  }
  return v;
}

std::vector<Expr> View::unflatten(Expr flat) const {
  std::vector<Expr> idx(rank());
  Expr inner = 1;
  for (size_t d = rank(); d-- > 0;) {
    Expr q = flat / inner;
    idx[d] = d == 0 ? q : q % dims_[d];
    inner = inner * dims_[d];
  }
  return idx;
}

ConcreteView View::resolve(const Bindings& b) const {
  ConcreteView c;
  resolve_into(b, c);
  return c;
}

void View::resolve_into(const Bindings& b, ConcreteView& c) const {
  c.offset = offset_.eval(b);
  c.dims.resize(rank());
  c.strides.resize(rank());
  c.mask_lo.resize(rank());
  c.mask_hi.resize(rank());
  for (size_t d = 0; d < rank(); ++d) {
    c.dims[d] = dims_[d].eval(b);
    c.strides[d] = strides_[d].eval(b);
    c.mask_lo[d] = mask_lo_[d].eval(b);
    c.mask_hi[d] = mask_hi_[d].eval(b);
  }
}

std::string View::to_string() const {
  std::ostringstream os;
  os << "{shape=" << luminal::to_string(dims_) << " strides=" << luminal::to_string(strides_);
  if (offset_ != Expr(0)) os << " offset=" << offset_;
  if (has_mask()) {
    os << " mask=[";
    for (size_t d = 0; d < rank(); ++d) {
      os << (d ? ", " : "");
      if (is_masked(d)) {
        os << mask_lo_[d] << ".." << mask_hi_[d];
      } else {
        os << "*";
      }
    }
    os << "]";
  }
  os << "}";
  return os.str();
}

}  // namespace luminal
