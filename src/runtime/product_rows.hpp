// Whether products read the same rows of activations, for the backends that run products
// of the same activations together (a layer's q/k/v, gate/up).
#pragma once

#include <algorithm>
#include <vector>

#include "luminal/view.hpp"

namespace luminal::runtime {

/// Whether two QMatMuls' [batch..., M, K, N] activation views select the same rows: all
/// but N (their weights' row counts) agree.
inline bool same_rows(const ConcreteView& a, const ConcreteView& b) {
  auto equal = [](const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
    return x.size() == y.size() && (x.empty() || std::equal(x.begin(), x.end() - 1, y.begin()));
  };
  return a.offset == b.offset && equal(a.dims, b.dims) && equal(a.strides, b.strides) &&
         equal(a.mask_lo, b.mask_lo) && equal(a.mask_hi, b.mask_hi);
}

}  // namespace luminal::runtime
