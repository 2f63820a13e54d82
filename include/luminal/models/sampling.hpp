// Picking the next token from a model's logits: greedy, or temperature sampling
// restricted to the top k and to the top-p nucleus.
#pragma once

#include <cstdint>
#include <span>

namespace luminal::models {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;
};

/// Picks a token from logits. Sampling draws from softmax(logits / temperature) over the
/// top_k most likely tokens, cut to the smallest most-likely-first prefix whose share of
/// their probability reaches top_p. Ties in the order go to the lower id. Runs in time
/// linear in the vocabulary (plus a sort of the nucleus), since a vocabulary of 262k
/// fully sorted per token would cost more than the model's forward pass.
int32_t sample(std::span<const float> logits, const SamplingOptions& opts, uint64_t& rng_state);
/// The uniform number in [0, 1) a draw takes from the rng state (splitmix64), advancing
/// it: sample() takes one a draw (and none for greedy decoding).
double uniform_draw(uint64_t& rng_state);

}  // namespace luminal::models
