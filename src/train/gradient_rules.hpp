// One gradient rule per primitive op (private to src/train).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "luminal/graph.hpp"
#include "luminal/tensor.hpp"

namespace luminal::train {

/// What a rule sees of one node on the way back from the loss.
struct GradientStep {
  Graph* graph;
  Node node;    // a copy: rules add nodes, which may move the graph's own
  Tensor out;   // the node's value
  Tensor grad;  // d loss / d out, of the node's shape and dtype
  /// Input i as the node reads it (through its edge's view).
  Tensor input(size_t i) const;
};

/// The gradient of one input as the node reads it: of its edge's view's shape, or with
/// some of the view's broadcast (stride 0) dims already summed out (`summed`, ascending):
/// a rule that can sum them better than one reduction each (as a matrix product) does.
struct InputGradient {
  InputGradient(Tensor g) : grad(std::move(g)) {}  // NOLINT: a plain gradient converts
  InputGradient(Tensor g, std::vector<int> s) : grad(std::move(g)), summed(std::move(s)) {}
  Tensor grad;
  std::vector<int> summed;
};

/// The gradients of a node's inputs, for the inputs `wanted` marks; nullopt for the rest
/// and for inputs that have none (conditions, indices, integer values).
using GradientRule = std::vector<std::optional<InputGradient>> (*)(const GradientStep& step,
                                                                   const std::vector<bool>& wanted);

/// The rule for `op`.
GradientRule gradient_rule(Op op);

}  // namespace luminal::train
