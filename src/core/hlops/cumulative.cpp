// Cumulative ops along an axis: each output position reduces a sliding window over
// the input padded in front (unfold), O(n^2) work that the compiler may replace.
#include <limits>

#include "core/hlops/common.hpp"
#include "luminal/error.hpp"

namespace luminal {
namespace {

// Window i covers inputs 0..i (padding with `fill` before them), as a last dimension.
Tensor prefix_windows(const Tensor& x, int axis, double fill) {
  const size_t a = normalize_axis(axis, x.rank(), "cumulative");
  const Tensor moved = x.transpose(static_cast<int>(a), -1);
  const Expr n = moved.shape().back();
  return moved.pad(-1, n - 1, 0, fill).unfold(-1, n, 1);
}

Tensor move_back(const Tensor& t, int axis, size_t rank) {
  return t.transpose(static_cast<int>(normalize_axis(axis, rank, "cumulative")), -1);
}

}  // namespace

Tensor Tensor::cumsum(int axis) const {
  return move_back(prefix_windows(*this, axis, 0).sum({-1}), axis, rank());
}

Tensor Tensor::cummax(int axis) const {
  const double lowest = is_float(dtype_) ? -std::numeric_limits<double>::infinity()
                                         : static_cast<double>(std::numeric_limits<int32_t>::min());
  return move_back(prefix_windows(*this, axis, lowest).max({-1}), axis, rank());
}

Tensor Tensor::cumprod(int axis) const {
  return hlops::product_through_logs(hlops::as_float(*this),
                                     [&](const Tensor& t) { return t.cumsum(axis); });
}

}  // namespace luminal
