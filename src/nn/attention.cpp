// RoPE, causal masks and grouped-query attention.
#include "luminal/nn/attention.hpp"

#include <cmath>
#include <limits>

#include "luminal/error.hpp"

namespace luminal::nn {

Tensor apply_rope(const Tensor& x, const RopeConfig& rope, Expr past) {
  Graph& g = x.graph();
  const Expr seq = x.dim(-2);
  const int64_t d = *x.dim(-1).as_const();
  LUM_CHECK(d % 2 == 0) << "apply_rope: head dimension " << d << " must be even";
  const int64_t half = d / 2;
  // inv_freq[i] = theta^(-2i/d); angle[p][i] = position p * inv_freq[i].
  const Tensor inv_freq =
      (g.iota(Expr("z"), {half}, DType::F32) * (-2.0 * std::log2(rope.theta) / d)).exp2();
  Tensor positions = g.iota(past + Expr("z"), {seq}, DType::F32);
  if (rope.linear_scale != 1.0) positions = positions * (1.0 / rope.linear_scale);
  const Tensor angle = positions.unsqueeze(1) * inv_freq.unsqueeze(0);  // [seq, half]
  const Tensor cos = angle.cos(), sin = angle.sin();
  if (rope.neox) {
    const Tensor x1 = x.slice(-1, 0, half), x2 = x.slice(-1, half, d);
    return concat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1);
  }
  // Interleaved pairs (x[2i], x[2i+1]).
  std::vector<Expr> pairs = x.shape();
  pairs.back() = half;
  pairs.push_back(2);
  const Tensor xp = x.reshape(pairs);
  const Tensor a = xp.slice(-1, 0, 1).squeeze(-1), b = xp.slice(-1, 1, 2).squeeze(-1);
  return stack({a * cos - b * sin, b * cos + a * sin}, -1).reshape(x.shape());
}

Tensor causal_mask(Graph& g, Expr seq, Expr past, int64_t window) {
  const Expr total = past + seq, z = "z";
  const Expr query = past + z / total, key = z % total;
  Expr allowed = ge(query, key);
  if (window > 0) allowed = logical_and(allowed, lt(query - key, Expr(window)));
  return g.iota(allowed, {seq, total}, DType::Bool);
}

Attention::Attention(Graph& g, const std::string& name, int64_t dim, int64_t heads_,
                     int64_t kv_heads_, int64_t head_dim_, bool qkv_bias, RopeConfig rope_,
                     int64_t window_)
    : q(g, name + ".q_proj", dim, heads_ * head_dim_, qkv_bias),
      k(g, name + ".k_proj", dim, kv_heads_ * head_dim_, qkv_bias),
      v(g, name + ".v_proj", dim, kv_heads_ * head_dim_, qkv_bias),
      o(g, name + ".o_proj", heads_ * head_dim_, dim, false),
      heads(heads_),
      kv_heads(kv_heads_),
      head_dim(head_dim_),
      rope(rope_),
      window(window_),
      scale(1.0 / std::sqrt(static_cast<double>(head_dim_))) {
  LUM_CHECK(heads % kv_heads == 0) << "attention: " << heads << " heads are not a multiple of "
                                   << kv_heads << " key/value heads";
}

std::pair<Tensor, KVCache> Attention::forward(const Tensor& x, const KVCache& cache, Expr seq,
                                              Expr past) const {
  const int64_t group = heads / kv_heads;
  // [seq, h*d] -> [kv_heads, group, seq, d] for queries, [kv_heads, seq, d] for keys/values.
  const Tensor qh = q.forward(x).reshape({seq, kv_heads, group, head_dim}).permute({1, 2, 0, 3});
  const Tensor kh = k.forward(x).reshape({seq, kv_heads, head_dim}).permute({1, 0, 2});
  const Tensor vh = v.forward(x).reshape({seq, kv_heads, head_dim}).permute({1, 0, 2});
  const Tensor qr = apply_rope(q_norm ? q_norm->forward(qh) : qh, rope, past);
  const Tensor kr = apply_rope(k_norm ? k_norm->forward(kh) : kh, rope, past);
  KVCache next{concat({cache.k, kr}, 1), concat({cache.v, vh}, 1)};  // [kv, past+seq, d]
  // Scores [kv, group, seq, total]; each key head serves its group of query heads.
  Tensor scores = qr.matmul(next.k.unsqueeze(1).transpose(-1, -2)) * scale;
  if (softcap > 0) scores = (scores * (1.0 / softcap)).tanh() * softcap;
  scores = where(causal_mask(x.graph(), seq, past, window), scores,
                 -std::numeric_limits<double>::infinity());
  const Tensor probs = scores.softmax(-1);
  const Tensor out = probs.matmul(next.v.unsqueeze(1));  // [kv, group, seq, d]
  const Tensor merged = out.permute({2, 0, 1, 3}).reshape({seq, heads * head_dim});
  return {o.forward(merged), next};
}

void Attention::enable_qk_norm(Graph& g, const std::string& name, double eps, bool unit_offset) {
  q_norm.emplace(g, name + ".q_norm", head_dim, eps, unit_offset);
  k_norm.emplace(g, name + ".k_norm", head_dim, eps, unit_offset);
}

void Attention::parameters(const std::string& prefix, NamedTensors& out) const {
  if (q_norm) q_norm->parameters(prefix + "q_norm.", out);
  if (k_norm) k_norm->parameters(prefix + "k_norm.", out);
  q.parameters(prefix + "q_proj.", out);
  k.parameters(prefix + "k_proj.", out);
  v.parameters(prefix + "v_proj.", out);
  o.parameters(prefix + "o_proj.", out);
}

}  // namespace luminal::nn
