// Random weights of a model's own shapes, for benchmarks of models one has no checkpoint
// of (a 70B shape on machines that cannot download one): `luminal generate
// --random-weights` with a folder holding only config.json and tokenizer.json.
#pragma once

#include <cstdint>

#include "luminal/nn/module.hpp"
#include "luminal/nn/tensor_parallel.hpp"

namespace luminal::models {

/// A WeightSource that answers every parameter with bf16 values drawn from (`seed`, the
/// tensor's name, the element's index in the whole tensor) alone: norm weights (names
/// ending "norm.weight") uniform in 1 +- 0.1, every other tensor uniform with standard
/// deviation 0.02 around 0. With `sharding`, a rank's part of each split tensor (the
/// values the whole holds there), made without the whole.
nn::WeightSource random_weights(uint64_t seed = 0, nn::Sharding sharding = {});

}  // namespace luminal::models
