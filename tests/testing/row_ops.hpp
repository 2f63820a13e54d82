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
  // The CUDA backend holds rows of 1000 and 6000 in registers (6000: six steps of a
  // thread's, the last cut short), 4099 (not whole vectors) and 300 (along a middle axis)
  // in shared memory, 20000 nowhere.
  const std::vector<Case> cases = {{{5, 7}, 1},     {{3, 1000}, 1},   {{2, 6000}, 1},
                                   {{2, 4099}, -1}, {{4, 300, 3}, 1}, {{2, 20000}, 1}};
  // Each op also gets a weight and a bias along the row (the same for every row).
  using Op = std::function<Tensor(Tensor, int, Tensor, Tensor)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"softmax", [](Tensor x, int a, Tensor, Tensor) { return x.softmax(a); }},
      {"log_softmax", [](Tensor x, int a, Tensor, Tensor) { return x.log_softmax(a); }},
      {"rms_norm", [](Tensor x, int a, Tensor w, Tensor) { return x.rms_norm({a}) * w; }},
      {"layer_norm", [](Tensor x, int a, Tensor, Tensor) { return x.layer_norm({a}); }},
      {"affine layer_norm",
       [](Tensor x, int a, Tensor w, Tensor b) { return x.layer_norm({a}) * w + b; }},
  };
  std::mt19937 rng(11);
  for (DType t : {DType::F32, DType::BF16})
    for (const Case& c : cases) {
      Graph cx;
      auto [x, n] = symbolic_rows_input(cx, c.shape);
      x.set(uniform_floats(rng, n, -3.0f, 3.0f));
      const int axis = c.axis < 0 ? c.axis + static_cast<int>(c.shape.size()) : c.axis;
      const int64_t len = c.shape[static_cast<size_t>(axis)];
      // [len] stored in type t, viewed along the axis of x's shape
      auto along = [&](const char* name) {
        Tensor v = cx.named_tensor(name, {len}, t);
        cx.set_data(v.id(), uniform_buffer(rng, static_cast<size_t>(len), t, -2.0f, 2.0f));
        std::vector<Expr> shape(c.shape.size(), Expr(1));
        shape[static_cast<size_t>(axis)] = len;
        return v.reshape(shape).broadcast_to(x.shape());
      };
      const Tensor w = along("w"), b = along("b");
      std::vector<Tensor> outs;
      for (const auto& [name, op] : ops)
        outs.push_back(op(x.cast(t), c.axis, w, b).cast(DType::F32).retrieve());
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

// Sums and maxes alone over [rows, len] (a graph's input "y" of `len` elements a row, and
// "columns", the same rows stored as columns, [len, rows]): along the rows, across them,
// and of every element, against the reference. `len` may be a dim bound in `cx`.
inline void expect_lone_reductions_match_reference(const Backend& backend, std::mt19937& rng,
                                                   int64_t rows, const Expr& len,
                                                   const std::vector<int64_t>& lengths) {
  Graph cx;
  Tensor y = cx.named_tensor("y", {rows, len});
  Tensor columns = cx.named_tensor("columns", {len, rows});
  const std::vector<std::string> names = {"sum", "max", "sum across", "max across", "total"};
  std::vector<Tensor> outs = {y.sum({1}).retrieve(), y.max({1}).retrieve(),
                              columns.sum({0}).retrieve(), columns.max({0}).retrieve(),
                              y.reshape({Expr(rows) * len}).sum({0}).retrieve()};
  for (int64_t n : lengths) {
    if (!len.as_const()) cx.set_dim(len.to_string(), n);
    y.set(uniform_floats(rng, static_cast<size_t>(rows * n), -3.0f, 3.0f));
    columns.set(uniform_floats(rng, static_cast<size_t>(rows * n), -3.0f, 3.0f));
    const auto want = run_outputs(cx, reference(), outs);
    const auto got = run_outputs(cx, backend, outs);
    for (size_t i = 0; i < outs.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      // (A sum of n terms up to 3 in f32, in another order: within n f32 units of 3.)
      const double terms = static_cast<double>(names[i] == "total" ? rows * n : n);
      const double slack = names[i].starts_with("max") ? 0.0 : 3e-7 * terms;
      for (size_t k = 0; k < got[i].size(); ++k)
        ASSERT_NEAR(got[i][k], want[i][k], slack + 1e-4 * (1 + std::fabs(want[i][k])))
            << names[i] << " alone over [" << rows << ", " << n << "], element " << k;
    }
  }
}

// Row ops and whole-row reductions over a few rows of known count, long ones: the CUDA
// backend spreads each over a cluster of blocks where the rows are at most 16 and at
// least 16384 long ([1, 128256], a vocabulary's logits; [3, 40009], an odd length;
// [16, 16384], the most rows), and not past that ([17, 16384], [200, 20000]). Against the
// reference: softmax, log-softmax and LayerNorm (chains of reductions), argmax (a max,
// then the first index holding it), sum and max; and reductions alone, which the backend
// deals out to many blocks a row where the rows are at most 256 (16 where stored as
// columns) and long or of a length known only at run time (3 rows of "n", run at 50000
// and at 100).
inline void expect_few_long_rows_match_reference(const Backend& backend) {
  std::mt19937 rng(12);
  for (const auto& [rows, len] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 128256}, {3, 40009}, {16, 16384}, {17, 16384}, {200, 20000}}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {rows, len});
    x.set(uniform_floats(rng, static_cast<size_t>(rows * len), -3.0f, 3.0f));
    const std::vector<std::string> names = {"softmax", "log_softmax", "layer_norm",
                                            "argmax",  "sum",         "max"};
    std::vector<Tensor> outs = {
        x.softmax(1).retrieve(),      x.log_softmax(1).retrieve(),
        x.layer_norm({1}).retrieve(), x.argmax(1).cast(DType::F32).retrieve(),
        x.sum({1}).retrieve(),        x.max({1}).retrieve()};
    const auto want = run_outputs(cx, reference(), outs);
    const auto got_all = run_outputs(cx, backend, outs);
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::vector<float>& got = got_all[i];
      ASSERT_EQ(got.size(), want[i].size());
      // (A sum of len terms up to 3 in f32, in another order: within len f32 units of 3.)
      const double slack = names[i] == "sum" ? 3e-7 * static_cast<double>(len) : 0.0;
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[i][k], slack + 1e-4 * (1 + std::fabs(want[i][k])))
            << names[i] << " over [" << rows << ", " << len << "], element " << k;
    }
    expect_lone_reductions_match_reference(backend, rng, rows, Expr(len), {len});
  }
  expect_lone_reductions_match_reference(backend, rng, 3, Expr::var("n"), {50000, 100});
}

}  // namespace luminal::testing
