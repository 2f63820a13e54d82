// Gemma 3 (text): sandwich norms around attention and MLP, per-head q/k RMS norms,
// GeGLU (tanh GELU), embeddings scaled by sqrt(hidden), sliding-window attention on five
// of every six layers with a local RoPE base, tied output embedding. Built from GGUF
// metadata and weights (whose norm weights already include Gemma's +1).
#pragma once

#include <string>
#include <vector>

#include "luminal/models/gguf.hpp"
#include "luminal/nn/attention.hpp"

namespace luminal::models {

struct Gemma3Config {
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0,
          head_dim = 0;
  double rms_eps = 1e-6, rope_global = 1e6, rope_local = 1e4;
  int64_t sliding_window = 512,
          sliding_pattern = 6;  // layer i is global when (i + 1) % pattern == 0
  static Gemma3Config from_gguf(const GgufFile& f);
  bool is_global(int64_t layer) const { return (layer + 1) % sliding_pattern == 0; }
};

class Gemma3 final : public nn::Module {
 public:
  Gemma3(Graph& g, const Gemma3Config& c);

  struct Output {
    Tensor logits;                   // [seq, vocab]
    std::vector<nn::KVCache> cache;  // per layer, grown by seq
  };
  Output forward(const Tensor& tokens, Expr seq = "seq", Expr past = "past") const;
  void parameters(const std::string& prefix, nn::NamedTensors& out) const override;

  Gemma3Config config;
  nn::Embedding embed;
  struct Layer {
    nn::RMSNorm input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
    nn::Attention attn;
    nn::GatedMLP mlp;
  };
  std::vector<Layer> layers;
  nn::RMSNorm norm;
  std::vector<nn::KVCache> cache_inputs;
};

/// Loads parameters named as in Hugging Face checkpoints from a GGUF file using the
/// llama.cpp tensor names, dequantising to f32. Missing tensors or unsupported types are
/// errors naming the tensor. Returns the file's tensors that no parameter used.
std::vector<std::string> load_gguf_weights(const nn::Module& m, const GgufFile& f,
                                           const std::string& architecture);

/// The GGUF tensor name for a Hugging Face parameter name (empty if none).
std::string gguf_tensor_name(const std::string& hf_name, const std::string& architecture);

}  // namespace luminal::models
