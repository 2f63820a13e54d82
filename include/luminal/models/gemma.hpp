// The Gemma family: GeGLU (tanh GELU), embeddings scaled by sqrt(hidden), RMS norms
// scaling by (1 + w) in Hugging Face checkpoints (GGUF files store 1 + w), a tied output
// embedding. Gemma 2 adds norms after attention and MLP, attention and final-logit
// soft-capping, a query scale and sliding-window layers; Gemma 3 adds per-head q/k norms
// and a local RoPE base on its sliding layers. Built from a Hugging Face config.json or
// from GGUF metadata.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "luminal/models/causal_lm.hpp"
#include "luminal/models/gguf.hpp"
#include "luminal/nn/tensor_parallel.hpp"

namespace luminal::models {

struct GemmaConfig {
  int version = 3;  // 1, 2 or 3
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0,
          head_dim = 0;
  double rms_eps = 1e-6, rope_global = 1e4, rope_local = 1e4;
  /// Applies to global (non-sliding) layers only, as in HF Gemma 3.
  nn::RopeScaling rope_scaling{};        // full-attention layers
  nn::RopeScaling rope_local_scaling{};  // sliding layers (transformers 5 configs may set it)
  double query_scale = 0;  // 0: 1/sqrt(head_dim)
  double attn_softcap = 0, final_softcap = 0;
  int64_t sliding_window = 0;
  std::vector<bool> sliding;  // per layer
  bool unit_offset = true;    // norms scale by (1 + w)
  static GemmaConfig from_gguf(const GgufFile& f);
  static GemmaConfig from_hf_json(const std::string& path);
};

class Gemma final : public CausalLM {
 public:
  /// `kv_cache`: the KV cache's element type, f32 or f16.
  Gemma(Graph& g, const GemmaConfig& c, DType kv_cache = DType::F32);

  Output forward(const Tensor& tokens, Expr seq = "seq", Expr past = "past",
                 bool last_only = false) const override;
  void parameters(const std::string& prefix, nn::NamedTensors& out) const override;

  GemmaConfig config;
  nn::Embedding embed;
  struct Layer {
    nn::RMSNorm input_norm, pre_ffn_norm;
    std::optional<nn::RMSNorm> post_attn_norm, post_ffn_norm;  // Gemma 2 and 3
    nn::Attention attn;
    nn::GatedMLP mlp;
  };
  std::vector<Layer> layers;
  nn::RMSNorm norm;
};

/// Loads parameters named as in Hugging Face checkpoints from a GGUF file using the
/// llama.cpp tensor names. Matrices in a block or half format stay in it (block-stored
/// inputs, which the compiler turns into QMatMul kernels); everything else is decoded to
/// f32. Missing tensors or unsupported types are errors naming the tensor. Returns the
/// file's tensors that no parameter used. `sharding`: load one rank's part (a split block
/// matrix's rows, or columns in whole blocks).
std::vector<std::string> load_gguf_weights(const nn::Module& m, const GgufFile& f,
                                           const std::string& architecture,
                                           const nn::Sharding& sharding = {});

/// The GGUF tensor name for a Hugging Face parameter name (empty if none).
std::string gguf_tensor_name(const std::string& hf_name, const std::string& architecture);

}  // namespace luminal::models
