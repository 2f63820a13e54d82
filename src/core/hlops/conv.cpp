// Convolution (unfold + matmul) and pooling (unfold + reduce).
#include <limits>

#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal {
namespace {

void check_conv(const Tensor& x, const Tensor& w, size_t spatial, const ConvOptions& o,
                const char* op) {
  LUM_CHECK(x.rank() == spatial + 2) << op << ": input must be [N, C, "
                                     << (spatial == 1   ? "L"
                                         : spatial == 2 ? "H, W"
                                                        : "D, H, W")
                                     << "], got " << to_string(x.shape());
  LUM_CHECK(w.rank() == spatial + 2)
      << op << ": weight must have rank " << spatial + 2 << ", got " << to_string(w.shape());
  LUM_CHECK(o.stride > 0 && o.dilation > 0 && o.groups > 0 && o.padding >= 0)
      << op << ": stride, dilation and groups must be positive and padding non-negative";
  LUM_CHECK(x.shape()[1] == w.shape()[1] * o.groups)
      << op << ": input channels " << x.shape()[1] << " != weight channels " << w.shape()[1]
      << " x groups " << o.groups;
  LUM_CHECK(w.shape()[0] % Expr(o.groups) == Expr(0))
      << op << ": output channels " << w.shape()[0] << " not divisible by groups " << o.groups;
}

// x [N, C, S...] -> windows [N, C, O..., K...] over the trailing `spatial` dims.
Tensor windows(Tensor x, const std::vector<Expr>& kernel, int64_t stride, int64_t padding,
               int64_t dilation, double fill) {
  const size_t spatial = kernel.size(), first = x.rank() - spatial;
  for (size_t s = 0; s < spatial; ++s)
    if (padding) x = x.pad(static_cast<int>(first + s), padding, padding, fill);
  // Each unfold turns one spatial dim into its window count and appends the window.
  for (size_t s = 0; s < spatial; ++s)
    x = x.unfold(static_cast<int>(first + s), kernel[s], stride, dilation);
  return x;
}

Tensor conv(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvOptions& o,
            size_t spatial, const char* op) {
  check_conv(x, w, spatial, o, op);
  const Expr n = x.shape()[0], c = x.shape()[1], out_ch = w.shape()[0];
  const Expr g = o.groups, cg = c / g, og = out_ch / g;
  std::vector<Expr> kernel(w.shape().end() - static_cast<std::ptrdiff_t>(spatial), w.shape().end());
  Tensor cols = windows(x, kernel, o.stride, o.padding, o.dilation, 0.0);  // [N, C, O..., K...]
  std::vector<Expr> out_sizes(cols.shape().begin() + 2,
                              cols.shape().begin() + 2 + static_cast<std::ptrdiff_t>(spatial));
  // [N, g, Cg, O..., K...] -> [N, g, O..., Cg, K...] -> [N, g, P, Cg*K]
  std::vector<Expr> grouped{n, g, cg};
  grouped.insert(grouped.end(), cols.shape().begin() + 2, cols.shape().end());
  std::vector<int> order{0, 1};
  for (size_t s = 0; s < spatial; ++s) order.push_back(static_cast<int>(3 + s));
  order.push_back(2);
  for (size_t s = 0; s < spatial; ++s) order.push_back(static_cast<int>(3 + spatial + s));
  // (The sum's length spelled out, not -1: with a symbolic batch the element count does
  // not divide out.)
  const Expr sum = cg * product(kernel);
  Tensor patches = cols.reshape(grouped).permute(order).reshape({n, g, product(out_sizes), sum});
  const Tensor weights = w.reshape({g, og, sum}).transpose(-1, -2);  // [g, Cg*K, Og]
  Tensor out = patches.matmul(weights);                             // [N, g, P, Og]
  std::vector<Expr> final_shape{n, out_ch};
  final_shape.insert(final_shape.end(), out_sizes.begin(), out_sizes.end());
  out = out.permute({0, 1, 3, 2}).reshape(final_shape);
  if (bias.graph_ptr()) {
    LUM_CHECK(bias.rank() == 1 && bias.shape()[0] == out_ch)
        << op << ": bias must be [" << out_ch << "], got " << to_string(bias.shape());
    std::vector<Expr> line(final_shape.size(), Expr(1));
    line[1] = out_ch;
    out = out + bias.reshape(line);
  }
  return out;
}

Tensor pool(const Tensor& x, PoolOptions o, size_t spatial, bool is_max, const char* op) {
  LUM_CHECK(x.rank() >= spatial) << op << ": input " << to_string(x.shape()) << " has fewer than "
                                 << spatial << " dimensions";
  LUM_CHECK(o.kernel > 0 && o.stride >= 0 && o.padding >= 0 && o.padding * 2 <= o.kernel)
      << op << ": invalid kernel " << o.kernel << ", stride " << o.stride << ", padding "
      << o.padding;
  const int64_t stride = o.stride ? o.stride : o.kernel;
  const double fill = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
  const Tensor w =
      windows(x, std::vector<Expr>(spatial, Expr(o.kernel)), stride, o.padding, 1, fill);
  std::vector<int> window_axes;
  for (size_t s = 0; s < spatial; ++s) window_axes.push_back(-1 - static_cast<int>(s));
  return is_max ? w.max(window_axes) : w.mean(window_axes);
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvOptions o) {
  return conv(x, weight, bias, o, 1, "conv1d");
}
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvOptions o) {
  return conv(x, weight, bias, o, 2, "conv2d");
}
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, ConvOptions o) {
  return conv(x, weight, bias, o, 3, "conv3d");
}
Tensor max_pool1d(const Tensor& x, PoolOptions o) {
  return pool(x, o, 1, true, "max_pool1d");
}
Tensor max_pool2d(const Tensor& x, PoolOptions o) {
  return pool(x, o, 2, true, "max_pool2d");
}
Tensor max_pool3d(const Tensor& x, PoolOptions o) {
  return pool(x, o, 3, true, "max_pool3d");
}
Tensor avg_pool1d(const Tensor& x, PoolOptions o) {
  return pool(x, o, 1, false, "avg_pool1d");
}
Tensor avg_pool2d(const Tensor& x, PoolOptions o) {
  return pool(x, o, 2, false, "avg_pool2d");
}
Tensor avg_pool3d(const Tensor& x, PoolOptions o) {
  return pool(x, o, 3, false, "avg_pool3d");
}

}  // namespace luminal
