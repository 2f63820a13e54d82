// Values computed from indices alone folded into Iotas (compiler::folded_index_values,
// run by optimize): a mask spelled out elementwise, as torch's front end writes it,
// becomes one the attention computes; the optimized graphs compute what the reference
// interpreter computes over the user's graph, for hand-written and random chains.
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

constexpr double kInf = std::numeric_limits<double>::infinity();

int count_ops(const Graph& g, Op op) {
  int n = 0;
  for (uint32_t i = 0; i < g.num_nodes(); ++i) n += g.node(NodeId{i}).op == op;
  return n;
}

// An input of `shape` (static) holding uniform random values.
Tensor random_input(Graph& cx, std::mt19937& rng, const char* name,
                    const std::vector<Expr>& shape) {
  Tensor x = cx.named_tensor(name, shape);
  x.set(luminal::testing::uniform_floats(rng, static_cast<size_t>(product(shape).eval())));
  return x;
}

const Node* attention_node(const Graph& g) {
  for (uint32_t i = 0; i < g.num_nodes(); ++i)
    if (dynamic_cast<const compiler::AttentionOp*>(g.node(NodeId{i}).custom.get()))
      return &g.node(NodeId{i});
  return nullptr;
}

void expect_reference_values(Graph& cx, const compiler::Optimized& opt, const Tensor& y,
                             const std::vector<std::pair<std::string, int64_t>>& dims = {}) {
  const std::vector<float> got = luminal::testing::run_optimized(cx, opt, {y}, dims)[0];
  const std::vector<float> want = luminal::testing::run_outputs(cx, reference(), {y})[0];
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(want[i])) {
      ASSERT_TRUE(std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i])
          << i << ": " << got[i];
      continue;
    }
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
  }
}

// Causal attention over [1, heads, t, d] as torch's front end hands it over: the mask
// from one arange compared across (a key after the query is masked), turned into a
// float mask of 0 and -inf, compared back into bool, and rows that keep no key zeroed
// (the count of kept keys compared with 0).
// (`fill`, `mask_type`: the float mask's masked value and type: -inf, or in half precision
// the type's lowest value, as transformers writes it.)
Tensor torch_style_causal_attention(Graph& cx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    Expr t, double fill = -kInf, DType mask_type = DType::F32) {
  const Tensor pos = cx.iota(Expr("z"), {t}, DType::I64);
  const Tensor future =
      lt(pos.reshape({t, 1}).broadcast_to({t, t}), pos.reshape({1, t}).broadcast_to({t, t}));
  const Tensor zero = cx.constant(0.0, mask_type).broadcast_to({1, 1, t, t});
  const Tensor float_mask = where(future.logical_not().reshape({1, 1, t, t}), zero,
                                  cx.constant(fill, mask_type).broadcast_to({1, 1, t, t}));
  const Tensor keep =
      logical_and(gt(float_mask, 0.0).logical_not(), lt(float_mask, 0.0).logical_not());
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.shape().back().eval()));
  const Tensor scores = q.matmul(k.transpose(-1, -2)) * scale;
  const Tensor out = where(keep.broadcast_to(scores.shape()), scores, -kInf).softmax(-1).matmul(v);
  const Tensor any_kept = gt(keep.cast(DType::F32).sum({3}, true), 0.0);
  return where(any_kept.broadcast_to(out.shape()), out, 0.0);
}

// The heads side by side, through an output projection (what reads attention in a block).
Tensor projected(Graph& cx, const Tensor& heads, std::mt19937& rng) {
  const std::vector<Expr>& s = heads.shape();
  const int64_t width = s[1].eval() * s[3].eval();
  Tensor w = cx.named_tensor("w", {width, 5});
  w.set(luminal::testing::uniform_floats(rng, static_cast<size_t>(width * 5)));
  return heads.transpose(1, 2).reshape({s[0], s[2], width}).matmul(w);
}

}  // namespace

TEST(IndexFolding, TorchsCausalMaskBecomesOneTheAttentionComputes) {
  for (const auto& [fill, mask_type] :
       {std::pair{-kInf, DType::F32}, std::pair{-65504.0, DType::F16},
        std::pair{-3.3895313892515355e38, DType::BF16}}) {
    const int64_t h = 2, t = 7, d = 8;
    Graph cx;
    std::mt19937 rng(3);
    auto input = [&](const char* name) { return random_input(cx, rng, name, {1, h, t, d}); };
    const Tensor q = input("q"), k = input("k"), v = input("v");
    Tensor y = projected(cx, torch_style_causal_attention(cx, q, k, v, t, fill, mask_type), rng)
                   .retrieve();
    const compiler::Optimized opt = compiler::optimize(cx);
    const Node* attention = attention_node(*opt.graph);
    ASSERT_NE(attention, nullptr) << opt.graph->to_text();
    const std::optional<Expr> mask = compiler::computed_mask(*opt.graph, *attention);
    ASSERT_TRUE(mask.has_value()) << opt.graph->to_text();
    // The guard went with the count it compared: no Where, no reduction is left.
    EXPECT_EQ(count_ops(*opt.graph, Op::Where), 0) << opt.graph->to_text();
    EXPECT_EQ(count_ops(*opt.graph, Op::SumReduce), 0) << opt.graph->to_text();
    // The mask keeps exactly the keys up to the query's position.
    for (int64_t m = 0; m < t; ++m)
      for (int64_t key = 0; key < t; ++key) {
        Bindings b;
        b.set("lum_m", m);
        b.set("lum_t", key);
        EXPECT_EQ(mask->eval(b) != 0, key <= m) << *mask << " at " << m << ", " << key;
      }
    // ... as a comparison the kernels' tile bounds decide (no product by the fill).
    EXPECT_EQ(mask->to_string().find('*'), std::string::npos) << *mask;
    expect_reference_values(cx, opt, y);
  }
}

// The same over a symbolic number of tokens, compiled once and run at two lengths.
TEST(IndexFolding, ASymbolicLengthsMaskFoldsToo) {
  const int64_t h = 2, d = 8;
  const Expr t("s");
  Graph cx;
  Tensor q = cx.named_tensor("q", {1, h, t, d});
  Tensor k = cx.named_tensor("k", {1, h, t, d});
  Tensor v = cx.named_tensor("v", {1, h, t, d});
  std::mt19937 rng(5);
  Tensor y = projected(cx, torch_style_causal_attention(cx, q, k, v, t), rng).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  const Node* attention = attention_node(*opt.graph);
  ASSERT_NE(attention, nullptr) << opt.graph->to_text();
  EXPECT_TRUE(compiler::computed_mask(*opt.graph, *attention).has_value()) << opt.graph->to_text();
  EXPECT_EQ(count_ops(*opt.graph, Op::Where), 0) << opt.graph->to_text();
  for (int64_t len : {1, 5, 9}) {
    cx.set_dim("s", len);
    for (Tensor* x : {&q, &k, &v})
      x->set(luminal::testing::uniform_floats(rng, static_cast<size_t>(h * len * d)));
    expect_reference_values(cx, opt, y, {{"s", len}});
  }
}

// A mask that leaves some rows without a key keeps its guard (its count is 0 there), and
// the rows come out 0, as the user's graph says.
TEST(IndexFolding, RowsThatKeepNoKeyKeepTheirGuard) {
  const int64_t t = 6, d = 4;
  Graph cx;
  std::mt19937 rng(7);
  auto input = [&](const char* name) { return random_input(cx, rng, name, {1, 1, t, d}); };
  const Tensor q = input("q"), k = input("k"), v = input("v");
  // Keys strictly before the query: row 0 keeps none.
  const Tensor pos = cx.iota(Expr("z"), {t}, DType::I32);
  const Tensor keep =
      lt(pos.reshape({1, t}).broadcast_to({t, t}), pos.reshape({t, 1}).broadcast_to({t, t}))
          .reshape({1, 1, t, t});
  const Tensor scores = q.matmul(k.transpose(-1, -2)) * 0.5;
  const Tensor out = where(keep, scores, -kInf).softmax(-1).matmul(v);
  Tensor y =
      where(gt(keep.cast(DType::F32).sum({3}, true), 0.0).broadcast_to(out.shape()), out, 0.0)
          .retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  EXPECT_EQ(count_ops(*opt.graph, Op::Where), 1) << opt.graph->to_text();
  expect_reference_values(cx, opt, y);
  EXPECT_EQ(luminal::testing::run_optimized(cx, opt, {y})[0][0], 0.0f);
}

// A value that reads an input is not folded, however much of it is indices.
TEST(IndexFolding, ValuesThatReadInputsStay) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {5}, DType::I32);
  x.set(std::vector<float>{3, 1, 4, 1, 5});
  const Tensor pos = cx.iota(Expr("z"), {5}, DType::I32);
  Tensor y = where(lt(pos, x), pos + 1, pos * 2).cast(DType::F32).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  EXPECT_EQ(count_ops(*opt.graph, Op::Where), 1) << opt.graph->to_text();
  expect_reference_values(cx, opt, y);
}

// A float mask of 0 and -inf (or the type's lowest value, as transformers writes it in
// half precision) read through padding (0 past its end, as a bias padded to an aligned
// length is read) and compared back into bool.
TEST(IndexFolding, AFloatMaskReadThroughPaddingFolds) {
  struct Mask {
    double kept, other;
    DType dtype;
  };
  for (const Mask& m : {Mask{0.0, -kInf, DType::F32}, Mask{-kInf, 0.0, DType::F32},
                        Mask{0.0, -3.3895313892515355e38, DType::BF16},
                        Mask{0.0, -65504.0, DType::F16}, Mask{0.0, -65504.0, DType::BF16}}) {
    Graph cx;
    const Tensor pos = cx.iota(Expr("z"), {5}, DType::I32);
    const Tensor c =
        lt(pos.reshape({5, 1}).broadcast_to({5, 5}), pos.reshape({1, 5}).broadcast_to({5, 5}));
    const Tensor mask = where(c, cx.constant(m.kept, m.dtype).broadcast_to({5, 5}),
                              cx.constant(m.other, m.dtype).broadcast_to({5, 5}));
    // (-65504 as a bf16 is -65536: compared in f32 with -65520 it is below.)
    Tensor y =
        logical_and(lt(mask.pad(1, 0, 3), 0.0), lt(mask.pad(1, 0, 3).cast(DType::F32), -65520.0))
            .cast(DType::F32)
            .retrieve();
    Tensor z = lt(mask.pad(1, 0, 3), 0.0).cast(DType::F32).retrieve();
    const compiler::Optimized opt = compiler::optimize(cx);
    for (const auto& [user, node] : opt.outputs)
      EXPECT_EQ(opt.graph->node(node).op, Op::Iota) << opt.graph->to_text();
    expect_reference_values(cx, opt, y);
    expect_reference_values(cx, opt, z);
  }
}

// Random chains over iotas and constants read through broadcasts, permutations, slices
// and padding (of any value, float masks too): comparisons, logic, integer arithmetic, Where
// between integers and between float constants, casts, and counts along an axis compared with
// constants. Each optimized graph against the reference over the user's graph; those built of
// integers and of 0 / -inf alone fold to one Iota.
TEST(IndexFolding, RandomIndexChainsComputeTheReferencesValues) {
  std::mt19937 rng(11);
  int folded = 0, foldable = 0;
  for (int trial = 0; trial < 150; ++trial) {
    Graph cx;
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    // Chains that may keep nodes: a count along an axis (folded only where it is decided).
    bool may_stay = false;
    // A [4, 6] value from an iota or constant, through a random view.
    auto leaf = [&]() -> Tensor {
      const Expr z("z");
      const Expr exprs[] = {z, z % 3, z / 2, (z * 7) % 5, z - 3, lt(z, 4), Expr(2)};
      switch (pick(5)) {
        case 0:
          return cx.iota(exprs[pick(7)], {4, 6}, pick(2) ? DType::I32 : DType::I64);
        case 1:
          return cx.iota(exprs[pick(7)], {6}, DType::I32).reshape({1, 6}).broadcast_to({4, 6});
        case 2:
          return cx.iota(exprs[pick(7)], {6, 4}, DType::I32).transpose(0, 1);
        case 3:
          return cx.iota(exprs[pick(7)], {4, 3}, DType::Bool).pad(1, 2, 1);
        default: {
          const double values[] = {0.0, 1.0, -kInf, kInf, 2.0, 2.5};
          const double c = values[pick(6)];
          return cx.constant(c).broadcast_to({4, 6});
        }
      }
    };
    std::vector<Tensor> pool = {leaf(), leaf(), leaf()};
    for (int step = 0; step < 6; ++step) {
      const Tensor a = pool[static_cast<size_t>(pick(static_cast<int>(pool.size())))];
      const Tensor b = pool[static_cast<size_t>(pick(static_cast<int>(pool.size())))];
      auto as_int = [](const Tensor& x) { return is_float(x.dtype()) ? x : x.cast(DType::I32); };
      // (A float cast to an integer type is not followed: -inf has no integer.)
      const bool float_to_int = is_float(b.dtype()) && !is_float(a.dtype());
      switch (pick(10)) {
        case 0:
          if (float_to_int) continue;
          pool.push_back(lt(a, b.cast(a.dtype())));
          break;
        case 1:
          if (float_to_int) continue;
          pool.push_back(eq(a, b.cast(a.dtype())));
          break;
        case 2:
          pool.push_back(logical_and(a, b));
          break;
        case 3:
          pool.push_back(a.logical_not());
          break;
        case 4:
          if (is_float(a.dtype()) || is_float(b.dtype())) continue;
          pool.push_back(as_int(a) + as_int(b) * 3);
          break;
        case 5:
          if (is_float(pool[0].dtype()) != is_float(b.dtype())) continue;
          pool.push_back(where(a, b, pool[0].cast(b.dtype())));
          break;
        case 6: {
          const double values[] = {0.0, -kInf};
          pool.push_back(where(a, cx.constant(values[pick(2)]).broadcast_to({4, 6}),
                               cx.constant(values[pick(2)]).broadcast_to({4, 6})));
          break;
        }
        case 7:
          pool.push_back(a.cast(a.dtype() == DType::Bool ? DType::F32 : DType::Bool));
          break;
        case 8:  // read as 0 past column 4
          pool.push_back(a.slice(1, 0, 4).pad(1, 0, 2));
          break;
        default:  // a count along an axis, compared with a constant
          may_stay = true;
          pool.push_back(gt(ne(a, 0.0).cast(DType::F32).sum({pick(2)}, true), pick(2) ? 0.0 : 1.0)
                             .broadcast_to({4, 6}));
      }
    }
    Tensor y = pool.back().cast(DType::F32).retrieve();
    const compiler::Optimized opt = compiler::optimize(cx);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << "\n" << opt.graph->to_text());
    expect_reference_values(cx, opt, y);
    if (may_stay) continue;
    // Folded whole: one Iota, or a choice between two float constants by one.
    ++foldable;
    const Node& out = opt.graph->node(opt.outputs[0].second);
    bool sources = out.op == Op::Where;
    for (const Edge& e : out.inputs)
      sources = sources && traits(opt.graph->node(e.source).op).category == OpCategory::Source;
    folded += out.op == Op::Iota || out.op == Op::Constant || sources;
  }
  // (Some mixes are not followed: a choice between float constants against an integer
  // that is not one, integers an iota rounds to floats.)
  EXPECT_GE(folded * 10, foldable * 9) << folded << " of " << foldable;
  EXPECT_GT(foldable, 40);
}

// A decoding step's causal mask keeps every cached key (past + 1 keys, one query): the
// Where it was read through goes, and the attention without a mask is still one
// Attention, whose mask keeps every key.
TEST(IndexFolding, ADecodingStepsMaskThatKeepsEveryKeyStillMakesAnAttention) {
  const int64_t h = 2, past = 9, d = 8;
  Graph cx;
  std::mt19937 rng(13);
  auto input = [&](const char* name, int64_t rows) {
    return random_input(cx, rng, name, {1, h, rows, d});
  };
  const Tensor q = input("q", 1), k = input("k", past + 1), v = input("v", past + 1);
  const Tensor scores = q.matmul(k.transpose(-1, -2)) * 0.35;
  const Tensor keep = nn::causal_mask(cx, 1, past).reshape({1, 1, 1, past + 1});
  Tensor y =
      where(keep.broadcast_to(scores.shape()), scores, -kInf).softmax(-1).matmul(v).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  const Node* attention = attention_node(*opt.graph);
  ASSERT_NE(attention, nullptr) << opt.graph->to_text();
  const std::optional<Expr> mask = compiler::computed_mask(*opt.graph, *attention);
  ASSERT_TRUE(mask.has_value()) << opt.graph->to_text();
  EXPECT_EQ(*mask, Expr(1));
  expect_reference_values(cx, opt, y);
}

// Attention over a whole sequence without a mask (an encoder's) is one Attention too.
TEST(IndexFolding, AttentionWithoutAMaskIsOneAttention) {
  const int64_t h = 3, t = 10, d = 8;
  Graph cx;
  std::mt19937 rng(17);
  auto input = [&](const char* name) { return random_input(cx, rng, name, {2, h, t, d}); };
  const Tensor q = input("q"), k = input("k"), v = input("v");
  Tensor y = (q.matmul(k.transpose(-1, -2)) * 0.35).softmax(-1).matmul(v).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  ASSERT_NE(attention_node(*opt.graph), nullptr) << opt.graph->to_text();
  expect_reference_values(cx, opt, y);
}
