// Random graphs of primitive ops over random views, for differential tests of the
// compiled backends against the reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"

namespace luminal::testing {

// Builds a random graph: inputs of random shapes, then ops whose operands are random
// views (permute, slice, pad, flip, broadcast) of earlier values.
struct RandomGraph {
  std::vector<Tensor> outputs;
  std::mt19937 rng;

  explicit RandomGraph(uint32_t seed) : rng(seed) {}

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

  // A view of `t` with the target shape [a, b] built by random movement ops.
  Tensor view_as(Tensor t, int a, int b) {
    if (pick(0, 1)) t = t.flip(pick(0, 1));
    if (t.dim(0) != Expr(a)) t = t.slice(0, 0, std::min<int64_t>(a, *t.dim(0).as_const()));
    if (t.dim(1) != Expr(b)) t = t.slice(1, 0, std::min<int64_t>(b, *t.dim(1).as_const()));
    if (*t.dim(0).as_const() < a) t = t.pad(0, 0, a - *t.dim(0).as_const());
    if (*t.dim(1).as_const() < b) t = t.pad(1, a > 0 ? 1 : 0, b - 1 - *t.dim(1).as_const());
    return t;
  }

  void build(Graph& cx, int ops) {
    std::vector<Tensor> vals;
    for (int i = 0; i < 3; ++i) {
      const int a = pick(1, 5), b = pick(1, 6);
      Tensor x = cx.named_tensor("x" + std::to_string(i), {a, b});
      std::vector<float> data(static_cast<size_t>(a * b));
      for (float& v : data) v = std::uniform_real_distribution<float>(0.25f, 2.0f)(rng);
      x.set(data);
      vals.push_back(x);
    }
    for (int k = 0; k < ops; ++k) {
      Tensor x = vals[pick(0, static_cast<int>(vals.size()) - 1)];
      if (pick(0, 3) == 0) x = x.permute({1, 0});
      const int a = static_cast<int>(*x.dim(0).as_const()),
                b = static_cast<int>(*x.dim(1).as_const());
      Tensor y = view_as(vals[pick(0, static_cast<int>(vals.size()) - 1)], a, b);
      Tensor r;
      switch (pick(0, 9)) {
        case 0:
          r = x + y;
          break;
        case 1:
          r = x * y;
          break;
        case 2:
          r = (x * x + 0.5).sqrt();
          break;
        case 3:
          r = (x.abs() + 1.0).log2();
          break;
        case 4:
          r = x.sin();
          break;
        case 5:
          r = where(less_than(x, y), x, y * 0.5);
          break;
        case 6:
          r = (x.sum_reduce(1).expand(1, b) + y) * 0.25;
          break;
        case 7:
          r = x.max_reduce(0).expand(0, a) + y;
          break;
        case 8:
          r = (x + 1.0).recip() + fmod(y, x + 1.0);
          break;
        default:
          r = x.cast(DType::F16).cast(DType::F32) + y.exp2() * 0.01;
          break;
      }
      vals.push_back(r);
      if (pick(0, 2) == 0) outputs.push_back(r.retrieve());
    }
    outputs.push_back(vals.back().retrieve());
  }
};

/// Twelve random graphs of 25 ops each run on `backend` and on the reference
/// interpreter; every output element agrees to 1e-4 relative.
inline void expect_random_graphs_match_reference(const Backend& backend) {
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    Graph cx;
    RandomGraph rg(seed);
    rg.build(cx, 25);
    cx.compile(reference());
    cx.execute();
    std::vector<std::vector<float>> want;
    for (const Tensor& t : rg.outputs) want.push_back(t.to_f32());
    cx.compile(backend);
    cx.execute();
    for (size_t i = 0; i < rg.outputs.size(); ++i) {
      const auto got = rg.outputs[i].to_f32();
      ASSERT_EQ(got.size(), want[i].size());
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[i][k], 1e-4 * (1 + std::fabs(want[i][k])))
            << "seed " << seed << " output " << i << " element " << k;
    }
  }
}

}  // namespace luminal::testing
