// Rotary position embeddings and multi-head attention with grouped key/value heads and
// a functional KV cache: the cache is an input of [past, kv_heads, head_dim] per layer
// and the updated cache an output (append_rows, in place when the cache is donated), so
// decoding only rebinds the symbolic `past` and `seq` dims (no recompilation).
#pragma once

#include <optional>

#include "luminal/nn/layers.hpp"

namespace luminal::nn {

/// Context-extension schemes that reshape RoPE's frequencies (HF `rope_scaling`).
struct RopeScaling {
  enum class Kind { None, Linear, Llama3, Yarn };
  Kind kind = Kind::None;
  double factor = 1.0;
  /// The context the model was pretrained on (Llama 3 and YaRN).
  double original_context = 0.0;
  /// Llama 3: wavelengths above original_context / low_freq_factor are divided by
  /// `factor`, those below original_context / high_freq_factor kept, and those between
  /// blended smoothly.
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  /// YaRN: rotations per context that bound the ramp from extrapolated to interpolated
  /// frequencies, and the factor applied to cos/sin (0 = the paper's 0.1 ln(factor) + 1).
  double beta_fast = 32.0, beta_slow = 1.0, attention_factor = 0.0;
  bool truncate = true;
};

struct RopeConfig {
  double theta = 10000.0;
  /// true: rotate the two halves of each head (GPT-NeoX / Llama in HF); false: rotate
  /// interleaved pairs (the original RoPE / GPT-J layout).
  bool neox = true;
  RopeScaling scaling{};
};

/// RoPE's inverse frequencies [head_dim / 2], after `rope.scaling`.
Tensor rope_frequencies(Graph& g, int64_t head_dim, const RopeConfig& rope);
/// The factor YaRN applies to cos and sin (1 for the other schemes).
double rope_attention_factor(const RopeScaling& scaling);

/// Rotates x [..., seq, head_dim] for positions past, past+1, ...
Tensor apply_rope(const Tensor& x, const RopeConfig& rope, Expr past);

/// Bool [seq, past + seq] mask: query i may see key j when j <= past + i (and, with a
/// window, past + i - j < window).
Tensor causal_mask(Graph& g, Expr seq, Expr past, int64_t window = 0);

struct KVCache {
  Tensor k, v;  // [past, kv_heads, head_dim]: position-major, so steps append rows
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
