// Gradients averaged over the ranks of a data-parallel run, in buckets.
#include "luminal/train/data_parallel.hpp"

#include <algorithm>
#include <numeric>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace luminal::train {

std::vector<Tensor> average_over_ranks(const std::vector<Tensor>& values,
                                       const std::shared_ptr<Communicator>& comm,
                                       size_t bucket_bytes) {
  LUM_CHECK(comm) << "average_over_ranks: no communicator";
  std::vector<Tensor> averaged(values.size());
  if (values.empty()) return averaged;
  const double share = 1.0 / comm->size();
  // In the order the graph computes them (node ids are a topological order); each bucket
  // holds one dtype.
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a].id().value < values[b].id().value; });
  std::vector<size_t> bucket;
  size_t filled = 0;
  const auto send = [&] {
    if (bucket.empty()) return;
    std::vector<Tensor> flat;
    for (size_t i : bucket) flat.push_back(values[i].reshape({-1}));
    const Tensor sums = all_reduce_flat(flat, comm);
    Expr at = 0;
    for (size_t j = 0; j < bucket.size(); ++j) {
      const Tensor& v = values[bucket[j]];
      const Expr count = flat[j].shape()[0];
      averaged[bucket[j]] = sums.slice(0, at, at + count).reshape(v.shape()) * share;
      at = at + count;
    }
    bucket.clear();
    filled = 0;
  };
  for (size_t i : order) {
    const Tensor& v = values[i];
    LUM_CHECK(&v.graph() == &values[order[0]].graph())
        << "average_over_ranks: the values belong to different graphs";
    const Expr count = v.numel();
    LUM_CHECK(count.is_const()) << "average_over_ranks: a value of symbolic size "
                                << to_string(v.shape()) << " (its bucket's layout must be fixed)";
    const size_t bytes = static_cast<size_t>(count.eval()) * dtype_size(v.dtype());
    if (!bucket.empty() &&
        (values[bucket[0]].dtype() != v.dtype() || filled + bytes > bucket_bytes))
      send();
    bucket.push_back(i);
    filled += bytes;
  }
  send();
  return averaged;
}

}  // namespace luminal::train
