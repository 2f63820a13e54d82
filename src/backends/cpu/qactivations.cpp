#include "backends/cpu/qactivations.hpp"

#include <algorithm>
#include <cmath>

namespace luminal::cpugen {

void quantize_rows(const std::vector<const float*>& rows, int64_t k, QuantizedRows& out) {
  const size_t nr = rows.size(), kk = static_cast<size_t>(k);
  out.q.resize(nr * kk);
  out.d.resize(nr * kk / 32);
  out.sum16.resize(nr * kk / 16);
#pragma omp parallel for schedule(static) if (nr * kk > 65536)
  for (size_t r = 0; r < nr; ++r) {
    const float* x = rows[r];
    for (size_t c = 0; c < kk / 32; ++c) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * c + j]));
      const float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
      int8_t* q = out.q.data() + r * kk + 32 * c;
      int s0 = 0, s1 = 0;
      for (int j = 0; j < 32; ++j) {
        q[j] = static_cast<int8_t>(std::nearbyint(x[32 * c + j] * inv));
        (j < 16 ? s0 : s1) += q[j];
      }
      out.d[r * kk / 32 + c] = d;
      out.sum16[r * kk / 16 + 2 * c] = d * static_cast<float>(s0);
      out.sum16[r * kk / 16 + 2 * c + 1] = d * static_cast<float>(s1);
    }
  }
}

std::vector<const float*> activation_rows(const ConcreteView& a, const float* data) {
  const size_t r = a.dims.size();
  int64_t batch = 1;
  for (size_t d = 0; d + 3 < r; ++d) batch *= a.dims[d];
  const int64_t m = a.dims[r - 3];
  std::vector<const float*> rows;
  rows.reserve(static_cast<size_t>(batch * m));
  std::vector<int64_t> idx(r - 3, 0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t off = a.offset;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * a.strides[d];
    for (int64_t i = 0; i < m; ++i) rows.push_back(data + off + i * a.strides[r - 3]);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < a.dims[d]) break;
      idx[d] = 0;
    }
  }
  return rows;
}

}  // namespace luminal::cpugen
