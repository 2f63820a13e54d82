#include "luminal/models/random_weights.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "luminal/buffer.hpp"
#include "luminal/error.hpp"

namespace luminal::models {
namespace {

// SplitMix64's finaliser: a counter-based generator, so element i's value needs no other.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_key(uint64_t seed, const std::string& name) {
  uint64_t h = mix(seed);
  for (unsigned char c : name) h = mix(h ^ c);
  return h;
}

}  // namespace

nn::WeightSource random_weights(uint64_t seed, nn::Sharding sharding) {
  return [seed, s = std::move(sharding)](
             const std::string& name, const std::vector<int64_t>& shape) -> std::optional<Buffer> {
    // The part is `rows` runs of `inner` elements: run r is run (r / part) * size * part +
    // rank * part + r % part of the whole tensor (unsplit: size 1, rank 0).
    const std::optional<int> split = s.size > 1 && s.split ? s.split(name) : std::nullopt;
    LUM_CHECK(!split || static_cast<size_t>(*split) < shape.size())
        << "tensor parallelism: '" << name << "' has no dimension " << *split;
    const size_t dim = split ? static_cast<size_t>(*split) : 0;
    const int64_t size = split ? s.size : 1, rank = split ? s.rank : 0;
    int64_t rows = 1, part = shape.empty() ? 1 : shape[dim], inner = 1;
    for (size_t d = 0; d < shape.size(); ++d) (d <= dim ? rows : inner) *= shape[d];
    const bool norm = name.ends_with("norm.weight");
    // Uniform on [-1, 1) scaled: sqrt(3) * 0.02 has standard deviation 0.02.
    const float center = norm ? 1.0f : 0.0f,
                half_width = norm ? 0.1f : static_cast<float>(std::sqrt(3.0) * 0.02);
    const uint64_t key = name_key(seed, name);
    Buffer out(DType::BF16, static_cast<size_t>(rows * inner), Buffer::Uninitialized{});
    auto* bits = static_cast<uint16_t*>(out.data());
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t whole = ((r / part) * size * part + rank * part + r % part) * inner;
      for (int64_t k = 0; k < inner; ++k) {
        const uint64_t i = static_cast<uint64_t>(whole + k);
        const float u = static_cast<float>(mix(key ^ i) >> 40) * 0x1p-23f - 1.0f;
        // To bf16, rounding to nearest even (the values are finite): a 70B model's 141 GB
        // of values come in seconds, not minutes through the general conversion.
        uint32_t f;
        const float v = center + half_width * u;
        std::memcpy(&f, &v, sizeof f);
        bits[r * inner + k] = static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
      }
    }
    return out;
  };
}

}  // namespace luminal::models
