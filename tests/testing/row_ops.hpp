// Softmax, log-softmax, RMSNorm and LayerNorm (chains of reductions over the same rows,
// which the CUDA backend runs as one kernel) over rows shorter and longer than a block,
// along the last axis and a middle one, with a symbolic row count, in f32 and bf16:
// compiled for a backend and compared with the reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "testing/run_outputs.hpp"
#include "testing/symbolic_rows.hpp"

namespace luminal::testing {

inline void expect_row_ops_match_reference(const Backend& backend) {
  struct Case {
    std::vector<int64_t> shape;
    int axis;
  };
  // Rows of 20000 are longer than the CUDA backend holds in registers.
  const std::vector<Case> cases = {
      {{5, 7}, 1}, {{3, 1000}, 1}, {{2, 4099}, -1}, {{4, 300, 3}, 1}, {{2, 20000}, 1}};
  const std::vector<std::pair<std::string, std::function<Tensor(Tensor, int)>>> ops = {
      {"softmax", [](Tensor x, int a) { return x.softmax(a); }},
      {"log_softmax", [](Tensor x, int a) { return x.log_softmax(a); }},
      {"rms_norm", [](Tensor x, int a) { return x.rms_norm({a}); }},
      {"layer_norm", [](Tensor x, int a) { return x.layer_norm({a}); }},
  };
  std::mt19937 rng(11);
  for (DType t : {DType::F32, DType::BF16})
    for (const Case& c : cases) {
      Graph cx;
      auto [x, n] = symbolic_rows_input(cx, c.shape);
      x.set(uniform_floats(rng, n, -3.0f, 3.0f));
      std::vector<Tensor> outs;
      for (const auto& [name, op] : ops)
        outs.push_back(op(x.cast(t), c.axis).cast(DType::F32).retrieve());
      const auto want = run_outputs(cx, reference(), outs);
      const auto got_all = run_outputs(cx, backend, outs);
      // f32 sums in another order; bf16 rounds every step and may land one ulp away.
      const double tol = t == DType::F32 ? 1e-4 : 2e-2;
      for (size_t i = 0; i < outs.size(); ++i) {
        const std::vector<float>& got = got_all[i];
        ASSERT_EQ(got.size(), want[i].size());
        for (size_t k = 0; k < got.size(); ++k)
          ASSERT_NEAR(got[k], want[i][k], tol * (1 + std::fabs(want[i][k])))
              << ops[i].first << " " << dtype_name(t) << " over " << to_string(x.shape())
              << " axis " << c.axis << ", element " << k;
      }
    }
}

}  // namespace luminal::testing
