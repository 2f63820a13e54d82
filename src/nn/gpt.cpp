// A GPT-2-style decoder for training (see luminal/nn/gpt.hpp).
#include "luminal/nn/gpt.hpp"

#include <cmath>
#include <limits>

#include "luminal/error.hpp"
#include "luminal/nn/attention.hpp"

namespace luminal::nn {

Gpt::Gpt(Graph& g, const std::string& prefix, GptConfig c)
    : config(c),
      wte(g, prefix + "wte", c.vocab, c.dim),
      wpe(g, prefix + "wpe", c.context, c.dim),
      ln_f(g, prefix + "ln_f", c.dim, c.eps) {
  LUM_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.heads > 0 && c.dim > 0 &&
            c.dim % c.heads == 0)
      << "Gpt: needs positive sizes and dim (" << c.dim << ") a multiple of heads (" << c.heads
      << ")";
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = prefix + "h." + std::to_string(i) + ".";
    blocks.push_back(Block{LayerNorm(g, p + "ln_1", c.dim, c.eps),
                           LayerNorm(g, p + "ln_2", c.dim, c.eps),
                           Linear(g, p + "attn.c_attn", c.dim, 3 * c.dim, true),
                           Linear(g, p + "attn.c_proj", c.dim, c.dim, true),
                           Linear(g, p + "mlp.c_fc", c.dim, 4 * c.dim, true),
                           Linear(g, p + "mlp.c_proj", 4 * c.dim, c.dim, true)});
  }
}

namespace {

// x W^T + b with the parameters read in x's type.
Tensor linear(const Linear& l, const Tensor& x) {
  return x.matmul(l.weight.cast(x.dtype()).transpose(0, 1)) + l.bias.cast(x.dtype());
}

// A LayerNorm in f32 whatever the activations' type, as mixed precision keeps it.
Tensor norm(const LayerNorm& n, const Tensor& x) {
  return n.forward(x.cast(n.weight.dtype())).cast(x.dtype());
}

}  // namespace

Tensor Gpt::forward(const Tensor& ids) const {
  LUM_CHECK(ids.rank() == 2) << "Gpt: ids must be [batch, seq], got " << to_string(ids.shape());
  Graph& g = ids.graph();
  const Expr batch = ids.dim(0), seq = ids.dim(1);
  const int64_t heads = config.heads, head_dim = config.dim / config.heads;
  const DType c = config.compute;
  const Tensor positions = g.iota(Expr("z"), {seq}, DType::I32);
  // The embeddings read in the compute type, so their gradients (a product with the
  // tokens' one-hot matrix) run in it too.
  auto embed = [&](const Embedding& e, const Tensor& at) {
    std::vector<Expr> shape = at.shape();
    shape.push_back(config.dim);
    return e.weight.cast(c).index_select(0, at.reshape({-1})).reshape(shape);
  };
  Tensor x = embed(wte, ids) + embed(wpe, positions);  // [batch, seq, dim]
  const Tensor causal = causal_mask(g, seq, 0);
  for (const Block& b : blocks) {
    // Causal self-attention over [batch, heads, seq, head_dim].
    const Tensor qkv = linear(b.c_attn, norm(b.ln_1, x)).reshape({batch, seq, 3, heads, head_dim});
    auto part = [&](int64_t k) { return qkv.slice(2, k, k + 1).squeeze(2).permute({0, 2, 1, 3}); };
    const Tensor q = part(0), k = part(1), v = part(2);
    Tensor scores =
        q.matmul(k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
    scores = where(causal, scores, -std::numeric_limits<double>::infinity());
    const Tensor attended =
        scores.softmax(-1).matmul(v).permute({0, 2, 1, 3}).reshape({batch, seq, config.dim});
    x = x + linear(b.attn_proj, attended);
    x = x + linear(b.mlp_proj, linear(b.c_fc, norm(b.ln_2, x)).gelu_tanh());
  }
  // Logits through the token embedding (tied weights), in f32. A vocabulary that is not
  // a multiple of 64 (GPT-2's 50257) is padded with zero rows for the product and the
  // extra logits dropped: matrix products over an unaligned width run several times
  // slower (5 ms against 1 at GPT-2 small's shape on an H100).
  const Tensor h = norm(ln_f, x);
  Tensor head = wte.weight.cast(c);
  const int64_t padded = (config.vocab + 63) / 64 * 64;
  if (padded != config.vocab) head = head.pad(0, 0, padded - config.vocab).contiguous();
  Tensor logits = h.matmul(head.transpose(0, 1));
  if (padded != config.vocab) logits = logits.slice(-1, 0, config.vocab);
  return logits.cast(wte.weight.dtype());
}

void Gpt::parameters(const std::string& prefix, NamedTensors& out) const {
  wte.parameters(prefix + "wte.", out);
  wpe.parameters(prefix + "wpe.", out);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = blocks[i];
    const std::string p = prefix + "h." + std::to_string(i) + ".";
    b.ln_1.parameters(p + "ln_1.", out);
    b.c_attn.parameters(p + "attn.c_attn.", out);
    b.attn_proj.parameters(p + "attn.c_proj.", out);
    b.ln_2.parameters(p + "ln_2.", out);
    b.c_fc.parameters(p + "mlp.c_fc.", out);
    b.mlp_proj.parameters(p + "mlp.c_proj.", out);
  }
  ln_f.parameters(prefix + "ln_f.", out);
}

}  // namespace luminal::nn
