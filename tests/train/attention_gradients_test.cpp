// Attention's backward pass: the products autograd writes over materialised scores
// become the three AttentionGradOp kernels (rules hlir-attention-gradients), whose
// reference semantics give the gradients the primitives give.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "testing/attention_gradient_cases.hpp"
#include "testing/run_outputs.hpp"

using namespace luminal;

namespace {

size_t count_parts(const Graph& g, compiler::AttentionGradPart part) {
  size_t n = 0;
  for (uint32_t i = 0; i < g.num_nodes(); ++i)
    if (const auto* op =
            dynamic_cast<const compiler::AttentionGradOp*>(g.node(NodeId{i}).custom.get()))
      n += op->part == part;
  return n;
}

}  // namespace

TEST(AttentionGradients, ReplaceTheProductsOverScores) {
  std::mt19937 rng(5);
  for (const luminal::testing::AttentionGradientCase& c :
       luminal::testing::attention_gradient_cases()) {
    if (c.dtype != DType::F32) continue;  // (the reference rounds halves op by op)
    Graph cx;
    const std::vector<Tensor> grads = luminal::testing::attention_gradient_graph(cx, c, rng);
    const compiler::Optimized opt = compiler::optimize(
        cx, {.attention_gradients = [](DType t, int64_t, int64_t) { return t == DType::F32; }});
    EXPECT_EQ(count_parts(*opt.graph, compiler::AttentionGradPart::Stats), 1u) << c.label();
    EXPECT_EQ(count_parts(*opt.graph, compiler::AttentionGradPart::Queries), 1u) << c.label();
    EXPECT_EQ(count_parts(*opt.graph, compiler::AttentionGradPart::KeysValues), 1u) << c.label();
    // Nothing of [.., M, T] is left to compute but the forward pass's Attention.
    for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i) {
      const Node& n = opt.graph->node(NodeId{i});
      if (n.op == Op::Input || n.op == Op::Iota || n.op == Op::Custom) continue;
      const size_t r = n.shape.size();
      const Expr seq = c.symbolic ? Expr::var("seq") : Expr(c.seq);
      EXPECT_FALSE(r >= 2 && n.shape[r - 1] == seq && n.shape[r - 2] == seq)
          << c.label() << ": " << opt.graph->to_text();
    }
    const auto want = luminal::testing::run_outputs(cx, reference(), grads);
    const auto got = luminal::testing::run_optimized(
        cx, opt, grads,
        c.symbolic ? std::vector<std::pair<std::string, int64_t>>{{"seq", c.seq}}
                   : std::vector<std::pair<std::string, int64_t>>{});
    ASSERT_EQ(got.size(), 3u);
    for (size_t o = 0; o < 3; ++o) {
      ASSERT_EQ(got[o].size(), want[o].size());
      for (size_t i = 0; i < got[o].size(); ++i)
        ASSERT_NEAR(got[o][i], want[o][i], 1e-4 * (1 + std::fabs(want[o][i])))
            << c.label() << ", gradient "
            << "qkv"[o] << " element " << i;
    }
  }
}

TEST(AttentionGradients, StayPrimitivesWhereNotAsked) {
  std::mt19937 rng(5);
  Graph cx;
  luminal::testing::attention_gradient_graph(cx, luminal::testing::attention_gradient_cases()[0],
                                             rng);
  const compiler::Optimized opt = compiler::optimize(cx);
  EXPECT_EQ(count_parts(*opt.graph, compiler::AttentionGradPart::Queries), 0u);
}
