// Attention outputs stored in the order the copy that reads them wants
// (OptimizeOptions::attention_output_orders): the copy goes, the attention's rows land
// where the copy would have put them, and the program computes what the reference does.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "luminal/nn/attention.hpp"
#include "testing/run_outputs.hpp"

using namespace luminal;

namespace {

// The optimized graph's Attention nodes' out_orders, and its copies (Contiguous nodes).
struct Found {
  std::vector<std::vector<int64_t>> orders;
  int copies = 0;
};
Found found(const compiler::Optimized& opt) {
  Found f;
  for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i) {
    const Node& n = opt.graph->node(NodeId{i});
    if (const auto* a = dynamic_cast<const compiler::AttentionOp*>(n.custom.get()))
      f.orders.push_back(a->out_order);
    f.copies += n.op == Op::Contiguous;
  }
  return f;
}

// softmax(where(mask, q k^T / sqrt(d), -inf)) v over [batch..., M, D] queries.
Tensor attend(Graph& cx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t seq) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape().back().eval()));
  const Tensor scores = q.matmul(k.transpose(-1, -2)) * scale;
  return where(nn::causal_mask(cx, seq, 0), scores, -std::numeric_limits<double>::infinity())
      .softmax(-1)
      .matmul(v);
}

void expect_reference_values(Graph& cx, const compiler::Optimized& opt, const Tensor& y) {
  const std::vector<float> got = luminal::testing::run_optimized(cx, opt, {y})[0];
  const std::vector<float> want = luminal::testing::run_outputs(cx, reference(), {y})[0];
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
}

}  // namespace

// A transformer block's attention: queries, keys and values as [batch, heads, tokens,
// head dim] views of one projection, the output's heads put back side by side for the
// output projection ([batch, tokens, heads x head dim]): stored so by the attention.
TEST(AttentionOrders, HeadsPutBackSideBySideAreWrittenSoByTheAttention) {
  const int64_t b = 2, t = 12, h = 3, d = 8;
  Graph cx;
  Tensor x = cx.named_tensor("x", {b, t, 3 * h * d});
  Tensor w = cx.named_tensor("w", {h * d, 5});
  std::mt19937 rng(4);
  x.set(luminal::testing::uniform_floats(rng, static_cast<size_t>(b * t * 3 * h * d)));
  w.set(luminal::testing::uniform_floats(rng, static_cast<size_t>(h * d * 5)));
  auto heads = [&](int64_t part) {
    return x.slice(2, part * h * d, (part + 1) * h * d).reshape({b, t, h, d}).transpose(1, 2);
  };
  const Tensor a = attend(cx, heads(0), heads(1), heads(2), t);
  Tensor y = a.transpose(1, 2).reshape({b, t, h * d}).matmul(w).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx, {.attention_output_orders = true});
  const Found f = found(opt);
  ASSERT_EQ(f.orders.size(), 1u) << opt.graph->to_text();
  EXPECT_EQ(f.orders[0], (std::vector<int64_t>{0, 2, 1, 3})) << opt.graph->to_text();
  EXPECT_EQ(f.copies, 0) << opt.graph->to_text();
  expect_reference_values(cx, opt, y);
  // Off, the copy stays.
  const Found off = found(compiler::optimize(cx));
  ASSERT_EQ(off.orders.size(), 1u);
  EXPECT_TRUE(off.orders[0].empty());
  EXPECT_EQ(off.copies, 1);
}

// Grouped queries ([kv heads, group, tokens, head dim]) put back as [tokens, kv heads,
// group, head dim]: an order of three dims before the value dim.
TEST(AttentionOrders, GroupedQueriesTakeAnyOrderOfTheirRows) {
  const int64_t kv = 2, group = 3, t = 10, d = 8;
  Graph cx;
  Tensor q = cx.named_tensor("q", {kv, group, t, d});
  Tensor k = cx.named_tensor("k", {kv, t, d});
  Tensor v = cx.named_tensor("v", {kv, t, d});
  std::mt19937 rng(5);
  for (Tensor* x : {&q, &k, &v})
    x->set(luminal::testing::uniform_floats(rng, static_cast<size_t>(product(x->shape()).eval())));
  const Tensor a = attend(cx, q, k.expand(1, group), v.expand(1, group), t);
  Tensor y = (a.permute({2, 0, 1, 3}).reshape({t, kv * group * d}) * 2.0).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx, {.attention_output_orders = true});
  const Found f = found(opt);
  ASSERT_EQ(f.orders.size(), 1u) << opt.graph->to_text();
  EXPECT_EQ(f.orders[0], (std::vector<int64_t>{2, 0, 1, 3})) << opt.graph->to_text();
  expect_reference_values(cx, opt, y);
}

// As PyTorch's grouped-query attention reaches it: the output's [batch, key heads, group,
// tokens, head dim] read as [batch, heads, tokens, head dim] (key heads and group merged)
// and put back as [batch, tokens, heads x head dim] for the output projection. The copy's
// view has a dim fewer than the attention: the order is over the attention's five dims.
TEST(AttentionOrders, GroupedHeadsReadAsOneDimAreOrderedOverTheAttentionsDims) {
  const int64_t b = 2, kv = 4, group = 2, t = 16, d = 8;
  Graph cx;
  Tensor q = cx.named_tensor("q", {b, kv, group, t, d});
  Tensor k = cx.named_tensor("k", {b, kv, t, d});
  Tensor v = cx.named_tensor("v", {b, kv, t, d});
  Tensor w = cx.named_tensor("w", {kv * group * d, 5});
  std::mt19937 rng(7);
  for (Tensor* x : {&q, &k, &v, &w})
    x->set(luminal::testing::uniform_floats(rng, static_cast<size_t>(product(x->shape()).eval())));
  const Tensor a = attend(cx, q, k.expand(2, group), v.expand(2, group), t);
  Tensor y = a.reshape({b, kv * group, t, d})
                 .transpose(1, 2)
                 .reshape({b, t, kv * group * d})
                 .matmul(w)
                 .retrieve();
  const compiler::Optimized opt = compiler::optimize(cx, {.attention_output_orders = true});
  const Found f = found(opt);
  ASSERT_EQ(f.orders.size(), 1u) << opt.graph->to_text();
  EXPECT_EQ(f.orders[0], (std::vector<int64_t>{0, 3, 1, 2, 4})) << opt.graph->to_text();
  EXPECT_EQ(f.copies, 0) << opt.graph->to_text();
  expect_reference_values(cx, opt, y);
}

// An attention read by more than the copy (here also summed), or a copy that moves the
// value dim, keeps its own order.
TEST(AttentionOrders, AnAttentionReadElsewhereKeepsItsOrder) {
  const int64_t h = 2, t = 8, d = 4;
  for (const bool also_summed : {true, false}) {
    Graph cx;
    Tensor q = cx.named_tensor("q", {h, t, d});
    std::mt19937 rng(6);
    q.set(luminal::testing::uniform_floats(rng, static_cast<size_t>(h * t * d)));
    const Tensor a = attend(cx, q, q, q, t);
    // Both: a copy [t, h, d]; then either the sum as well, or the copy [h, d, t] alone.
    Tensor y = also_summed ? a.transpose(0, 1).contiguous() : a.transpose(1, 2).contiguous();
    y.retrieve();
    if (also_summed) a.sum({2}).retrieve();
    const compiler::Optimized opt = compiler::optimize(cx, {.attention_output_orders = true});
    const Found f = found(opt);
    ASSERT_EQ(f.orders.size(), 1u) << opt.graph->to_text();
    EXPECT_TRUE(f.orders[0].empty()) << (also_summed ? "summed too" : "value dim moved");
    expect_reference_values(cx, opt, y);
  }
}
