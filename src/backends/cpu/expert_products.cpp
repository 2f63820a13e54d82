// ExpertMatMul on the CPU (see expert_products.hpp).
#include "backends/cpu/expert_products.hpp"

#include <cstring>
#include <vector>

#include "backends/cpu/qgemm.hpp"
#include "luminal/error.hpp"

namespace luminal::cpugen {

void expert_matmul(const float* x, int64_t rows, int64_t x_slots, int64_t slots,
                   const Buffer& ids, const ExpertWeights& w, float* out, bool int8_activations) {
  // Each expert's (row, slot) pairs, in order.
  std::vector<std::vector<int64_t>> chosen(static_cast<size_t>(w.count));
  for (int64_t i = 0; i < rows * slots; ++i) {
    const int64_t e = ids.get_i64(static_cast<size_t>(i));
    LUM_CHECK(e >= 0 && e < w.count) << "ExpertMatMul: expert id " << e << " of " << w.count;
    chosen[static_cast<size_t>(e)].push_back(i);
  }
  std::vector<float> gathered, products;
  for (int64_t e = 0; e < w.count; ++e) {
    const std::vector<int64_t>& picks = chosen[static_cast<size_t>(e)];
    if (picks.empty()) continue;
    const auto m = static_cast<int64_t>(picks.size());
    gathered.resize(static_cast<size_t>(m * w.k));
    products.resize(static_cast<size_t>(m * w.n));
    for (int64_t r = 0; r < m; ++r) {
      const int64_t pick = picks[static_cast<size_t>(r)];
      const int64_t row = pick / slots * x_slots + (x_slots == 1 ? 0 : pick % slots);
      std::memcpy(gathered.data() + r * w.k, x + row * w.k, static_cast<size_t>(w.k) * 4);
    }
    ConcreteView a;  // the gathered rows as a [m, K, N] product operand
    a.dims = {m, w.k, w.n};
    a.strides = {w.k, 1, 0};
    a.mask_lo = {0, 0, 0};
    a.mask_hi = a.dims;
    qmatmul(a, gathered.data(), w.format, w.data + e * w.n * w.row_bytes, w.n, w.k,
            products.data(), int8_activations);
    for (int64_t r = 0; r < m; ++r)
      std::memcpy(out + picks[static_cast<size_t>(r)] * w.n, products.data() + r * w.n,
                  static_cast<size_t>(w.n) * 4);
  }
}

}  // namespace luminal::cpugen
