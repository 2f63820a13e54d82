// Tensor parallelism: a rank's part of a split weight.
#include "luminal/nn/tensor_parallel.hpp"

#include <cstring>

#include "luminal/error.hpp"

namespace luminal::nn {

WeightSource shard_source(WeightSource full, SplitRule split, int rank, int size) {
  LUM_CHECK(size >= 1 && rank >= 0 && rank < size)
      << "shard_source: rank " << rank << " of " << size;
  return [full = std::move(full), split = std::move(split), rank, size](
             const std::string& name, const std::vector<int64_t>& shape) -> std::optional<Buffer> {
    const std::optional<int> dim = split(name);
    if (!dim || size == 1) return full(name, shape);
    const auto d = static_cast<size_t>(*dim);
    LUM_CHECK(d < shape.size()) << "tensor parallelism: '" << name << "' has no dimension " << d;
    std::vector<int64_t> whole = shape;
    whole[d] *= size;
    std::optional<Buffer> all = full(name, whole);
    if (!all) return all;
    // The rank's part: rows [rank * part, (rank + 1) * part) of dimension d, under every
    // index of the dimensions before it.
    size_t outer = 1, inner = dtype_size(all->dtype());
    for (size_t i = 0; i < d; ++i) outer *= static_cast<size_t>(shape[i]);
    for (size_t i = d + 1; i < shape.size(); ++i) inner *= static_cast<size_t>(shape[i]);
    const size_t part = static_cast<size_t>(shape[d]) * inner;
    LUM_CHECK(all->bytes() == outer * part * static_cast<size_t>(size))
        << "tensor parallelism: '" << name << "' holds " << all->bytes() << " bytes, not the "
        << outer * part * static_cast<size_t>(size) << " its split shape needs";
    Buffer mine(all->dtype(), all->numel() / static_cast<size_t>(size), Buffer::Uninitialized{});
    const auto* src = static_cast<const std::byte*>(all->data());
    auto* dst = static_cast<std::byte*>(mine.data());
    for (size_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * part,
                  src + (o * static_cast<size_t>(size) + static_cast<size_t>(rank)) * part, part);
    return mine;
  };
}

}  // namespace luminal::nn
