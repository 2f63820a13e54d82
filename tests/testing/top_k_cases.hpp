// Rows for top_k with what decides an order: runs of equal values (drawn from a coarse
// grid), NaN, infinities, and -0 beside +0; and the answer by a full stable sort, which
// is top_k's definition (largest first, the lower position first among equal values, NaN
// last).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace luminal::testing {

inline std::vector<float> top_k_rows(size_t rows, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grid(-64, 64), special(0, 199);
  std::vector<float> x(rows * n);
  for (float& v : x) {
    v = static_cast<float>(grid(rng)) * 0.125f;  // (exact in f16 and bf16 too)
    switch (special(rng)) {
      case 0:
        v = std::numeric_limits<float>::quiet_NaN();
        break;
      case 1:
        v = -std::numeric_limits<float>::infinity();
        break;
      case 2:
        v = std::numeric_limits<float>::infinity();
        break;
      case 3:
        v = -0.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

inline std::vector<int32_t> top_k_by_sort(const std::vector<float>& x, size_t n, size_t k) {
  std::vector<int32_t> out;
  std::vector<int32_t> order(n);
  for (size_t r = 0; r * n < x.size(); ++r) {
    const float* v = x.data() + r * n;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      if (std::isnan(v[a]) || std::isnan(v[b])) return !std::isnan(v[a]) && std::isnan(v[b]);
      return v[a] > v[b];
    });
    out.insert(out.end(), order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  }
  return out;
}

}  // namespace luminal::testing
