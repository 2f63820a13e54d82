// Values stored in the order their operands lie in memory (OptimizeOptions::
// storage_orders): the graph computes what the reference computes, and a convolutional
// network's elementwise ops read the products' [pixels, channels] rows in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "compiler/storage_order.hpp"
#include "compiler/walks.hpp"
#include "luminal/compiler/matmul_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "testing/random_graph.hpp"
#include "testing/run_outputs.hpp"

using namespace luminal;

namespace {

// Multiples of 1/8 up to 1: their products are exact in bf16, their sums in f32.
Buffer eighths(std::mt19937& rng, const std::vector<int64_t>& shape, DType t) {
  std::vector<double> v(static_cast<size_t>(
      std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>())));
  for (double& x : v) x = std::uniform_int_distribution<int>(-8, 8)(rng) / 8.0;
  return Buffer::from_doubles(v, t);
}

// The elementwise nodes and copies of `g` (rank 2 and more) that read a computed value
// whole (no dim broadcast) across its memory: its smallest stride not along the value's
// last dim. (Inputs are read as they are given: an NCHW image, weights.)
std::vector<std::string> reads_across_memory(const Graph& g) {
  std::vector<std::string> found;
  for (uint32_t i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(NodeId{i});
    if (!is_elementwise(n.op) || n.shape.size() < 2) continue;
    for (const Edge& e : n.inputs) {
      if (g.node(e.source).op == Op::Input) continue;
      int64_t smallest = INT64_MAX, last = 0;
      bool whole = true;
      for (size_t d = 0; d < e.view.rank(); ++d) {
        if (e.view.shape()[d] == Expr(1)) continue;
        const std::optional<int64_t> s = e.view.strides()[d].as_const();
        whole = whole && s && *s != 0;
        if (s && *s > 0) smallest = std::min(smallest, *s), last = *s;
      }
      if (whole && last != smallest)
        found.push_back(std::string(op_name(n.op)) + " " + to_string(n.shape) + " reads " +
                        e.view.to_string());
    }
  }
  return found;
}

}  // namespace

// Random graphs of primitives over random views (transposes among them): the reordered
// graph, run on the reference interpreter, gives the reference's values, and the pass
// reorders some of their nodes.
TEST(StorageOrders, RandomGraphsMatchTheReference) {
  size_t reordered = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    Graph cx;
    luminal::testing::RandomGraph rg(seed);
    rg.build(cx, 25);
    const std::vector<Node> nodes = compiler::storage_ordered(cx);
    for (uint32_t i = 0; i < cx.num_nodes(); ++i)
      reordered += nodes[i].shape != cx.node(NodeId{i}).shape;
    const compiler::Optimized opt = compiler::optimize(cx, {.storage_orders = true});
    const auto got = luminal::testing::run_optimized(cx, opt, rg.outputs);
    const auto want = luminal::testing::run_outputs(cx, reference(), rg.outputs);
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(got[o].size(), want[o].size());
      for (size_t k = 0; k < got[o].size(); ++k)
        ASSERT_NEAR(got[o][k], want[o][k], 1e-5 * (1 + std::fabs(want[o][k])))
            << "seed " << seed << " output " << o << " element " << k;
    }
  }
  EXPECT_GT(reordered, 0u);
}

// Two residual blocks' worth of a ResNet in bf16, with the window products a GPU takes
// (not a product with a bias over im2col columns, though the BatchNorm now reads it so):
// convolutions, BatchNorm as a per-channel scale and shift, ReLU, max pooling, a residual
// add and the global average pool. Reordered, no elementwise op reads across memory (the
// products are stored [pixels, channels] as they come, not transposed for their readers)
// where without the pass the BatchNorms read the products as NCHW. The values are those
// of the graph optimized without the pass, to the bit (the same kernels, their values
// stored elsewhere), and the reference's to bf16's rounding (whose primitives round each
// product before the sum, where the fused products do not).
TEST(StorageOrders, AConvolutionalNetworkStaysChannelsLast) {
  for (const bool batch_symbolic : {false, true}) {
    Graph cx;
    const int64_t n = 2;
    const Expr batch = batch_symbolic ? Expr("n") : Expr(n);
    if (batch_symbolic) cx.set_dim("n", n);
    std::mt19937 rng(5);
    auto input = [&](const std::string& name, std::vector<int64_t> shape, const Expr& first) {
      std::vector<Expr> dims(shape.begin(), shape.end());
      dims[0] = first;
      Tensor t = cx.named_tensor(name, dims, DType::BF16);
      t.set_buffer(eighths(rng, shape, DType::BF16));
      return t;
    };
    Tensor x = input("x", {n, 8, 12, 12}, batch);
    // (As torch decomposes it: the mean subtracted first, which reads like a bias row
    // added to the product.)
    auto batch_norm = [&](const Tensor& y, const std::string& name) {
      const Expr c = y.shape()[1];
      Tensor mean = input(name + ".mean", {*c.as_const(), 1, 1}, c);
      Tensor scale = input(name + ".scale", {*c.as_const(), 1, 1}, c);
      Tensor shift = input(name + ".shift", {*c.as_const(), 1, 1}, c);
      return (y - mean) * scale + shift;
    };
    Tensor w1 = input("w1", {16, 8, 3, 3}, 16), w2 = input("w2", {16, 16, 3, 3}, 16);
    Tensor h = batch_norm(conv2d(x, w1, {}, {.padding = 1}), "bn1").relu();
    h = max_pool2d(h, {.kernel = 3, .stride = 2, .padding = 1});  // [n, 16, 6, 6]
    Tensor y = (batch_norm(conv2d(h, w2, {}, {.padding = 1}), "bn2") + h).relu();
    Tensor out = y.mean({2, 3}).retrieve();

    // (The options the CUDA backend takes.)
    const compiler::Optimized before =
        compiler::optimize(cx, {.gemm_epilogues = true, .window_products = true});
    EXPECT_FALSE(reads_across_memory(*before.graph).empty()) << before.graph->to_text();
    const compiler::Optimized opt = compiler::optimize(
        cx, {.gemm_epilogues = true, .window_products = true, .storage_orders = true});
    const std::vector<std::string> across = reads_across_memory(*opt.graph);
    EXPECT_TRUE(across.empty()) << across.front() << "\n" << opt.graph->to_text();
    int products = 0;
    for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i)
      if (const auto* w = dynamic_cast<const compiler::WindowMatMulOp*>(
              opt.graph->node(NodeId{i}).custom.get())) {
        ++products;
        EXPECT_FALSE(w->transposed);
      }
    EXPECT_EQ(products, 2) << opt.graph->to_text();
    const std::vector<std::pair<std::string, int64_t>> dims = {{"n", n}};
    const std::vector<float> got = luminal::testing::run_optimized(cx, opt, {out}, dims)[0];
    EXPECT_EQ(got, luminal::testing::run_optimized(cx, before, {out}, dims)[0]);
    const std::vector<float> want = luminal::testing::run_outputs(cx, reference(), {out})[0];
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], want[k], 0.02 * (1 + std::fabs(want[k]))) << k;
  }
}

// Products of an operand stored transposed (a weight kept [K, N] and read [N, K], and the
// reverse) stay products: the multiply a product's sum reads is not reordered, though it
// reads an operand across memory.
TEST(StorageOrders, ProductsStayProducts) {
  for (const bool stored_nk : {false, true}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {1, 64});
    Tensor w = stored_nk ? cx.named_tensor("w", {48, 64}) : cx.named_tensor("w", {64, 48});
    Tensor y = x.matmul(stored_nk ? w.permute({1, 0}) : w).retrieve();
    std::mt19937 rng(3);
    x.set(luminal::testing::uniform_floats(rng, 64));
    w.set(luminal::testing::uniform_floats(rng, 64 * 48));
    const compiler::Optimized opt = compiler::optimize(cx, {.storage_orders = true});
    int products = 0;
    for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i)
      products += dynamic_cast<const compiler::MatMulOp*>(
                      opt.graph->node(NodeId{i}).custom.get()) != nullptr;
    EXPECT_EQ(products, 1) << opt.graph->to_text();
    const std::vector<float> got = luminal::testing::run_optimized(cx, opt, {y})[0];
    const std::vector<float> want = luminal::testing::run_outputs(cx, reference(), {y})[0];
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5) << k;
  }
}

// over_order against brute force: random views (slices, pads, flips, permutes, windows,
// broadcasts, reshapes) of a row-major value, re-expressed over the value stored in a
// random order of its dims, read the same element at every valid index, or decline.
TEST(StorageOrders, ViewsOverAnotherOrderReadTheSameElements) {
  std::mt19937 rng(11);
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int restrided = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<Expr> shape;
    std::vector<int64_t> size;
    for (int d = pick(1, 4); d > 0; --d) size.push_back(pick(1, 5)), shape.push_back(size.back());
    View v = View::contiguous(shape);
    for (int step = pick(0, 4); step > 0; --step) {
      const int axis = pick(0, static_cast<int>(v.rank()) - 1);
      const int64_t n = *v.shape()[static_cast<size_t>(axis)].as_const();
      switch (pick(0, 6)) {
        case 0:
          v = v.slice(axis, n > 1 ? 1 : 0, n);
          break;
        case 1:
          v = v.pad(axis, pick(0, 2), pick(0, 2));
          break;
        case 2:
          v = v.flip(axis);
          break;
        case 3: {
          std::vector<int> axes(v.rank());
          std::iota(axes.begin(), axes.end(), 0);
          std::shuffle(axes.begin(), axes.end(), rng);
          v = v.permute(axes);
          break;
        }
        case 4:
          if (const auto w = v.unfold(axis, std::min<int64_t>(n, 2), 1)) v = *w;
          break;
        case 5:
          v = v.expand_dim(axis, pick(1, 3));
          break;
        default: {
          std::vector<Expr> merged;  // the first two dims as one
          if (v.rank() < 2) break;
          merged.push_back(v.shape()[0] * v.shape()[1]);
          merged.insert(merged.end(), v.shape().begin() + 2, v.shape().end());
          if (const auto r = v.reshape(merged)) v = *r;
        }
      }
    }
    std::vector<int> order(shape.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    const std::optional<View> over = compiler::over_order(v, shape, order);
    if (!over) continue;
    ++restrided;
    // Row strides of the value as it was and as it is stored in `order`.
    std::vector<int64_t> row(size.size(), 1), stored(size.size(), 1);
    for (size_t e = size.size() - 1; e-- > 0;) row[e] = row[e + 1] * size[e + 1];
    for (size_t i = order.size() - 1; i-- > 0;)
      stored[static_cast<size_t>(order[i])] =
          stored[static_cast<size_t>(order[i + 1])] * size[static_cast<size_t>(order[i + 1])];
    const ConcreteView a = v.resolve({}), b = over->resolve({});
    std::vector<int64_t> idx(a.dims.size(), 0);
    for (int64_t flat = 0; flat < a.numel(); ++flat) {
      int64_t rest = flat, at = a.offset, at_b = b.offset;
      bool valid = true;
      for (size_t d = a.dims.size(); d-- > 0;) {
        idx[d] = rest % a.dims[d], rest /= a.dims[d];
        valid = valid && idx[d] >= a.mask_lo[d] && idx[d] < a.mask_hi[d];
        at += idx[d] * a.strides[d], at_b += idx[d] * b.strides[d];
      }
      if (!valid) continue;
      int64_t want = 0;  // the element's offset in the stored order
      for (size_t e = 0; e < size.size(); ++e) want += (at / row[e] % size[e]) * stored[e];
      ASSERT_EQ(at_b, want) << v.to_string() << " over order of " << to_string(shape) << ": "
                            << over->to_string();
    }
  }
  EXPECT_GT(restrided, 1000);
}
