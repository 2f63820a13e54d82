// The Llama family (Llama 2/3, Mistral with its sliding window, Qwen2 with qkv bias,
// Qwen3 with q/k norms, Phi-3 with fused projections, Mixtral and Qwen3-MoE experts): config from a
// Hugging Face config.json, the decoder as a luminal graph with a KV cache, weights by HF names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "luminal/collective.hpp"
#include "luminal/models/causal_lm.hpp"
#include "luminal/models/gguf.hpp"
#include "luminal/nn/moe.hpp"
#include "luminal/nn/tensor_parallel.hpp"

namespace luminal::models {

struct LlamaConfig {
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0,
          head_dim = 0;
  double rms_eps = 1e-6, rope_theta = 10000.0;
  nn::RopeScaling rope_scaling{};
  int64_t sliding_window = 0;  // 0: full causal attention
  bool tie_embeddings = false, qkv_bias = false;
  bool qk_norm = false;            // per-head RMS norms on queries and keys (Qwen 3)
  bool fused_projections = false;  // qkv_proj / gate_up_proj checkpoints (Phi-3)
  /// RoPE over the two halves of each head (HF); GGUF "llama" files store q/k rows
  /// permuted for llama.cpp's rotation of interleaved pairs, which then gives the same.
  bool neox_rope = true;
  // Mixture of experts (Mixtral, Qwen3-MoE): 0 experts means a dense MLP.
  int64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;
  bool renormalize_experts = true;
  std::string moe_block = "mlp";  // Mixtral: block_sparse_moe
  /// Reads a Hugging Face config.json; missing or malformed fields are errors naming them.
  static LlamaConfig from_hf_json(const std::string& path);
  /// From GGUF metadata (architectures llama, qwen2, qwen3); what the file needs that
  /// this model lacks (experts, RoPE frequency factors) is an error naming it.
  static LlamaConfig from_gguf(const GgufFile& f);
};

class Llama final : public CausalLM {
 public:
  /// Builds parameters and per-layer KV-cache inputs.
  /// `kv_cache`: the KV cache's element type, f32 or f16.
  /// `tensor_parallel`: this graph is one rank's part of the model (Megatron-LM's split:
  /// attention by heads, the feed-forward by its hidden units, the KV cache by heads; the
  /// embeddings and norms whole; the output projection split by vocabulary where it is not
  /// the embedding's and the vocabulary divides, its logits gathered), its partial sums
  /// added up over the ranks with all_reduce. Head and hidden-unit counts must divide by
  /// the rank count.
  Llama(Graph& g, const LlamaConfig& c, DType kv_cache = DType::F32,
        std::shared_ptr<Communicator> tensor_parallel = nullptr);

  Output forward(const Tensor& tokens, Expr seq = "seq", Expr past = "past",
                 bool last_only = false) const override;
  void parameters(const std::string& prefix, nn::NamedTensors& out) const override;

  /// Which dimension of parameter `name` (a Hugging Face name) the ranks split: 0 for the
  /// column-parallel products (q/k/v, gate/up, and their biases, and lm_head where the
  /// vocabulary is split), 1 for the row-parallel ones (o, down); nullopt for what every
  /// rank holds whole.
  std::optional<int> split_dim(const std::string& name) const;
  /// Whether each rank computes the logits of a part of the vocabulary.
  bool splits_vocabulary() const;
  /// This rank's part of the weights (split_dim over tensor_parallel's ranks).
  nn::Sharding sharding() const;

  LlamaConfig config;                             // of the whole model
  std::shared_ptr<Communicator> tensor_parallel;  // null: one rank
  nn::Embedding embed;
  struct Layer {
    nn::RMSNorm input_norm, post_norm;
    nn::Attention attn;
    std::optional<nn::GatedMLP> mlp;
    std::optional<nn::MoE> moe;
  };
  std::vector<Layer> layers;
  nn::RMSNorm norm;
  nn::Linear lm_head;
};

/// Loads every parameter from a safetensors file with Hugging Face names. Returns the
/// file's tensors that no parameter used (a model missing a part shows up here).
std::vector<std::string> load_safetensors_weights(const nn::Module& m, const std::string& path);
/// The same over the shards of one checkpoint (model-00001-of-00002.safetensors, ...).
std::vector<std::string> load_safetensors_weights(const nn::Module& m,
                                                  const std::vector<std::string>& shards);

/// Writes every parameter's current value under its Hugging Face name (atomically).
void save_safetensors_weights(const nn::Module& m, const std::string& path);

}  // namespace luminal::models
