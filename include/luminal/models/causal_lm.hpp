// A decoder-only language model as a generator drives it: token ids at positions
// past .. past + seq - 1 in, next-token logits and the grown KV cache out.
#pragma once

#include <string>
#include <vector>

#include "luminal/nn/attention.hpp"

namespace luminal::models {

class CausalLM : public nn::Module {
 public:
  struct Output {
    Tensor logits;                   // [seq, vocab]; [1, vocab] with last_only
    std::vector<nn::KVCache> cache;  // per layer, [past + seq, kv_heads, head_dim]
  };
  /// tokens: i32 [seq]. `last_only`: the logits of the last position only, all a
  /// generator needs; the output projection, the largest product, then runs on one row.
  virtual Output forward(const Tensor& tokens, Expr seq = "seq", Expr past = "past",
                         bool last_only = false) const = 0;

  /// Per layer, the cache the forward pass reads: ["past", kv_heads, head_dim], f32 or
  /// f16 (attention computes in f32 either way; see nn::Attention::forward).
  std::vector<nn::KVCache> cache_inputs;

 protected:
  /// Appends the next layer's cache inputs, named cache.<layer>.k / .v.
  void add_cache_inputs(Graph& g, int64_t kv_heads, int64_t head_dim, DType dtype) {
    LUM_CHECK(dtype == DType::F32 || dtype == DType::F16)
        << "KV cache: " << dtype_name(dtype) << " is not supported (f32 or f16)";
    const std::vector<Expr> shape{"past", kv_heads, head_dim};
    const std::string name = "cache." + std::to_string(cache_inputs.size());
    cache_inputs.push_back(
        {g.named_tensor(name + ".k", shape, dtype), g.named_tensor(name + ".v", shape, dtype)});
  }
};

}  // namespace luminal::models
