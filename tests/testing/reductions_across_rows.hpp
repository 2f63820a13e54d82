// Sums and maxima over a leading or middle axis (across rows: a bias's gradient summed
// over the tokens), which the CUDA backend reduces a lane an output, of lengths below
// and above a block's slices and output counts that do not fill a block, with symbolic
// dims, in f32, bf16 and i32: compiled for a backend and compared with the reference
// interpreter. The values are multiples of 1/4 below 4 in magnitude, so every f32 sum
// is exact in any order.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "testing/run_outputs.hpp"
#include "testing/symbolic_rows.hpp"

namespace luminal::testing {

inline void expect_reductions_across_rows_match_reference(const Backend& backend) {
  struct Case {
    std::vector<int64_t> shape;  // the first dim symbolic
    int axis;
  };
  const std::vector<Case> cases = {{{1000, 768}, 0},   {{17, 3}, 0},    {{4099, 5}, 0},
                                   {{8, 100, 771}, 1}, {{3, 33, 1}, 1}, {{2, 300, 4, 9}, 1}};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> quarter(-15, 15);
  for (const Case& c : cases) {
    Graph cx;
    auto [x, n] = symbolic_rows_input(cx, c.shape);
    std::vector<float> values(n);
    for (float& v : values) v = static_cast<float>(quarter(rng)) * 0.25f;
    x.set(values);
    const std::vector<std::string> names = {"f32 sum", "f32 max", "bf16 sum", "i32 sum"};
    const std::vector<Tensor> outs = {
        x.sum({c.axis}).retrieve(),
        x.max({c.axis}).retrieve(),
        x.cast(DType::BF16).sum({c.axis}).cast(DType::F32).retrieve(),
        (x * 4.0f).cast(DType::I32).sum({c.axis}).cast(DType::F32).retrieve(),
    };
    const auto want = run_outputs(cx, reference(), outs);
    const auto got = run_outputs(cx, backend, outs);
    for (size_t i = 0; i < outs.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      for (size_t k = 0; k < got[i].size(); ++k)
        ASSERT_EQ(got[i][k], want[i][k]) << names[i] << " over " << to_string(x.shape()) << " axis "
                                         << c.axis << ", output " << k;
    }
  }
}

}  // namespace luminal::testing
