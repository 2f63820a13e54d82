// Views re-expressed over another layout of the value they read (see walks.hpp).
#include "compiler/walks.hpp"

#include <algorithm>

namespace luminal::compiler {

std::optional<Walks> walks_of(const View& v, const std::vector<Expr>& shape) {
  const size_t rank = v.rank(), rx = shape.size();
  const std::optional<int64_t> offset = v.offset().as_const();
  if (rx == 0 || !offset) return std::nullopt;
  Walks w{std::vector<int>(rank, -1), std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank),
          std::vector<int64_t>(rx), std::vector<int64_t>(rx, 0)};
  std::vector<int64_t> row(rx, 1), low(rx, 0), high(rx, 0);
  for (size_t e = 0; e < rx; ++e) {
    const std::optional<int64_t> s = shape[e].as_const();
    if (s && *s <= 0) return std::nullopt;
    if (!s && (e > 0 || rx < 2)) return std::nullopt;
    w.value_size[e] = s ? *s : -1;
  }
  for (size_t e = rx - 1; e-- > 0;) row[e] = row[e + 1] * w.value_size[e + 1];
  bool batch_walked = false;
  int64_t first = *offset;  // the flat index of the first valid element
  for (size_t d = 0; d < rank; ++d) {
    const std::optional<int64_t> n = v.shape()[d].as_const(), st = v.strides()[d].as_const();
    if (!st || *st < 0) return std::nullopt;
    if (!n) {  // the symbolic batch, walked whole
      if (w.value_size[0] >= 0 || *st != row[0] || !(v.shape()[d] == shape[0]) || batch_walked ||
          v.is_masked(d))
        return std::nullopt;
      batch_walked = true;
      w.dim[d] = 0;
      w.step[d] = 1;
      w.view_size[d] = -1;
      continue;
    }
    w.view_size[d] = *n;
    // The valid indices along d: [lo, hi).
    int64_t lo = 0, hi = *n;
    if (v.is_masked(d)) {
      const std::optional<int64_t> l = v.mask_lo(d).as_const(), h = v.mask_hi(d).as_const();
      if (!l || !h) return std::nullopt;
      lo = std::max<int64_t>(*l, 0), hi = std::min(*h, *n);
    }
    if (hi <= lo) return std::nullopt;  // nothing valid: nothing to walk
    first += lo * *st;
    if (*n == 1 || *st == 0) continue;
    size_t e = 0;
    while (row[e] > *st || *st % row[e] != 0) ++e;  // (row[rx - 1] = 1 divides any)
    w.dim[d] = static_cast<int>(e);
    w.step[d] = *st / row[e];
    low[e] += w.step[d] * lo;
    high[e] += w.step[d] * (hi - 1);
  }
  // The first valid element's index along each value dim, less its walks' start, is the
  // dim's origin; every walk must then stay within the dim.
  if (first < 0) return std::nullopt;
  for (size_t e = 0; e < rx; ++e) {
    const int64_t at = e == 0 ? first / row[0] : first / row[e] % w.value_size[e];
    w.origin[e] = at - low[e];
    if (w.value_size[e] < 0 ? w.origin[e] != 0 || high[e] > 0
                            : w.origin[e] + high[e] > w.value_size[e] - 1)
      return std::nullopt;
  }
  return w;
}

std::optional<Restrided> strides_over(const Walks& w, const std::vector<int>& order) {
  std::vector<int64_t> row(w.value_size.size(), 1);  // by the value's dim
  for (size_t i = order.size() - 1; i-- > 0;) {
    const int64_t inner = w.value_size[static_cast<size_t>(order[i + 1])];
    if (inner < 0) return std::nullopt;
    row[static_cast<size_t>(order[i])] = row[static_cast<size_t>(order[i + 1])] * inner;
  }
  Restrided out{{}, 0};
  int64_t offset = 0;
  for (size_t e = 0; e < row.size(); ++e) offset += w.origin[e] * row[e];
  out.offset = offset;
  for (size_t d = 0; d < w.dim.size(); ++d)
    out.strides.push_back(w.dim[d] < 0 ? Expr(0)
                                       : Expr(w.step[d] * row[static_cast<size_t>(w.dim[d])]));
  return out;
}

std::optional<View> over_order(const View& v, const std::vector<Expr>& shape,
                               const std::vector<int>& order) {
  const std::optional<Walks> walks = walks_of(v, shape);
  const std::optional<Restrided> r = walks ? strides_over(*walks, order) : std::nullopt;
  if (!r) return std::nullopt;
  std::vector<Expr> lo, hi;
  for (size_t d = 0; d < v.rank(); ++d) lo.push_back(v.mask_lo(d)), hi.push_back(v.mask_hi(d));
  return View::from_parts(v.shape(), r->strides, r->offset, lo, hi);
}

}  // namespace luminal::compiler
