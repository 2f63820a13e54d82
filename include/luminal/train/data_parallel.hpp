// Data parallelism: every rank (a process, usually one GPU each) runs the same training
// step on its own share of the batch, and the gradients are averaged over the ranks
// before the update. Every rank then takes the same step, the one a single rank would
// take on the whole batch (for a loss that is a mean over equal shares), and the weights
// stay alike without ever being sent.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "luminal/collective.hpp"
#include "luminal/tensor.hpp"

namespace luminal::train {

/// `values` (gradients, or a loss to report) averaged over the ranks of `comm`, each of
/// its own shape. They are sent in buckets of about `bucket_bytes` (one exchange each;
/// a larger value alone), filled in the order the graph computes them: a backward pass
/// makes the last layers' gradients first, so their exchange can start while the rest is
/// computed. The averages' division by the rank count is left to their readers (an
/// optimizer's update), where it costs nothing.
std::vector<Tensor> average_over_ranks(const std::vector<Tensor>& values,
                                       const std::shared_ptr<Communicator>& comm,
                                       size_t bucket_bytes = size_t{25} << 20);

}  // namespace luminal::train
