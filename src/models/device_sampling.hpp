// Drawing a sampled token where the logits lie (a GPU's memory; private to src/models):
// sample()'s draw as graph ops over the most likely logits (top_k), so a sampled step
// copies no logits back, and the next step can be queued on its token before the host
// reads it, as greedy steps are.
#pragma once

#include <cstdint>

#include "luminal/models/sampling.hpp"
#include "luminal/tensor.hpp"

namespace luminal::models {

class DeviceSampler {
 public:
  /// Builds the draw from `logits` (one row of `vocab`; f32, f16 or bf16) in their graph,
  /// over the `most` most likely (fewer where the vocabulary is smaller). Its inputs: the
  /// options, and uniform numbers in [0, 1), the graph's dim "draws" of them, of which
  /// the dim "draw" picks the one a run takes.
  DeviceSampler(const Tensor& logits, int64_t vocab, int64_t most);

  /// Whether the draw follows `opts`: a temperature above 0 and a top k of 1 to `most`
  /// that cuts the vocabulary (without one, sample() draws from every token within reach
  /// of the most likely).
  bool follows(const SamplingOptions& opts) const;
  /// Sets `opts` and the next `count` uniform numbers of `rng` (sample()'s stream); draw
  /// i then takes the i-th (Graph::set_dim("draw", i)).
  void set_draws(const SamplingOptions& opts, int64_t count, uint64_t& rng) const;

  /// The drawn id: i32 [1], the candidates' index where the cumulative weight of the
  /// candidates (most likely first, cut to top k and then to the top-p nucleus) first
  /// reaches the uniform number times their total.
  Tensor token;

 private:
  Tensor uniforms_, options_;
  int64_t vocab_, most_;
};

}  // namespace luminal::models
