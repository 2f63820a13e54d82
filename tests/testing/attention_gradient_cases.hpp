// Attention's backward pass as autograd writes it (the scores' products and softmax over
// materialised [M, T] scores), in the shapes the attention-gradient rules must cover:
// causal and arbitrary masks, query heads sharing key heads, unequal head dims,
// lengths off the kernels' tiles. Each case builds q, k, v as
// parameters, the loss sum(attention(q, k, v) * w), and its gradients for q, k and v.
#pragma once

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "luminal/train/autograd.hpp"
#include "testing/run_outputs.hpp"

namespace luminal::testing {

struct AttentionGradientCase {
  int64_t batch, kv_heads, group, seq, d, dv;
  bool random_mask;  // a random mask of every row's own (keeping its own position) instead of the
                     // causal one
  DType dtype = DType::F32;
  bool symbolic = false;  // the sequence length a dim bound at run time

  std::string label() const {
    return std::to_string(batch) + "x" + std::to_string(kv_heads) + "x" + std::to_string(group) +
           " heads, " + std::to_string(seq) + " tokens, d " + std::to_string(d) + "/" +
           std::to_string(dv) + (random_mask ? ", random mask" : ", causal") +
           (symbolic ? ", symbolic length" : "") + ", " + std::string(dtype_name(dtype));
  }
};

inline std::vector<AttentionGradientCase> attention_gradient_cases(bool half_only = false) {
  std::vector<AttentionGradientCase> cases = {{2, 3, 1, 19, 8, 8, false},
                                              {1, 2, 1, 33, 16, 8, true},
                                              {2, 2, 1, 70, 16, 16, false},
                                              {1, 1, 1, 130, 32, 32, true},
                                              {2, 4, 1, 96, 64, 64, false},
                                              {1, 2, 1, 200, 64, 64, false},
                                              {1, 3, 1, 257, 64, 64, true},
                                              {2, 2, 1, 150, 128, 128, false},
                                              {2, 2, 1, 77, 32, 32, false, DType::F32, true}};
  std::vector<AttentionGradientCase> out;
  for (AttentionGradientCase c : cases)
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      if (half_only == (t == DType::F32)) continue;
      c.dtype = t;
      out.push_back(c);
    }
  return out;
}

/// The graph of one case: its gradients for q, k and v (retrieved), in that order.
inline std::vector<Tensor> attention_gradient_graph(Graph& cx, const AttentionGradientCase& c,
                                                    std::mt19937& rng) {
  const int64_t heads = c.kv_heads * c.group;
  const Expr seq = c.symbolic ? Expr::var("seq") : Expr(c.seq);
  if (c.symbolic) cx.set_dim("seq", c.seq);
  Tensor q = cx.named_tensor("q", {c.batch, heads, seq, c.d});
  Tensor k = cx.named_tensor("k", {c.batch, c.kv_heads, seq, c.d});
  Tensor v = cx.named_tensor("v", {c.batch, c.kv_heads, seq, c.dv});
  Tensor w = cx.named_tensor("w", {c.batch, heads, seq, c.dv});
  for (Tensor* t : {&q, &k, &v, &w}) {
    int64_t n = 1;
    for (const Expr& x : t->shape()) n *= x.eval(cx.dims());
    t->set(uniform_floats(rng, static_cast<size_t>(n), -2.0f, 2.0f));
  }
  Tensor mask = nn::causal_mask(cx, seq, 0);
  if (c.random_mask) {
    mask = cx.named_tensor("mask", {c.batch, heads, seq, seq}, DType::Bool);
    std::bernoulli_distribution kept(0.5);
    std::vector<double> keep(static_cast<size_t>(c.batch * heads * c.seq * c.seq));
    for (size_t i = 0; i < keep.size(); ++i)
      keep[i] =
          static_cast<int64_t>(i) / c.seq % c.seq == static_cast<int64_t>(i) % c.seq || kept(rng);
    mask.set_buffer(Buffer::from_doubles(keep, DType::Bool));
  }
  // Query heads of one key head side by side, as nn::Attention groups them.
  auto shared = [&](const Tensor& x) {
    std::vector<Expr> s = x.shape();
    return x.unsqueeze(2).expand(2, c.group).reshape({c.batch, heads, s[2], s[3]});
  };
  const Tensor qc = q.cast(c.dtype), kc = shared(k.cast(c.dtype)), vc = shared(v.cast(c.dtype));
  Tensor scores = qc.matmul(kc.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(c.d)));
  scores = where(mask, scores, -std::numeric_limits<double>::infinity());
  const Tensor out = scores.softmax(-1).matmul(vc).cast(DType::F32);
  const Tensor loss = (out * w).sum({0, 1, 2, 3});
  std::vector<Tensor> grads = train::gradients(loss, {q, k, v});
  for (Tensor& g : grads) g = g.contiguous().retrieve();  // (laid out as the parameters)
  return grads;
}

}  // namespace luminal::testing
