// Products of every operand layout the MatMul kernel sees (batched, transposed, a weight
// shared by the batch), in f32, f16 and bf16, compiled for a backend and compared with
// the reference interpreter; shared by the CPU and CUDA tests. Also products over
// half-precision block-stored weights (QMatMul), and f32 by f16 operands.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "luminal/compiler/matmul_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "luminal/luminal.hpp"
#include "testing/run_outputs.hpp"

namespace luminal::testing {

// How many kernels of cx's optimized graph are custom ops of type KernelOp for which
// `also(graph, node)` holds.
template <class KernelOp>
size_t count_kernels(const Graph& cx, const std::function<bool(const Graph&, const Node&)>& also =
                                          [](const Graph&, const Node&) { return true; }) {
  const compiler::Optimized opt = compiler::optimize(cx);
  size_t count = 0;
  for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i) {
    const Node& n = opt.graph->node(NodeId{i});
    count += n.op == Op::Custom && dynamic_cast<const KernelOp*>(n.custom.get()) &&
             also(*opt.graph, n);
  }
  return count;
}

inline void expect_matmuls_match_reference(const Backend& backend) {
  std::mt19937 rng(7);
  auto random = [&](size_t n) { return uniform_floats(rng, n); };
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    Graph cx;
    Tensor a = cx.named_tensor("a", {3, 33, 70});
    Tensor b = cx.named_tensor("b", {3, 70, 45});
    Tensor w = cx.named_tensor("w", {45, 70});
    a.set(random(3 * 33 * 70));
    b.set(random(3 * 70 * 45));
    w.set(random(45 * 70));
    const Tensor ac = a.cast(t), bc = b.cast(t), wc = w.cast(t);
    std::vector<Tensor> outs = {
        ac.matmul(bc).cast(DType::F32).retrieve(),                  // batched
        ac.matmul(wc.permute({1, 0})).cast(DType::F32).retrieve(),  // x W^T, W shared
        bc.permute({0, 2, 1}).matmul(ac.permute({0, 2, 1})).cast(DType::F32).retrieve(),
    };
    // Each product is a library MatMul, not a generated reduction.
    EXPECT_EQ(count_kernels<compiler::MatMulOp>(cx), outs.size()) << dtype_name(t);
    const auto want = run_outputs(cx, reference(), outs);
    const auto got_all = run_outputs(cx, backend, outs);
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << dtype_name(t);
    // The reference rounds each product to the type before summing; the kernels sum exact
    // products in f32.
    const double tol = t == DType::F32 ? 1e-4 : t == DType::F16 ? 2e-2 : 6e-2;
    for (size_t i = 0; i < outs.size(); ++i) {
      const std::vector<float>& got = got_all[i];
      ASSERT_EQ(got.size(), want[i].size());
      for (size_t k = 0; k < got.size(); ++k)
        ASSERT_NEAR(got[k], want[i][k], tol * (1 + std::fabs(want[i][k])))
            << dtype_name(t) << " product " << i << " element " << k;
    }
  }
}

// Products of one row, x[1, K] W^T (a decode step's projections), in f32, f16 and bf16:
// K a whole number of 16-byte vectors or not, N a multiple of a block's rows or not, W
// whole or a column slice of a wider matrix (rows longer than K).
inline void expect_one_row_products_match_reference(const Backend& backend) {
  std::mt19937 rng(9);
  auto random = [&](size_t n) { return uniform_floats(rng, n); };
  struct Shape {
    int64_t k, n, row;  // row: W's row length (> k: the product reads a slice)
  };
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const Shape& s : std::vector<Shape>{
             {1024, 1000, 1024}, {72, 13, 72}, {70, 9, 70}, {64, 33, 96}, {4096, 1, 4096}}) {
      Graph cx;
      Tensor x = cx.named_tensor("x", {1, s.k});
      Tensor w = cx.named_tensor("w", {s.n, s.row});
      x.set(random(static_cast<size_t>(s.k)));
      w.set(random(static_cast<size_t>(s.n * s.row)));
      Tensor wk = w.cast(t);
      if (s.row > s.k) wk = wk.slice(1, 0, s.k);
      Tensor y = x.cast(t).matmul(wk.permute({1, 0})).cast(DType::F32).retrieve();
      const std::vector<float> want = run_outputs(cx, reference(), {y})[0];
      const std::vector<float> got = run_outputs(cx, backend, {y})[0];
      EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u);
      ASSERT_EQ(got.size(), want.size());
      // The reference rounds each product to the type; the kernels sum exact ones.
      const double tol = t == DType::F32 ? 1e-4 : t == DType::F16 ? 2e-2 : 6e-2;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i])))
            << dtype_name(t) << " K " << s.k << " N " << s.n << " row " << s.row << ", element "
            << i;
    }
}

// x W^T with W's f32 values kept in a half-precision block format (ggml F16 and BF16, as
// a half-precision checkpoint loads): one row and several, K a whole number of 16-byte
// vectors or not, a batch dim. Each product must be a QMatMul run by the backend.
inline void expect_half_weight_products_match_reference(const Backend& backend) {
  std::mt19937 rng(13);
  struct Shape {
    std::vector<int64_t> x;  // [..., K]
    int64_t n;
  };
  for (const auto& [format, type] : {std::pair{1u, DType::F16}, std::pair{30u, DType::BF16}})
    for (const Shape& s : std::vector<Shape>{
             {{1, 1024}, 300}, {{1, 36}, 13}, {{7, 64}, 50}, {{2, 5, 40}, 24}, {{33, 256}, 72}}) {
      const int64_t k = s.x.back();
      Graph cx;
      std::vector<Expr> x_shape(s.x.begin(), s.x.end());
      Tensor x = cx.named_tensor("x", x_shape);
      Tensor w = cx.named_tensor("w", {s.n, k});
      int64_t rows = 1;
      for (int64_t d : s.x) rows *= d;
      x.set(uniform_floats(rng, static_cast<size_t>(rows)));
      const std::vector<float> values = uniform_floats(rng, static_cast<size_t>(s.n * k));
      Buffer half(type, values.size());
      for (size_t i = 0; i < values.size(); ++i) half.set_f64(i, values[i]);
      Buffer raw(DType::U8, half.bytes());
      std::memcpy(raw.data(), half.data(), half.bytes());
      w.set_quantized(format, std::move(raw));
      Tensor y = x.matmul(w.permute({1, 0})).retrieve();
      EXPECT_EQ(count_kernels<compiler::QMatMulOp>(cx), 1u) << dtype_name(type);
      const std::vector<float> want = run_outputs(cx, reference(), {y})[0];
      const std::vector<float> got = run_outputs(cx, backend, {y})[0];
      EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << dtype_name(type);
      ASSERT_EQ(got.size(), want.size());
      // Several rows may round x to W's type (as a half-precision model computes): each
      // element then errs by up to the type's unit roundoff times sum |x| |w|.
      const std::vector<float> xs = x.to_f32();
      const double unit = type == DType::F16 ? 0x1p-11 : 0x1p-8;
      for (size_t i = 0; i < got.size(); ++i) {
        const size_t row = i / static_cast<size_t>(s.n), col = i % static_cast<size_t>(s.n);
        double magnitude = 0;
        for (int64_t p = 0; p < k; ++p)
          magnitude += std::fabs(xs[row * k + p]) * std::fabs(half.get_f64(col * k + p));
        ASSERT_NEAR(got[i], want[i], 1e-5 + 1.01 * unit * magnitude)
            << dtype_name(type) << " x " << to_string(x_shape) << " N " << s.n << ", element "
            << i;
      }
    }
}

// f32 a by an f16 b read where it lies (an f16 KV cache under attention the attention
// rule does not fuse): batched prompt-shaped products and one row, exact in f32.
inline void expect_f32_by_f16_products_match_reference(const Backend& backend) {
  std::mt19937 rng(17);
  Graph cx;
  Tensor q = cx.named_tensor("q", {4, 9, 64});
  Tensor k = cx.named_tensor("k", {4, 30, 64}, DType::F16);
  Tensor x = cx.named_tensor("x", {1, 64});
  q.set(uniform_floats(rng, 4 * 9 * 64));
  const std::vector<float> kv = uniform_floats(rng, 4 * 30 * 64);
  k.set_buffer(Buffer::from_doubles(std::vector<double>(kv.begin(), kv.end()), DType::F16));
  x.set(uniform_floats(rng, 64));
  const Tensor keys = k.cast(DType::F32);
  std::vector<Tensor> outs = {
      q.matmul(keys.transpose(-1, -2)).retrieve(),             // scores of a prompt
      x.matmul(keys.slice(0, 0, 1).squeeze(0).transpose(0, 1)).retrieve(),  // one row
  };
  // Both are MatMuls reading the f16 values, not products of a widened copy.
  const auto reads_f16 = [](const Graph& g, const Node& n) {
    return g.node(n.inputs[1].source).dtype == DType::F16;
  };
  EXPECT_EQ(count_kernels<compiler::MatMulOp>(cx, reads_f16), outs.size());
  const auto want = run_outputs(cx, reference(), outs);
  const auto got = run_outputs(cx, backend, outs);
  EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u);
  for (size_t o = 0; o < outs.size(); ++o) {
    ASSERT_EQ(got[o].size(), want[o].size());
    for (size_t i = 0; i < got[o].size(); ++i)
      ASSERT_NEAR(got[o][i], want[o][i], 1e-4 * (1 + std::fabs(want[o][i])))
          << "product " << o << " element " << i;
  }
}

}  // namespace luminal::testing
