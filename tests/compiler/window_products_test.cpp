// Convolutions' products read their windows in place (rules hlir-window-products): the
// MatMul over im2col columns becomes a WindowMatMul over the image (laid out channels
// last where the channels split into 16-byte runs), whose reference semantics give what
// the primitives give; stored NCHW where the output is read so.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "luminal/compiler/matmul_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "testing/run_outputs.hpp"

using namespace luminal;

namespace {

struct ConvCase {
  std::vector<int64_t> x, w;
  ConvOptions o;
  DType t;
  bool channels_last;  // whether the image is copied with its channels innermost
};

std::string label(const ConvCase& c) {
  return to_string(std::vector<Expr>(c.x.begin(), c.x.end())) + " * " +
         to_string(std::vector<Expr>(c.w.begin(), c.w.end())) + " stride " +
         std::to_string(c.o.stride) + " padding " + std::to_string(c.o.padding) + " dilation " +
         std::to_string(c.o.dilation) + " groups " + std::to_string(c.o.groups) + " " +
         std::string(dtype_name(c.t));
}

// Multiples of 1/8 up to 1: their products are exact in bf16, their sums in f32.
Buffer small_values(std::mt19937& rng, const std::vector<int64_t>& shape, DType t) {
  std::vector<double> v(static_cast<size_t>(
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>())));
  for (double& x : v) x = std::uniform_int_distribution<int>(-8, 8)(rng) / 8.0;
  return Buffer::from_doubles(v, t);
}

}  // namespace

TEST(WindowProducts, ConvolutionsReadTheirWindowsAndMatchThePrimitives) {
  const std::vector<ConvCase> cases = {
      {{2, 16, 9, 11}, {24, 16, 3, 3}, {.padding = 1}, DType::BF16, true},
      {{2, 16, 9, 11}, {24, 16, 3, 3}, {.padding = 1}, DType::F16, true},
      {{3, 3, 20, 17}, {70, 3, 7, 7}, {.stride = 2, .padding = 3}, DType::BF16, false},
      {{2, 32, 8, 8}, {64, 32, 1, 1}, {.stride = 2}, DType::BF16, false},
      {{2, 8, 12, 12}, {16, 8, 3, 3}, {.padding = 2, .dilation = 2}, DType::F16, true},
      {{2, 16, 10, 10}, {32, 8, 3, 3}, {.padding = 1, .groups = 2}, DType::BF16, true},
      {{2, 12, 10, 10}, {24, 4, 3, 3}, {.padding = 1, .groups = 3}, DType::BF16, false},
      {{2, 8, 33}, {12, 8, 5}, {.padding = 2}, DType::BF16, true},
  };
  std::mt19937 rng(7);
  for (const ConvCase& c : cases) {
    const Buffer xv = small_values(rng, c.x, c.t), wv = small_values(rng, c.w, c.t);
    for (const bool relu : {false, true}) {
      const std::string what = label(c) + (relu ? " relu" : "");
      Graph cx;
      Tensor x = cx.named_tensor("x", std::vector<Expr>(c.x.begin(), c.x.end()), c.t);
      Tensor w = cx.named_tensor("w", std::vector<Expr>(c.w.begin(), c.w.end()), c.t);
      x.set_buffer(xv);
      w.set_buffer(wv);
      Tensor y = c.x.size() == 3 ? conv1d(x, w, {}, c.o) : conv2d(x, w, {}, c.o);
      if (relu) y = y.relu();
      y.retrieve();
      const compiler::Optimized opt = compiler::optimize(cx, {.window_products = true});
      const Node* product = nullptr;
      for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i) {
        const Node& n = opt.graph->node(NodeId{i});
        if (dynamic_cast<const compiler::WindowMatMulOp*>(n.custom.get())) product = &n;
        EXPECT_FALSE(dynamic_cast<const compiler::MatMulOp*>(n.custom.get())) << what;
      }
      ASSERT_NE(product, nullptr) << what << "\n" << opt.graph->to_text();
      // The sum's last dim walks the channels, one by one, where the image was laid out
      // again (not where the channels are too few, nor where the image is read as it is
      // given: a convolution without padding).
      const View& a = product->inputs[0].view;
      const bool channels =
          a.shape()[a.rank() - 2] == Expr(c.w[1]) && a.strides()[a.rank() - 2] == Expr(1);
      EXPECT_EQ(channels, c.channels_last) << what << ": " << a.to_string();
      // Stored NCHW where the ReLU reads it so.
      const auto* op = static_cast<const compiler::WindowMatMulOp*>(product->custom.get());
      if (relu) {
        EXPECT_TRUE(op->transposed) << what;
      }
      const std::vector<float> want = luminal::testing::run_outputs(cx, reference(), {y})[0];
      const std::vector<float> got = luminal::testing::run_optimized(cx, opt, {y})[0];
      ASSERT_EQ(got, want) << what;
    }
  }
}

TEST(WindowProducts, StayProductsOfCopiesWhereNotAskedOrInF32) {
  for (const auto& [t, asked] : {std::pair{DType::BF16, false}, std::pair{DType::F32, true}}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {2, 8, 6, 6}, t);
    Tensor w = cx.named_tensor("w", {8, 8, 3, 3}, t);
    conv2d(x, w, {}, {.padding = 1}).retrieve();
    const compiler::Optimized opt = compiler::optimize(cx, {.window_products = asked});
    for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i)
      EXPECT_FALSE(
          dynamic_cast<const compiler::WindowMatMulOp*>(opt.graph->node(NodeId{i}).custom.get()))
          << dtype_name(t);
  }
}

// A batch of symbolic size (torch.compile's dynamic shapes): the convolution builds (its
// sum's length is spelled out, not inferred), runs on the CPU as the reference does, and
// its product still reads the image channels last and stores NCHW for the ReLU.
TEST(WindowProducts, ASymbolicBatchKeepsTheLayouts) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {Expr("n"), 16, 9, 11}, DType::BF16);
  Tensor w = cx.named_tensor("w", {24, 16, 3, 3}, DType::BF16);
  cx.set_dim("n", 3);
  std::mt19937 rng(9);
  x.set_buffer(small_values(rng, {3, 16, 9, 11}, DType::BF16));
  w.set_buffer(small_values(rng, {24, 16, 3, 3}, DType::BF16));
  Tensor y = conv2d(x, w, {}, {.padding = 1}).relu().retrieve();
  const compiler::Optimized opt = compiler::optimize(cx, {.window_products = true});
  const Node* product = nullptr;
  for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i)
    if (dynamic_cast<const compiler::WindowMatMulOp*>(opt.graph->node(NodeId{i}).custom.get()))
      product = &opt.graph->node(NodeId{i});
  ASSERT_NE(product, nullptr) << opt.graph->to_text();
  const View& a = product->inputs[0].view;
  EXPECT_EQ(a.strides()[a.rank() - 2], Expr(1)) << a.to_string();
  EXPECT_TRUE(static_cast<const compiler::WindowMatMulOp*>(product->custom.get())->transposed);
  const std::vector<float> want = luminal::testing::run_outputs(cx, reference(), {y})[0];
  EXPECT_EQ(luminal::testing::run_optimized(cx, opt, {y}, {{"n", 3}})[0], want);
  EXPECT_EQ(luminal::testing::run_outputs(cx, cpu(), {y})[0], want);
}
