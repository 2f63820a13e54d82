// Rotary position embeddings and multi-head attention with grouped key/value heads and
// a functional KV cache: the cache is an input of [kv_heads, past, head_dim] per layer
// and the updated cache an output, so decoding only rebinds the symbolic `past` and
// `seq` dims (no recompilation).
#pragma once

#include <optional>

#include "luminal/nn/layers.hpp"

namespace luminal::nn {

struct RopeConfig {
  double theta = 10000.0;
  /// true: rotate the two halves of each head (GPT-NeoX / Llama in HF); false: rotate
  /// interleaved pairs (the original RoPE / GPT-J layout).
  bool neox = true;
  /// Linear position scaling (positions are divided by this factor).
  double linear_scale = 1.0;
};

/// Rotates x [..., seq, head_dim] for positions past, past+1, ...
Tensor apply_rope(const Tensor& x, const RopeConfig& rope, Expr past);

/// Bool [seq, past + seq] mask: query i may see key j when j <= past + i (and, with a
/// window, past + i - j < window).
Tensor causal_mask(Graph& g, Expr seq, Expr past, int64_t window = 0);

struct KVCache {
  Tensor k, v;  // [kv_heads, past, head_dim]
};

class Attention final : public Module {
 public:
  /// `window` > 0 limits each query to the last `window` keys (sliding-window attention).
  Attention(Graph& g, const std::string& name, int64_t dim, int64_t heads, int64_t kv_heads,
            int64_t head_dim, bool qkv_bias, RopeConfig rope, int64_t window = 0);
  /// Optional per-head RMS norms on queries and keys before RoPE (Gemma 3, Qwen 3).
  void enable_qk_norm(Graph& g, const std::string& name, double eps, bool unit_offset);
  /// x: [seq, dim]. Returns the output [seq, dim] and the cache extended by `seq`.
  std::pair<Tensor, KVCache> forward(const Tensor& x, const KVCache& cache, Expr seq,
                                     Expr past) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;

  Linear q, k, v, o;
  int64_t heads, kv_heads, head_dim;
  RopeConfig rope;
  int64_t window;
  double scale;        // applied to q·k; 1/sqrt(head_dim) by default
  double softcap = 0;  // > 0: scores become softcap * tanh(scores / softcap) (Gemma 2)
  std::optional<RMSNorm> q_norm, k_norm;
};

}  // namespace luminal::nn
