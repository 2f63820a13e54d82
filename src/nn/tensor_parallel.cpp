// Tensor parallelism: a rank's part of a split weight.
#include "luminal/nn/tensor_parallel.hpp"

#include "luminal/error.hpp"

namespace luminal::nn {

WeightSource shard_source(WeightSource full, Sharding sharding) {
  LUM_CHECK(sharding.size >= 1 && sharding.rank >= 0 && sharding.rank < sharding.size)
      << "shard_source: rank " << sharding.rank << " of " << sharding.size;
  return [full = std::move(full), s = std::move(sharding)](
             const std::string& name, const std::vector<int64_t>& shape) -> std::optional<Buffer> {
    const std::optional<int> dim = s.split(name);
    if (!dim || s.size == 1) return full(name, shape);
    LUM_CHECK(static_cast<size_t>(*dim) < shape.size())
        << "tensor parallelism: '" << name << "' has no dimension " << *dim;
    std::vector<int64_t> whole = shape;
    whole[static_cast<size_t>(*dim)] *= s.size;
    std::optional<Buffer> all = full(name, whole);
    if (!all) return all;
    return take_part(*all, whole, *dim, s.rank, s.size);
  };
}

}  // namespace luminal::nn
