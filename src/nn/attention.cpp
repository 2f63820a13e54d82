// RoPE, causal masks and grouped-query attention.
#include "luminal/nn/attention.hpp"

#include <cmath>
#include <limits>

#include "luminal/error.hpp"

namespace luminal::nn {

Tensor rope_frequencies(Graph& g, int64_t d, const RopeConfig& rope) {
  using Kind = RopeScaling::Kind;
  const RopeScaling& s = rope.scaling;
  LUM_CHECK(s.kind == Kind::None || s.factor > 0)
      << "rope scaling factor must be positive, got " << s.factor;
  const int64_t half = d / 2;
  const Tensor index = g.iota(Expr("z"), {half}, DType::F32);
  // inv_freq[i] = theta^(-2i/d).
  const Tensor inv_freq = (index * (-2.0 * std::log2(rope.theta) / static_cast<double>(d))).exp2();
  switch (s.kind) {
    case Kind::None:
      return inv_freq;
    case Kind::Linear:  // positions / factor, folded into the frequencies
      return inv_freq * (1.0 / s.factor);
    case Kind::Llama3: {
      LUM_CHECK(s.original_context > 0 && s.high_freq_factor != s.low_freq_factor)
          << "llama3 rope scaling needs original_max_position_embeddings and distinct frequency "
             "factors";
      const double low_wavelen = s.original_context / s.low_freq_factor;
      const double high_wavelen = s.original_context / s.high_freq_factor;
      const Tensor wavelen = (2.0 * M_PI) / inv_freq;
      const Tensor scaled = where(gt(wavelen, low_wavelen), inv_freq / s.factor, inv_freq);
      const Tensor smooth = (s.original_context / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      const Tensor smoothed = (1.0 - smooth) * scaled / s.factor + smooth * scaled;
      const Tensor medium = logical_and(ge(wavelen, high_wavelen), le(wavelen, low_wavelen));
      return where(medium, smoothed, scaled);
    }
    case Kind::Yarn: {
      LUM_CHECK(s.original_context > 0)
          << "yarn rope scaling needs original_max_position_embeddings";
      // The head dimension at which a frequency turns `rotations` times over the context.
      const auto correction_dim = [&](double rotations) {
        return d * std::log(s.original_context / (rotations * 2.0 * M_PI)) /
               (2.0 * std::log(rope.theta));
      };
      double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
      if (s.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(d - 1));
      if (low == high) high += 0.001;
      // 0 keeps the original frequency (extrapolates), 1 divides it by the factor.
      const Tensor ramp = ((index - low) / (high - low)).clamp(0.0, 1.0);
      return inv_freq * (ramp / s.factor + (1.0 - ramp));
    }
  }
  LUM_FAIL() << "unknown rope scaling kind";
}

double rope_attention_factor(const RopeScaling& s) {
  if (s.kind != RopeScaling::Kind::Yarn) return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  return s.factor <= 1 ? 1.0 : 0.1 * std::log(s.factor) + 1.0;
}

Tensor apply_rope(const Tensor& x, const RopeConfig& rope, Expr past) {
  Graph& g = x.graph();
  const Expr seq = x.dim(-2);
  const int64_t d = *x.dim(-1).as_const();
  LUM_CHECK(d % 2 == 0) << "apply_rope: head dimension " << d << " must be even";
  const int64_t half = d / 2;
  const Tensor positions = g.iota(past + Expr("z"), {seq}, DType::F32);
  const Tensor angle =
      positions.unsqueeze(1) * rope_frequencies(g, d, rope).unsqueeze(0);  // [seq, half]
  Tensor cos = angle.cos(), sin = angle.sin();
  if (const double a = rope_attention_factor(rope.scaling); a != 1.0) {
    cos = cos * a;
    sin = sin * a;
  }
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
  // The cache is position-major ([past, kv, d]), so a step's keys and values append at
  // its end, in place when the caller donates the cache (Graph::donate). A cache kept in
  // another type (f16 halves its memory and reads) is rounded on the way in and widened
  // on the way out; the compiler's MatMul reads the narrow values without a widened copy.
  // (cast is the tensor itself where the types already agree.)
  KVCache next{append_rows(cache.k, kr.permute({1, 0, 2}).cast(cache.k.dtype())),
               append_rows(cache.v, vh.permute({1, 0, 2}).cast(cache.v.dtype()))};
  const Tensor keys = next.k.cast(x.dtype()).permute({1, 0, 2}),
               values = next.v.cast(x.dtype()).permute({1, 0, 2});
  // Scores [kv, group, seq, total]; each key head serves its group of query heads.
  Tensor scores = qr.matmul(keys.unsqueeze(1).transpose(-1, -2)) * scale;
  if (softcap > 0) scores = (scores * (1.0 / softcap)).tanh() * softcap;
  scores = where(causal_mask(x.graph(), seq, past, window), scores,
                 -std::numeric_limits<double>::infinity());
  const Tensor probs = scores.softmax(-1);
  const Tensor out = probs.matmul(values.unsqueeze(1));  // [kv, group, seq, d]
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
