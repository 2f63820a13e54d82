// Tensor parallelism as Megatron-LM lays it out: each rank holds a contiguous part of
// the weights its products split (column-parallel: output rows; row-parallel: input
// columns, whose partial products the model sums with all_reduce), and all of the rest.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "luminal/nn/module.hpp"

namespace luminal::nn {

/// The dimension of a parameter the ranks split, or nullopt where each rank holds all of it.
using SplitRule = std::function<std::optional<int>(const std::string& name)>;

/// Which part of a model's weights one rank loads.
struct Sharding {
  SplitRule split;
  int rank = 0, size = 1;
};

/// Rank `rank`'s part of a split tensor (luminal/buffer.hpp).
using luminal::take_part;

/// A WeightSource for one rank: asks `full` for the whole tensor (the parameter's shape
/// with the split dimension `size` times longer) and hands over the rank's part of it;
/// unsplit parameters pass through.
WeightSource shard_source(WeightSource full, Sharding sharding);

}  // namespace luminal::nn
