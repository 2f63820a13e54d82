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
/// The same draw from the top k alone: `ids` (opts.top_k of them, or fewer where the
/// vocabulary is smaller) and their `logits`, most likely first, the lower id first among
/// equal logits (top_k's order, in tensor.hpp). The same token as sample() for the same
/// rng state: a backend that picks the top k where the logits lie copies k of them back.
int32_t sample_top_k(std::span<const float> logits, std::span<const int32_t> ids,
                     const SamplingOptions& opts, uint64_t& rng_state);

}  // namespace luminal::models
