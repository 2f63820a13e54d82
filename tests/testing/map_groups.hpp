// Elementwise kernels that read none of each other's values, kept apart in the plan by
// the reductions that read them (as a decoding layer's appends keep its RoPE and cast
// kernels apart): the CUDA backend moves them together and runs them as one launch (a
// map group). One of them covers more blocks than a member takes, so its grid-stride
// loop goes round; the row count is symbolic.
#pragma once

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "testing/run_outputs.hpp"

namespace luminal::testing {

/// Multiples of 1/64 in [-1, 1]: exact in bf16, and so are products of them and their
/// sums of 64 in f32, however a backend rounds its operands or orders the sums.
inline std::vector<float> sixty_fourths(std::mt19937& rng, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(std::uniform_int_distribution<int>(-64, 64)(rng)) / 64;
  return v;
}

struct IndependentMaps {
  Tensor x;  // [rows, 64], rows symbolic: set it to sixty_fourths
  std::vector<Tensor> outputs;
};

/// The graph's outputs: three elementwise values of three products of x (f16, f32, and one
/// of rows x `big_columns` elements), and the two reductions that read the first two.
inline IndependentMaps independent_maps(Graph& cx, int64_t big_columns, std::mt19937& rng) {
  Tensor x = cx.named_tensor("x", {Expr::var("rows"), 64});
  // bf16 weights [n, 64]: the products of x (a QMatMul each) are moved next to each other.
  std::vector<Tensor> w;
  for (const int64_t n : {int64_t{64}, int64_t{64}, big_columns}) {
    w.push_back(cx.named_tensor("w" + std::to_string(w.size()), {n, 64}));
    Buffer half(DType::BF16, static_cast<size_t>(n * 64));
    const std::vector<float> v = sixty_fourths(rng, half.numel());
    for (size_t e = 0; e < v.size(); ++e) half.set_f64(e, v[e]);
    Buffer raw(DType::U8, half.bytes());
    std::memcpy(raw.data(), half.data(), half.bytes());
    w.back().set_quantized(static_cast<uint32_t>(GgmlType::BF16), std::move(raw));
  }
  Tensor p1 = x.matmul(w[0].permute({1, 0})), p2 = x.matmul(w[1].permute({1, 0})),
         p3 = x.matmul(w[2].permute({1, 0}));
  Tensor m1 = p1.sin().cast(DType::F16);
  Tensor r1 = m1.cast(DType::F32).sum({1});
  Tensor m2 = p2 * 3.0 + 1.0;
  Tensor r2 = m2.max({1});
  Tensor m3 = p3.cos();
  return {
      x,
      {m1.cast(DType::F32).retrieve(), m2.retrieve(), m3.retrieve(), r1.retrieve(), r2.retrieve()}};
}

}  // namespace luminal::testing
