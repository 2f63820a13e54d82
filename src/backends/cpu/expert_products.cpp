// ExpertMatMul on the CPU (see expert_products.hpp).
#include "backends/cpu/expert_products.hpp"

#include <cstring>
#include <vector>

#include "backends/cpu/qgemm.hpp"
#include "luminal/error.hpp"

namespace luminal::cpugen {

void expert_matmul(const float* x, int64_t rows, int64_t x_slots, int64_t slots, const Buffer& ids,
                   std::span<const ExpertWeights> stacks, float* out, bool int8_activations) {
  const int64_t count = stacks[0].count, k = stacks[0].k;
  int64_t width = 0;
  for (const ExpertWeights& w : stacks) width += w.n;
  // Each expert's (row, slot) pairs, in order.
  std::vector<std::vector<int64_t>> chosen(static_cast<size_t>(count));
  for (int64_t i = 0; i < rows * slots; ++i) {
    const int64_t e = ids.get_i64(static_cast<size_t>(i));
    LUM_CHECK(e >= 0 && e < count) << "ExpertMatMul: expert id " << e << " of " << count;
    chosen[static_cast<size_t>(e)].push_back(i);
  }
  std::vector<float> gathered, products;
  for (int64_t e = 0; e < count; ++e) {
    const std::vector<int64_t>& picks = chosen[static_cast<size_t>(e)];
    if (picks.empty()) continue;
    const auto m = static_cast<int64_t>(picks.size());
    gathered.resize(static_cast<size_t>(m * k));
    for (int64_t r = 0; r < m; ++r) {
      const int64_t pick = picks[static_cast<size_t>(r)];
      const int64_t row = pick / slots * x_slots + (x_slots == 1 ? 0 : pick % slots);
      std::memcpy(gathered.data() + r * k, x + row * k, static_cast<size_t>(k) * 4);
    }
    int64_t column = 0;
    for (const ExpertWeights& w : stacks) {
      ConcreteView a;  // the gathered rows as a [m, K, N] product operand
      a.dims = {m, k, w.n};
      a.strides = {k, 1, 0};
      a.mask_lo = {0, 0, 0};
      a.mask_hi = a.dims;
      products.resize(static_cast<size_t>(m * w.n));
      qmatmul(a, gathered.data(), w.format, w.data + e * w.n * w.row_bytes, w.n, k, products.data(),
              int8_activations);
      for (int64_t r = 0; r < m; ++r)
        std::memcpy(out + picks[static_cast<size_t>(r)] * width + column, products.data() + r * w.n,
                    static_cast<size_t>(w.n) * 4);
      column += w.n;
    }
  }
}

}  // namespace luminal::cpugen
