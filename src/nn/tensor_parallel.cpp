// Tensor parallelism: a rank's part of a split weight.
#include "luminal/nn/tensor_parallel.hpp"

#include <cstring>

#include "luminal/error.hpp"

namespace luminal::nn {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  return to_string(std::vector<Expr>(shape.begin(), shape.end()));
}

}  // namespace

Buffer take_part(const Buffer& whole, const std::vector<int64_t>& whole_shape, int dim, int rank,
                 int size) {
  const auto d = static_cast<size_t>(dim);
  LUM_CHECK(d < whole_shape.size() && size >= 1 && rank >= 0 && rank < size &&
            whole_shape[d] % size == 0)
      << "take_part: dimension " << dim << " of " << shape_text(whole_shape) << " in " << size
      << " parts";
  // The rank's part: run [rank * part, (rank + 1) * part) of dimension d, under every
  // index of the dimensions before it.
  size_t outer = 1, inner = dtype_size(whole.dtype());
  for (size_t i = 0; i < d; ++i) outer *= static_cast<size_t>(whole_shape[i]);
  for (size_t i = d + 1; i < whole_shape.size(); ++i) inner *= static_cast<size_t>(whole_shape[i]);
  const size_t part = static_cast<size_t>(whole_shape[d] / size) * inner;
  const auto ranks = static_cast<size_t>(size);
  LUM_CHECK(whole.bytes() == outer * part * ranks)
      << "take_part: " << whole.bytes() << " bytes are not a " << shape_text(whole_shape)
      << " tensor of " << dtype_name(whole.dtype());
  Buffer mine(whole.dtype(), whole.numel() / ranks, Buffer::Uninitialized{});
  const auto* src = static_cast<const std::byte*>(whole.data());
  auto* dst = static_cast<std::byte*>(mine.data());
  for (size_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * part, src + (o * ranks + static_cast<size_t>(rank)) * part, part);
  return mine;
}

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
