// Reverse-mode differentiation as a graph transform: the gradient of a loss is more
// nodes in the loss's graph, compiled and run with the rest (one executable for the
// forward pass, the backward pass and whatever uses the gradients, such as an optimizer
// step).
#pragma once

#include <vector>

#include "luminal/tensor.hpp"

namespace luminal::train {

/// Adds to the loss's graph the nodes computing d loss / d p for every p of `params`
/// and returns them, each of its parameter's shape and dtype. The loss must be a float
/// scalar (one element); each parameter is a whole node of the same graph (an input, as
/// Graph::tensor makes, or any computed value seen whole). A parameter the loss does not
/// depend on gets zeros. Only nodes between the parameters and the loss get gradient
/// nodes; a value used several times adds up its consumers' gradients.
/// Each primitive op's rule is in src/train/gradient_rules.cpp; composite ops
/// (softmax, matmul, norms, convolution, ...) are differentiated through their
/// primitives.
std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& params);

/// The same for a loss of any shape, seeded with `seed` (the gradient of the loss
/// itself, of its shape): the vector-Jacobian products seed^T d loss / d p.
std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& params,
                              const Tensor& seed);

}  // namespace luminal::train
