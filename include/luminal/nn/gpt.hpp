// A GPT-2-style decoder for training: token and learned position embeddings, pre-norm
// blocks of causal multi-head attention and a GELU (tanh) MLP, a final LayerNorm and an
// output projection tied to the token embedding. Batched ([batch, seq] ids), no cache:
// the shape a training step runs. Parameter names and layouts follow nanoGPT's
// torch.nn.Linear modules (wte, wpe, h.<i>.ln_1, h.<i>.attn.c_attn, ...).
#pragma once

#include <vector>

#include "luminal/nn/layers.hpp"

namespace luminal::nn {

struct GptConfig {
  int64_t vocab = 0, context = 0, layers = 0, heads = 0, dim = 0;
  double eps = 1e-5;
  /// The type the products and activations run in. F16 or BF16 give mixed precision:
  /// the parameters stay in their own type (f32 master weights, which the gradients
  /// come back in), read through casts; LayerNorms and the logits run in f32.
  DType compute = DType::F32;
};

class Gpt final : public Module {
 public:
  /// `prefix` starts every parameter's name ("" or "model.", say).
  Gpt(Graph& g, const std::string& prefix, GptConfig config);
  /// ids [batch, seq] (i32 or i64, seq <= context) -> logits [batch, seq, vocab].
  Tensor forward(const Tensor& ids) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;

  struct Block {
    LayerNorm ln_1, ln_2;
    Linear c_attn, attn_proj, c_fc, mlp_proj;
  };
  GptConfig config;
  Embedding wte, wpe;
  std::vector<Block> blocks;
  LayerNorm ln_f;
};

}  // namespace luminal::nn
