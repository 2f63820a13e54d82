// The Attention kernel op: reference semantics and its view check.
#include "luminal/compiler/attention_op.hpp"

#include <cmath>
#include <limits>
#include <numbers>

namespace luminal::compiler {

std::vector<int64_t> AttentionOp::row_strides(const std::vector<int64_t>& dims) const {
  const size_t n = dims.size();
  std::vector<int64_t> strides(n);
  int64_t stride = 1;
  for (size_t i = n; i-- > 0;) {  // stored dim i (its order's, or dim i)
    const size_t dim = out_order.empty() ? i : static_cast<size_t>(out_order[i]);
    strides[dim] = stride;
    stride *= dims[dim];
  }
  return strides;
}

Buffer AttentionOp::run(const std::vector<Buffer>& in, const std::vector<std::vector<int64_t>>& s,
                        const std::vector<int64_t>& /*out_shape*/, DType out_dtype) const {
  // q, k: [batch..., M, D, T]; v: [batch..., M, T, Dv]; mask: [batch..., M, T]; all
  // row-major (already read through their views). In double, as the products and the
  // softmax they replace would be on the reference interpreter.
  const size_t r = s[0].size();
  const int64_t d = s[0][r - 2], t_len = s[0][r - 1], dv = s[2][r - 1];
  int64_t rows = 1;
  for (size_t i = 0; i + 2 < r; ++i) rows *= s[0][i];
  Buffer out(out_dtype, static_cast<size_t>(rows * dv));
  // Where each row is stored.
  const std::vector<int64_t> dims(s[0].begin(), s[0].end() - 2), strides = row_strides(dims);
  auto stored = [&](int64_t row) {
    int64_t at = 0;
    for (size_t i = dims.size(); i-- > 0; row /= dims[i]) at += row % dims[i] * strides[i];
    return at;
  };
  std::vector<double> score(static_cast<size_t>(t_len));
  for (int64_t row = 0; row < rows; ++row) {
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < t_len; ++t) {
      double dot = 0;
      for (int64_t p = 0; p < d; ++p) {
        const auto at = static_cast<size_t>((row * d + p) * t_len + t);
        dot += in[0].get_f64(at) * in[1].get_f64(at);
      }
      const bool keep = in[3].get_f64(static_cast<size_t>(row * t_len + t)) != 0;
      score[t] = keep ? dot * scale : -std::numeric_limits<double>::infinity();
      top = std::max(top, score[t]);
    }
    double sum = 0;
    for (double& e : score) sum += (e = std::exp(e - top));
    for (int64_t j = 0; j < dv; ++j) {
      double acc = 0;
      for (int64_t t = 0; t < t_len; ++t)
        acc += score[t] / sum * in[2].get_f64(static_cast<size_t>((row * t_len + t) * dv + j));
      out.set_f64(static_cast<size_t>(stored(row) * dv + j), acc);
    }
  }
  return out;
}

std::string AttentionGradOp::name() const {
  switch (part) {
    case AttentionGradPart::Stats:
      return "AttentionStats";
    case AttentionGradPart::Queries:
      return "AttentionGradQ";
    case AttentionGradPart::KeysValues:
      break;
  }
  return "AttentionGradKV";
}

Buffer AttentionGradOp::run(const std::vector<Buffer>& in,
                            const std::vector<std::vector<int64_t>>& s,
                            const std::vector<int64_t>& out_shape, DType out_dtype) const {
  // q, k: [batch..., M, D, T]; v: [batch..., M, T, Dv]; mask: [batch..., M, T]; dout:
  // [batch..., M, Dv]; stats: [batch..., M, 2]; all row-major. In double.
  const size_t r = s[0].size();
  const int64_t rows_per_point = s[0][r - 3], d = s[0][r - 2], t_len = s[0][r - 1],
                dv = s[2][r - 1];
  int64_t points = 1;
  for (size_t i = 0; i + 3 < r; ++i) points *= s[0][i];
  const double inf = std::numeric_limits<double>::infinity();
  const double scale2 = scale * std::numbers::log2e;  // scores to the base-2 exponent
  int64_t count = 1;
  for (int64_t x : out_shape) count *= x;
  std::vector<double> acc(static_cast<size_t>(count), 0.0);
  std::vector<double> score(static_cast<size_t>(t_len)), dp(static_cast<size_t>(t_len));
  for (int64_t point = 0; point < points; ++point)
    for (int64_t m = 0; m < rows_per_point; ++m) {
      const int64_t row = point * rows_per_point + m;
      for (int64_t t = 0; t < t_len; ++t) {
        double dot = 0, dot_v = 0;
        for (int64_t p = 0; p < d; ++p) {
          const auto at = static_cast<size_t>((row * d + p) * t_len + t);
          dot += in[0].get_f64(at) * in[1].get_f64(at);
        }
        for (int64_t j = 0; j < dv; ++j)
          dot_v += in[4].get_f64(static_cast<size_t>(row * dv + j)) *
                   in[2].get_f64(static_cast<size_t>((row * t_len + t) * dv + j));
        const bool keep = in[3].get_f64(static_cast<size_t>(row * t_len + t)) != 0;
        score[t] = keep ? dot * scale2 : -inf;
        dp[t] = dot_v;
      }
      if (part == AttentionGradPart::Stats) {
        double top = -inf, sum = 0, weighted = 0;
        for (double x : score) top = std::max(top, x);
        for (int64_t t = 0; t < t_len; ++t) {
          const double e = score[t] == -inf ? 0.0 : std::exp2(score[t] - top);
          sum += e;
          weighted += e * dp[t];
        }
        acc[static_cast<size_t>(row * 2)] = sum > 0 ? top + std::log2(sum) : -inf;
        acc[static_cast<size_t>(row * 2 + 1)] = sum > 0 ? weighted / sum : 0.0;
        continue;
      }
      const double lse = in[5].get_f64(static_cast<size_t>(row * 2));
      const double delta = in[5].get_f64(static_cast<size_t>(row * 2 + 1));
      for (int64_t t = 0; t < t_len; ++t) {
        const double p = score[t] == -inf ? 0.0 : std::exp2(score[t] - lse);
        const double ds = p * (dp[t] - delta) * scale;
        if (part == AttentionGradPart::Queries) {
          for (int64_t c = 0; c < d; ++c)
            acc[static_cast<size_t>(row * d + c)] +=
                ds * in[1].get_f64(static_cast<size_t>((row * d + c) * t_len + t));
          continue;
        }
        const int64_t base = (point * t_len + t) * (d + dv);
        for (int64_t c = 0; c < d; ++c)
          acc[static_cast<size_t>(base + c)] +=
              ds * in[0].get_f64(static_cast<size_t>((row * d + c) * t_len + t));
        for (int64_t j = 0; j < dv; ++j)
          acc[static_cast<size_t>(base + d + j)] +=
              p * in[4].get_f64(static_cast<size_t>(row * dv + j));
      }
    }
  Buffer out(out_dtype, static_cast<size_t>(count));
  for (size_t i = 0; i < acc.size(); ++i) out.set_f64(i, acc[i]);
  return out;
}

bool is_broadcast_along_last(const View& v) {
  const size_t r = v.rank();
  if (r == 0 || v.has_mask() || !(v.offset() == Expr(0))) return false;
  const auto& shape = v.shape();
  const auto& strides = v.strides();
  if (!(strides[r - 1] == Expr(0)) && !(shape[r - 1] == Expr(1))) return false;
  Expr expected = 1;
  for (size_t i = r - 1; i-- > 0;) {
    if (!(shape[i] == Expr(1)) && !(strides[i] == expected)) return false;
    expected = expected * shape[i];
  }
  return true;
}

std::optional<Expr> computed_mask(const Graph& g, const Node& attention) {
  // (The mask is input 3 of Attention and of its gradients.)
  const bool forward =
      dynamic_cast<const AttentionOp*>(attention.custom.get()) && attention.inputs.size() == 4;
  if (!forward && !dynamic_cast<const AttentionGradOp*>(attention.custom.get()))
    return std::nullopt;
  const Edge& mask = attention.inputs[3];
  const Node& source = g.node(mask.source);
  if (source.op != Op::Iota || source.dtype != DType::Bool) return std::nullopt;
  const View& v = mask.view;
  const size_t r = v.rank();
  if (r < 2) return std::nullopt;
  // Batch coordinates as variables of their own, which must drop out.
  std::vector<Expr> idx(r);
  VarRanges ranges;
  for (size_t i = 0; i < r; ++i) {
    const std::string name = i + 2 == r   ? "lum_m"
                             : i + 1 == r ? "lum_t"
                                          : "lum_b" + std::to_string(i);
    idx[i] = v.shape()[i] == Expr(1) ? Expr(0) : Expr::var(name);
    ranges[name] = {0, v.shape()[i]};
  }
  const Expr keep =
      simplify_within(logical_and(v.valid(idx), source.iota.substitute("z", v.index(idx))), ranges);
  size_t dims = 0;
  for (const std::string& name : keep.variables()) {
    if (name.starts_with("lum_b")) return std::nullopt;
    if (name != "lum_m" && name != "lum_t") ++dims;
  }
  if (dims > kMaxComputedMaskDims) return std::nullopt;
  return keep;
}

}  // namespace luminal::compiler
