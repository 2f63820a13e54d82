// One gradient rule per primitive op (private to src/train).
#pragma once

#include <optional>
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

/// The gradients of a node's inputs as the node reads them (each of its edge's view's
/// shape), for the inputs `wanted` marks; nullopt for the rest and for inputs that have
/// none (conditions, indices, integer values).
using GradientRule = std::vector<std::optional<Tensor>> (*)(const GradientStep& step,
                                                            const std::vector<bool>& wanted);

/// The rule for `op`.
GradientRule gradient_rule(Op op);

}  // namespace luminal::train
