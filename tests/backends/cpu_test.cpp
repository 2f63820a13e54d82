// The compiled CPU backend against the reference interpreter: random graphs of
// primitive ops over random views, errors, the kernel cache and dynamic dims.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "backends/cpu/codegen.hpp"
#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/matmul_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "luminal/compiler/plan.hpp"
#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "luminal/train/autograd.hpp"
#include "testing/attention_cases.hpp"
#include "testing/expect_error.hpp"
#include "testing/matmul_layouts.hpp"
#include "testing/random_graph.hpp"
#include "testing/row_ops.hpp"
#include "testing/run_outputs.hpp"
#include "testing/scoped_env.hpp"
#include "testing/top_k_cases.hpp"

namespace luminal {
namespace {

namespace fs = std::filesystem;

// f32 products of a few tens of rows: the few-rows kernel and BLAS are both timed, the
// output (whichever won) matches the reference, and a second compile takes the winner
// from the cache. Small products and one-row products are not searched.
TEST(Cpu, ProductsOfAFewTensOfRowsSearchTheKernel) {
  const testing::ScopedCacheDir cache("cpu-search");
  const testing::ScopedEnv log("LUMINAL_LOG", "info");
  const testing::ScopedEnv mode("LUMINAL_SEARCH", "fast");
  std::mt19937 rng(5);
  const std::vector<float> av = testing::uniform_floats(rng, 24 * 1024);
  const std::vector<float> wv = testing::uniform_floats(rng, 512 * 1024);
  const std::vector<float> sv = testing::uniform_floats(rng, 24 * 64);
  for (const std::string pass : {"searched", "cached"}) {
    Graph cx;
    Tensor a = cx.named_tensor("a", {24, 1024});
    Tensor w = cx.named_tensor("w", {512, 1024});
    Tensor small = cx.named_tensor("small", {24, 64});
    a.set(av);
    w.set(wv);
    small.set(sv);
    const Tensor y = a.matmul(w.permute({1, 0})).retrieve();          // 12.6M multiply-adds
    const Tensor z = small.matmul(small.permute({1, 0})).retrieve();  // 37k: not searched
    const auto want = testing::run_outputs(cx, reference(), {y, z});
    ::testing::internal::CaptureStderr();
    const auto got = testing::run_outputs(cx, cpu(), {y, z});
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("luminal: search matmul f32 m=24 k=1024 n=512"), std::string::npos)
        << pass << ":\n"
        << err;
    EXPECT_NE(err.find(pass == "searched" ? "the cost model's pick" : "(cached)"),
              std::string::npos)
        << pass << ":\n"
        << err;
    EXPECT_EQ(err.find("m=24 k=64"), std::string::npos) << err;
    EXPECT_EQ(err.find("is wrong"), std::string::npos) << err;
    for (size_t o = 0; o < 2; ++o)
      for (size_t i = 0; i < got[o].size(); ++i)
        ASSERT_NEAR(got[o][i], want[o][i], 1e-4 * (1 + std::fabs(want[o][i])))
            << pass << " output " << o;
  }
}

// A host backend runs a queued run (Graph::execute_queued) to the end, as execute does:
// its outputs are on the host when it returns, even those marked to stay on a device.
TEST(Cpu, QueuedRunsRunToTheEnd) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {3});
  Tensor y = (x * 2.0).keep_on_device();
  cx.compile(cpu());
  x.set(std::vector<float>{1, 2, 3});
  cx.execute_queued();
  EXPECT_EQ(y.device_data(), nullptr);
  EXPECT_EQ(y.to_f32(), (std::vector<float>{2, 4, 6}));
  cx.wait();
}

// top_k on the host backends against a full stable sort, in each float type, with ties,
// NaN, infinities and signed zeros; out-of-range k and integer values are errors.
TEST(Cpu, TopKIsTheFirstKOfAStableSort) {
  auto check = [](const Backend& backend) {
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      for (int64_t k : {1, 40, 517}) {
        Graph cx;
        Tensor x = cx.named_tensor("x", {3, 517}, t);
        Tensor ids = top_k(x, k).retrieve();
        cx.compile(backend);
        const std::vector<float> rows = testing::top_k_rows(3, 517, static_cast<uint64_t>(k));
        x.set_buffer(Buffer::from_doubles(std::vector<double>(rows.begin(), rows.end()), t));
        cx.execute();
        const std::span<const int32_t> got = cx.data(ids.id())->span<int32_t>();
        EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()),
                  testing::top_k_by_sort(rows, 517, static_cast<size_t>(k)))
            << backend.name() << " " << dtype_name(t) << " k=" << k;
      }
  };
  check(reference());
  check(cpu());
  Graph cx;
  Tensor x = cx.named_tensor("x", {2, 8});
  testing::expect_error([&] { top_k(x, 0); }, {"top_k: k = 0 of [2, 8]"});
  testing::expect_error([&] { top_k(x, 9); }, {"top_k: k = 9 of [2, 8]"});
  testing::expect_error([&] { top_k(cx.named_tensor("i", {8}, DType::I32), 1); },
                        {"top_k: i32 values"});
}

TEST(Cpu, MatMulsMatchTheReference) {
  testing::expect_matmuls_match_reference(cpu());
}

TEST(Cpu, OneRowProductsMatchTheReference) {
  testing::expect_one_row_products_match_reference(cpu());
}

TEST(Cpu, HalfWeightProductsMatchTheReference) {
  testing::expect_half_weight_products_match_reference(cpu());
}

TEST(Cpu, F32ByF16ProductsMatchTheReference) {
  testing::expect_f32_by_f16_products_match_reference(cpu());
}

TEST(Cpu, RowOpsMatchTheReference) {
  testing::expect_row_ops_match_reference(cpu());
  testing::expect_few_long_rows_match_reference(cpu());
}

TEST(Cpu, RandomGraphsMatchTheReference) {
  testing::expect_random_graphs_match_reference(cpu());
}

TEST(Cpu, LargeKernelsSplitAcrossThreadsMatchTheReference) {
  // Past 16384 elements a kernel's rows (or a single row's columns, or a reduction's
  // outputs) are shared among the threads; below, one thread runs it.
  Graph cx;
  Tensor row = cx.named_tensor("row", {1, 40000});
  Tensor rows = cx.named_tensor("rows", {5, 9000});
  Tensor tall = cx.named_tensor("tall", {20000, 8});
  std::mt19937 rng(3);
  auto fill = [&](Tensor& t, size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
    t.set(v);
  };
  fill(row, 40000);
  fill(rows, 45000);
  fill(tall, 160000);
  const std::vector<Tensor> outs{(row * row + row.exp2()).retrieve(),
                                 (rows.sin() * 0.5 + rows).retrieve(),
                                 tall.sum_reduce(1).retrieve(), tall.max_reduce(1).retrieve()};
  cx.compile(reference());
  cx.execute();
  std::vector<std::vector<float>> want;
  for (const Tensor& t : outs) want.push_back(t.to_f32());
  cx.compile(cpu());
  cx.execute();
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::vector<float> got = outs[i].to_f32();
    ASSERT_EQ(got.size(), want[i].size());
    for (size_t k = 0; k < got.size(); ++k)
      ASSERT_NEAR(got[k], want[i][k], 1e-5 * (1 + std::fabs(want[i][k])))
          << "output " << i << " element " << k;
  }
}

TEST(Cpu, FusionLeavesOneKernelPerMaterialisedValue) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {64});
  Tensor y = x;
  for (int i = 0; i < 8; ++i) y = (y * 1.5 + 0.25).sin();
  y.retrieve();
  const auto fused = compiler::plan_kernels(cx);
  const auto unfused = compiler::plan_kernels(cx, compiler::Fusion::Off);
  EXPECT_EQ(fused.kernels.size(), 1u);
  EXPECT_GT(unfused.kernels.size(), 20u);
  // A value read by two kernels is stored once ...
  Tensor s = x.exp2();
  (s + 1.0).retrieve();
  s.sin().retrieve();
  EXPECT_EQ(compiler::plan_kernels(cx).kernels.size(), 4u);
  // ... unless it is cheap enough to compute again in each reader; a chain too long to
  // repeat is still stored once.
  EXPECT_EQ(compiler::plan_kernels(cx, compiler::Fusion::RecomputeShared).kernels.size(), 3u);
  Tensor long_chain = x;
  for (int i = 0; i < 8; ++i) long_chain = long_chain.sin();
  (long_chain * 2.0).retrieve();
  long_chain.exp2().retrieve();
  EXPECT_EQ(compiler::plan_kernels(cx, compiler::Fusion::RecomputeShared).kernels.size(), 6u);
}

// Under RecomputeShared a value read by several kernels is computed again by each where
// that costs less than storing it, weighing the bytes its readers stream and the ops they
// repeat against its own bytes written and read back. A language model's loss over bf16
// logits: the log-softmax's exponentials (f32, streaming the logits' two bytes) and the
// gather's one-hot gradient (an iota compared with the targets, streaming nothing) are
// each read twice but not stored; over the vocabulary the plan stores only the logits and
// their gradient, which the products read. (Eight sines read twice, which cost more
// computed twice than stored, are stored: FusionLeavesOneKernelPerMaterialisedValue.)
TEST(Cpu, ALossOverTheVocabularyStoresOnlyTheLogitsAndTheirGradient) {
  const int64_t rows = 16, dim = 32, vocab = 1000;
  Graph cx;
  Tensor h = cx.named_tensor("h", {rows, dim}, DType::BF16);
  Tensor w = cx.named_tensor("w", {dim, vocab}, DType::BF16);
  Tensor targets = cx.named_tensor("targets", {rows}, DType::I32);
  Tensor loss = -h.matmul(w)
                     .cast(DType::F32)
                     .log_softmax(-1)
                     .gather_axis(1, targets.unsqueeze(1))
                     .mean({0, 1});
  loss.retrieve();
  for (Tensor& g : train::gradients(loss, {w})) g.retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  auto over_vocabulary = [&](compiler::Fusion fusion) {
    size_t n = 0;
    for (const compiler::Kernel& k : compiler::plan_kernels(*opt.graph, fusion).kernels) {
      const Node& root = opt.graph->node(k.root);
      n += !root.shape.empty() && root.shape.back() == Expr(vocab);
    }
    return n;
  };
  EXPECT_EQ(over_vocabulary(compiler::Fusion::RecomputeShared), 2u);
  EXPECT_GT(over_vocabulary(compiler::Fusion::StoreShared), 2u);  // (the CPU's plan)
}

size_t count_ops(const Graph& g, Op op) {
  size_t n = 0;
  for (uint32_t i = 0; i < g.num_nodes(); ++i) n += g.node(NodeId{i}).op == op;
  return n;
}

// Runs the graph on the reference interpreter, then compiled for the CPU, and compares y.
void expect_cpu_matches_reference(Graph& cx, const Tensor& y, const std::string& what) {
  cx.compile(reference());
  cx.execute();
  const auto want = y.to_f32();
  cx.compile(cpu());
  cx.execute();
  const auto got = y.to_f32();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << what << " element " << i;
}

// On the CPU a costly value that a single reader reads broadcast is stored once rather
// than fused into that reader, which would compute it again for every element the
// broadcast repeats it into (a convolution's input gradient read by max pooling's
// gradient, four times); a cheap one is fused, and the values hold either way. (The GPU's
// plan leaves it fused: storing would split its row groups.)
TEST(Cpu, ACostlyValueReadBroadcastIsStoredOnce) {
  for (const int sines : {1, 3}) {
    Graph cx;
    Tensor x = cx.named_tensor("x", {64});
    std::mt19937 rng(4);
    x.set(testing::uniform_floats(rng, 64));
    Tensor v = x;
    for (int i = 0; i < sines; ++i) v = v.sin();
    Tensor y = (v.expand(1, 8) * 2.0).retrieve();
    EXPECT_EQ(compiler::plan_kernels(cx).kernels.size(), sines == 1 ? 1u : 2u) << sines;
    EXPECT_EQ(compiler::plan_kernels(cx, compiler::Fusion::RecomputeShared).kernels.size(), 1u);
    expect_cpu_matches_reference(cx, y, std::to_string(sines) + " sines");
  }
}

// Occurrences of `what` in the CPU source of cx's kernels.
size_t count_in_source(const Graph& cx, const compiler::KernelPlan& plan, const std::string& what) {
  const std::string code = cpugen::generate_source(cx, plan).code;
  size_t n = 0;
  for (size_t at = code.find(what); at != std::string::npos; at = code.find(what, at + 1)) ++n;
  return n;
}

TEST(Cpu, AValueReadTwiceInOneKernelIsComputedThereOnce) {
  for (const compiler::Fusion fusion :
       {compiler::Fusion::StoreShared, compiler::Fusion::RecomputeShared}) {
    // A long chain read by two nodes of the kernel, each at the kernel's element.
    Graph chained;
    Tensor c = chained.named_tensor("x", {64});
    for (int i = 0; i < 8; ++i) c = c.sin();
    (c + c.exp2()).retrieve();
    EXPECT_EQ(compiler::plan_kernels(chained, fusion).kernels.size(), 1u);
    // Read at another element as well (transposed), it is stored.
    Graph transposed;
    Tensor t = transposed.named_tensor("x", {8, 8});
    for (int i = 0; i < 8; ++i) t = t.sin();
    (t + t.transpose(0, 1)).retrieve();
    EXPECT_EQ(compiler::plan_kernels(transposed, fusion).kernels.size(), 2u);
  }
  // GELU's erf reads |x| three times and 1 / (1 + p|x|) five: one kernel, whose code
  // divides once per element, as a lone reciprocal's does.
  Graph cx;
  Tensor x = cx.named_tensor("x", {4096});
  std::vector<float> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = -6.0f + 12.0f * float(i) / 4096.0f;
  x.set(values);
  Tensor y = x.gelu();
  y.retrieve();
  const compiler::KernelPlan plan = compiler::plan_kernels(cx);
  EXPECT_EQ(plan.kernels.size(), 1u);
  Graph one;
  (one.named_tensor("x", {4096}) * 0.5 + 1.0).recip().retrieve();
  EXPECT_EQ(count_in_source(cx, plan, "(float)1 / "),
            count_in_source(one, compiler::plan_kernels(one), "(float)1 / "));
  expect_cpu_matches_reference(cx, y, "gelu");
}

// n values drawn uniformly from [-bound, bound].
std::vector<double> uniform_values(std::mt19937& rng, size_t n, double bound) {
  std::vector<double> v(n);
  std::generate(v.begin(), v.end(),
                [&] { return std::uniform_real_distribution(-bound, bound)(rng); });
  return v;
}

TEST(Cpu, RepeatedKernelsAreCompiledOnce) {
  // Four "layers" of the same ops, each on its own weights: every kernel of layers 2-4
  // repeats one of layer 1 and is an alias of its code, and the results still match.
  Graph cx;
  std::mt19937 rng(5);
  auto random = [&](size_t n) { return uniform_values(rng, n, 1.0); };
  Tensor h = cx.named_tensor("x", {4, 16});
  h.set(random(64));
  for (int layer = 0; layer < 4; ++layer) {
    Tensor w = cx.named_tensor("w", {16});
    w.set(random(16));
    const Tensor scaled = h * w.expand(0, 4);
    h = scaled / (scaled * scaled).sum({1}).sqrt().expand(1, 16) + h;
  }
  h.retrieve();
  const compiler::KernelPlan plan = compiler::plan_kernels(cx);
  const size_t aliases = count_in_source(cx, plan, "alias(\"lum_kernel_");
  ASSERT_EQ(plan.kernels.size() % 4, 0u);
  EXPECT_EQ(aliases, plan.kernels.size() / 4 * 3);
  expect_cpu_matches_reference(cx, h, "four repeated layers");
}

TEST(Optimize, RulesSelectGemmAndSimplify) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {"b", 8, 16}), w = cx.named_tensor("w", {16, 4});
  Tensor y = (a.matmul(w) * 1.0 + 0.0).exp2().log2().recip().recip();
  y.retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  EXPECT_EQ(count_ops(*opt.graph, Op::Custom), 1u) << opt.graph->to_text();
  EXPECT_TRUE(
      dynamic_cast<const compiler::MatMulOp*>(opt.graph->node(opt.outputs[0].second).custom.get()))
      << "x*1, x+0, log2(exp2 x) and 1/(1/x) should all vanish:\n"
      << opt.graph->to_text();
  EXPECT_EQ(count_ops(*opt.graph, Op::SumReduce), 0u);
  // The program still computes the same values (on the reference interpreter too).
  cx.set_dim("b", 3);
  std::vector<float> av(3 * 8 * 16), wv(16 * 4);
  for (size_t i = 0; i < av.size(); ++i) av[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(static_cast<float>(i));
  a.set(av);
  w.set(wv);
  expect_cpu_matches_reference(cx, y, "x W");
}

// An output that is contiguous() of a reshape of a value laid out as the reshape reads it
// (torch's [B*T, N] product viewed back as [B, T, N]) is that value: no copy is planned,
// and the output's elements are the product's, in order.
TEST(Optimize, AContiguousOutputOfAReshapedValueIsThatValue) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {6, 8}), w = cx.named_tensor("w", {8, 10});
  Tensor y = a.matmul(w).reshape({2, 3, 10}).contiguous().retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  EXPECT_EQ(count_ops(*opt.graph, Op::Contiguous), 0u) << opt.graph->to_text();
  EXPECT_EQ(compiler::plan_kernels(*opt.graph).kernels.size(), 1u);
  std::vector<float> av(6 * 8), wv(8 * 10);
  for (size_t i = 0; i < av.size(); ++i) av[i] = std::sin(static_cast<float>(i));
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(static_cast<float>(i));
  a.set(av);
  w.set(wv);
  expect_cpu_matches_reference(cx, y, "contiguous reshape of a product");
}

// State grown every run, as a KV cache: the output replaces the input after each run.
// Donated, the input's buffer grows in place (its address changes only when the
// geometric growth reallocates); not donated, the input is left as it was. Both give
// the concatenation, checked against a plain vector, and so does the reference backend.
TEST(Cpu, AppendRowsGrowsADonatedInputInPlace) {
  for (const bool donate : {true, false}) {
    for (const bool on_cpu : {true, false}) {
      Graph cx;
      Tensor state = cx.named_tensor("state", {"past", 3});
      Tensor fresh = cx.named_tensor("fresh", {3, "n"});  // appended through a transpose
      Tensor grown = append_rows(state, fresh.transpose(0, 1) * 2.0).retrieve();
      Tensor total = grown.sum({0}).retrieve();  // another reader of the grown state
      if (donate) cx.donate(state.id());
      if (on_cpu) {
        cx.compile(cpu());
      } else {
        cx.compile(reference());
      }
      std::vector<float> want;
      state.set(want);
      size_t moves = 0;
      const void* last = nullptr;
      for (int step = 0; step < 60; ++step) {
        const int64_t n = 1 + step % 3;
        std::vector<float> rows(static_cast<size_t>(3 * n));
        for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(step * 10 + i);
        cx.set_dim("past", static_cast<int64_t>(want.size() / 3));
        cx.set_dim("n", n);
        fresh.set(rows);
        cx.execute();
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < 3; ++c)
            want.push_back(2.0f * rows[static_cast<size_t>(c * n + r)]);
        ASSERT_EQ(grown.to_f32(), want) << "step " << step;
        float column0 = 0;
        for (size_t i = 0; i < want.size(); i += 3) column0 += want[i];
        ASSERT_FLOAT_EQ(total.to_f32()[0], column0) << "step " << step;
        if (!donate) {
          const Buffer* kept = cx.data(state.id());
          ASSERT_TRUE(kept) << "an input that is not donated keeps its data";
          ASSERT_EQ(kept->numel(), want.size() - rows.size());
        }
        Buffer next = *cx.take_data(grown.id());
        moves += next.data() != last;
        last = next.data();
        state.set_buffer(std::move(next));
      }
      if (donate && on_cpu) {
        EXPECT_LT(moves, 20u) << "the donated state was copied most steps";
      }
      if (!donate) {
        EXPECT_GT(moves, 50u);
      }
    }
  }
}

TEST(Cpu, BroadcastBatchMatmulsMatchTheReference) {
  // B shared across trailing batch dims (grouped-query attention) folds those dims into
  // A's rows; a transposed A or a B that varies must not.
  struct Case {
    std::vector<Expr> a, b;
    bool transpose_a;
  };
  const std::vector<Case> cases = {{{2, 3, 1, 5}, {2, 1, 5, 7}, false},
                                   {{1, 4, 3, 8}, {1, 1, 8, 6}, false},
                                   {{2, 3, 4, 5}, {1, 3, 5, 6}, false},
                                   {{2, 3, 5, 4}, {2, 1, 5, 6}, true}};
  for (const Case& c : cases) {
    Graph cx;
    Tensor a = cx.named_tensor("a", c.a), b = cx.named_tensor("b", c.b);
    const Tensor lhs = c.transpose_a ? a.transpose(-1, -2) : a;
    Tensor y = lhs.matmul(b.broadcast_to({c.a[0], c.a[1], c.b[2], c.b[3]}));
    y.retrieve();
    std::vector<float> av(static_cast<size_t>(product(c.a).eval())),
        bv(static_cast<size_t>(product(c.b).eval()));
    for (size_t i = 0; i < av.size(); ++i) av[i] = std::sin(0.7f * static_cast<float>(i));
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(0.3f * static_cast<float>(i));
    a.set(av);
    b.set(bv);
    expect_cpu_matches_reference(cx, y, "case " + to_string(c.a));
  }
}

// A half-precision KV cache: keys read transposed (B's columns along K) and values read
// as they lie (B's rows along N), shared by a group of query rows, for a decoding step's
// few rows and a prompt's many. The compiled MatMul must read the f16 input itself (no
// widened copy) and agree with the reference interpreter's unfused graph.
TEST(Cpu, MatmulsReadHalfPrecisionRightOperandsDirectly) {
  struct Case {
    int64_t group, rows, k, n;
    bool transposed;
  };
  for (const Case& c : std::vector<Case>{{4, 1, 256, 70, true},
                                         {4, 1, 70, 256, false},
                                         {1, 3, 40, 9, true},
                                         {2, 1, 33, 5, false},
                                         {4, 2, 37, 11, true},
                                         {2, 3, 37, 64, false},
                                         {4, 12, 64, 20, true},
                                         {4, 12, 20, 64, false}}) {
    const std::string what = "group " + std::to_string(c.group) + " rows " +
                             std::to_string(c.rows) + " k " + std::to_string(c.k) + " n " +
                             std::to_string(c.n) + (c.transposed ? " transposed" : "");
    Graph cx;
    Tensor a = cx.named_tensor("a", {1, c.group, c.rows, c.k});
    Tensor b = c.transposed ? cx.named_tensor("b", {c.n, c.k}, DType::F16)
                            : cx.named_tensor("b", {c.k, c.n}, DType::F16);
    Tensor wide = b.cast(DType::F32);
    if (c.transposed) wide = wide.transpose(0, 1);
    Tensor y = a.matmul(wide.unsqueeze(0).unsqueeze(0)).retrieve();
    std::vector<float> av(static_cast<size_t>(c.group * c.rows * c.k));
    std::vector<double> bv(static_cast<size_t>(c.k * c.n));
    for (size_t i = 0; i < av.size(); ++i) av[i] = std::sin(0.7f * static_cast<float>(i));
    for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::cos(0.3 * static_cast<double>(i));
    a.set(av);
    b.set_buffer(Buffer::from_doubles(bv, DType::F16));
    const compiler::Optimized opt = compiler::optimize(cx);
    EXPECT_EQ(count_ops(*opt.graph, Op::Cast), 0u) << what << "\n" << opt.graph->to_text();
    const Node& mm = opt.graph->node(opt.outputs[0].second);
    ASSERT_TRUE(dynamic_cast<const compiler::MatMulOp*>(mm.custom.get())) << what << "\n"
                                                                          << opt.graph->to_text();
    EXPECT_EQ(opt.graph->node(mm.inputs[1].source).dtype, DType::F16) << what;
    expect_cpu_matches_reference(cx, y, what);
  }
}

TEST(Cpu, CastsToHalfPrecisionRoundOnceAtTheStore) {
  // A kernel whose result is a cast to f16 or bf16 leaves the rounding to its store (the
  // key and value cache writes of a decode step): ties to even, overflow, NaN, subnormals
  // and negative zero must come out as a single rounding of the f32 value does.
  const std::vector<float> xs{1.9f,           -1.9f,     std::nanf(""), 3e10f, 65519.99f,
                              1.00048828125f, 2049.0f,   3e-6f,         -0.0f, -7e-8f,
                              1.0f / 3,       -65536.0f, 1.00390625f,   1e-40f};
  const auto n = static_cast<int64_t>(xs.size());
  Graph cx;
  Tensor x = cx.named_tensor("x", {n});
  x.set(xs);
  Tensor h = x.cast(DType::F16).retrieve();
  Tensor b = x.cast(DType::BF16).retrieve();
  Tensor h3 = (x * 3.0).cast(DType::F16).retrieve();  // the cast fused after arithmetic
  cx.compile(cpu());
  cx.execute();
  const Buffer hb = h.data(), bb = b.data(), h3b = h3.data();
  for (size_t k = 0; k < xs.size(); ++k) {
    EXPECT_EQ(hb.span<f16>()[k].bits, f16_bits_from_double(xs[k])) << xs[k];
    EXPECT_EQ(bb.span<bf16>()[k].bits, bf16_bits_from_double(xs[k])) << xs[k];
    EXPECT_EQ(h3b.span<f16>()[k].bits, f16_bits_from_double(xs[k] * 3.0f)) << xs[k];
  }
}

TEST(Cpu, KernelResultsRoundOrWrapOnceAtTheStore) {
  // A kernel's result is rounded or wrapped to its dtype by its store alone: f16 and bf16
  // arithmetic comes out as one rounding of the exact value, integer arithmetic wrapped.
  const std::vector<double> av{1.5, -3.25, 1000.5, 0.0999755859375, 65504, -0.0009765625},
      bv{1.0009765625, 7.75, 65.5, -3.0, 2, 0.5};
  const std::vector<int32_t> iv{2000000000, -7, 65536, 123456789, -2147483647, 3},
      jv{3, 5, 65536, 100, 2, -1};
  const auto n = static_cast<int64_t>(av.size());
  Graph cx;
  Tensor a = cx.named_tensor("a", {n}, DType::F16), b = cx.named_tensor("b", {n}, DType::F16);
  Tensor c = cx.named_tensor("c", {n}, DType::BF16), d = cx.named_tensor("d", {n}, DType::BF16);
  Tensor i = cx.named_tensor("i", {n}, DType::I32), j = cx.named_tensor("j", {n}, DType::I32);
  a.set_buffer(Buffer::from_doubles(av, DType::F16));
  b.set_buffer(Buffer::from_doubles(bv, DType::F16));
  c.set_buffer(Buffer::from_doubles(av, DType::BF16));
  d.set_buffer(Buffer::from_doubles(bv, DType::BF16));
  i.set(iv);
  j.set(jv);
  Tensor product = (a * b).retrieve(), sum = (c + d).retrieve(), wrapped = (i * j).retrieve();
  cx.compile(cpu());
  cx.execute();
  const Buffer ab = a.data(), bb = b.data(), cb = c.data(), db = d.data();
  const Buffer pb = product.data(), sb = sum.data();
  const std::vector<int64_t> w = wrapped.to_i64();
  for (size_t k = 0; k < av.size(); ++k) {
    EXPECT_EQ(pb.span<f16>()[k].bits, f16_bits_from_double(ab.get_f64(k) * bb.get_f64(k))) << k;
    EXPECT_EQ(sb.span<bf16>()[k].bits, bf16_bits_from_double(cb.get_f64(k) + db.get_f64(k))) << k;
    const auto expected = static_cast<int32_t>(
        static_cast<uint32_t>(static_cast<int64_t>(iv[k]) * static_cast<int64_t>(jv[k])));
    EXPECT_EQ(w[k], expected) << k;
  }
}

TEST(Optimize, AttentionIsOneKernel) {
  // Checked with the AVX2 kernels and the portable ones.
  for (const char* simd : {"", "off"}) {
    if (*simd)
      setenv("LUMINAL_CPU_SIMD", simd, 1);
    else
      unsetenv("LUMINAL_CPU_SIMD");
    testing::expect_attention_matches_reference(cpu(), *simd ? "portable" : "simd");
  }
  unsetenv("LUMINAL_CPU_SIMD");
}

// A prompt's positions of one head share keys and values but not mask rows: they are
// scored together, each row over the keys its own row keeps; a row that keeps none comes
// out NaN, as the softmax of nothing does on the reference interpreter. Long enough that
// the keys are split between threads, with AVX2 and without.
TEST(Cpu, AttentionRowsOfOneHeadKeepTheirOwnKeys) {
  std::mt19937 rng(3);
  const int64_t d = 16;
  // Two groups of rows; one group whose keys are split between threads.
  for (const auto& [rows, keys] : std::vector<std::pair<int64_t, int64_t>>{{7, 300}, {3, 1200}})
    for (const char* simd : {"", "off"}) {
      std::vector<double> keep(static_cast<size_t>(rows * keys));
      std::bernoulli_distribution kept(0.6);
      for (size_t i = 0; i < keep.size(); ++i)
        keep[i] = static_cast<int64_t>(i) / keys != 1 && kept(rng);  // row 1 keeps none
      const testing::ScopedEnv mode("LUMINAL_CPU_SIMD", *simd ? simd : nullptr);
      Graph cx;
      Tensor q = cx.named_tensor("q", {1, rows, d}), k = cx.named_tensor("k", {1, keys, d});
      Tensor v = cx.named_tensor("v", {1, keys, d});
      Tensor mask = cx.named_tensor("mask", {rows, keys}, DType::Bool);
      q.set(testing::uniform_floats(rng, static_cast<size_t>(rows * d)));
      k.set(testing::uniform_floats(rng, static_cast<size_t>(keys * d)));
      v.set(testing::uniform_floats(rng, static_cast<size_t>(keys * d)));
      mask.set_buffer(Buffer::from_doubles(keep, DType::Bool));
      // (The kernel takes a mask read through a view, as a model's broadcast masks are.)
      const Tensor scores =
          where(mask.unsqueeze(0), q.matmul(k.transpose(-1, -2)) * 0.25, -INFINITY);
      const Tensor out = scores.softmax(-1).matmul(v).retrieve();
      const compiler::Optimized opt = compiler::optimize(cx);
      ASSERT_TRUE(dynamic_cast<const compiler::AttentionOp*>(
          opt.graph->node(opt.outputs[0].second).custom.get()));
      const auto want = testing::run_outputs(cx, reference(), {out});
      const auto got = testing::run_outputs(cx, cpu(), {out});
      for (size_t i = 0; i < want[0].size(); ++i) {
        if (static_cast<int64_t>(i) / d == 1) {
          EXPECT_TRUE(std::isnan(want[0][i]) && std::isnan(got[0][i])) << i;
          continue;
        }
        ASSERT_NEAR(got[0][i], want[0][i], 1e-5)
            << rows << " rows, row " << static_cast<int64_t>(i) / d << (*simd ? ", portable" : "");
      }
    }
}

TEST(Optimize, SoftmaxWithoutMaskedScoresStaysUnfused) {
  // No mask, or a softmax not along the last axis: not the attention the kernel computes.
  Graph cx;
  Tensor q = cx.named_tensor("q", {2, 3, 8}), k = cx.named_tensor("k", {2, 5, 8}),
         v = cx.named_tensor("v", {2, 5, 4});
  const Tensor scores = q.matmul(k.transpose(-1, -2));
  scores.softmax(-1).matmul(v).retrieve();
  scores.softmax(1).transpose(-1, -2).matmul(q).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  for (uint32_t i = 0; i < opt.graph->num_nodes(); ++i)
    EXPECT_FALSE(
        dynamic_cast<const compiler::AttentionOp*>(opt.graph->node(NodeId{i}).custom.get()))
        << opt.graph->to_text();
  EXPECT_EQ(count_ops(*opt.graph, Op::MaxReduce), 2u);
}

TEST(Optimize, DeepResidualNetworksKeepEveryGemm) {
  // Each layer reuses the residual stream several times, so summed tree costs grow
  // exponentially with depth; kernel selection must still see every GEMM.
  Graph cx;
  Tensor h = cx.named_tensor("x", {"seq", 16});
  const int layers = 48;
  for (int l = 0; l < layers; ++l) {
    Tensor w = cx.named_tensor("w" + std::to_string(l), {16, 16});
    h = h + h.rms_norm({-1}, 1e-6).matmul(w.transpose(0, 1)) * h.sigmoid();
  }
  h.retrieve();
  EXPECT_EQ(count_ops(*compiler::optimize(cx).graph, Op::Custom), static_cast<size_t>(layers));
}

TEST(Optimize, IntegerProductsStayReductions) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {4, 6}, DType::I32), b = cx.named_tensor("b", {6, 3}, DType::I32);
  a.matmul(b).retrieve();
  EXPECT_EQ(count_ops(*compiler::optimize(cx).graph, Op::Custom), 0u);
}

TEST(Optimize, ProductsOverPaddedOrFlippedOperandsRunOverCopies) {
  // BLAS reads neither zero padding nor negative strides: such an operand is copied
  // row-major and the product runs as a GEMM over the copy. A padded value read by two
  // products either way round (a logits gradient padded to an aligned vocabulary, read
  // by the weight's and the input's gradient products) is copied once.
  std::mt19937 rng(11);
  const std::vector<float> gv = testing::uniform_floats(rng, 5 * 7);
  const std::vector<float> xv = testing::uniform_floats(rng, 5 * 3);
  const std::vector<float> wv = testing::uniform_floats(rng, 8 * 3);
  const std::vector<float> pv = testing::uniform_floats(rng, 6 * 9);  // [4, 6] x [6, 3]
  Graph cx;
  Tensor g = cx.named_tensor("g", {5, 7}), x = cx.named_tensor("x", {5, 3});
  Tensor w = cx.named_tensor("w", {8, 3}), p = cx.named_tensor("p", {6, 9});
  g.set(gv);
  x.set(xv);
  w.set(wv);
  p.set(pv);
  const Tensor padded = (g * 2.0f).pad(1, 0, 1);                  // [5, 8]
  const Tensor dw = padded.transpose(0, 1).matmul(x).retrieve();  // [8, 3]
  const Tensor dx = padded.matmul(w).retrieve();                  // [5, 3]
  const Tensor flipped =
      p.flip(1).slice(1, 0, 4).transpose(0, 1).matmul(p.slice(1, 0, 3)).retrieve();
  const compiler::Optimized opt = compiler::optimize(cx);
  EXPECT_EQ(count_ops(*opt.graph, Op::SumReduce), 0u) << opt.graph->to_text();
  EXPECT_EQ(count_ops(*opt.graph, Op::Custom), 3u) << opt.graph->to_text();
  EXPECT_EQ(count_ops(*opt.graph, Op::Contiguous), 2u) << opt.graph->to_text();
  const auto want = testing::run_outputs(cx, reference(), {dw, dx, flipped});
  const auto got = testing::run_outputs(cx, cpu(), {dw, dx, flipped});
  for (size_t o = 0; o < want.size(); ++o)
    for (size_t i = 0; i < want[o].size(); ++i)
      ASSERT_NEAR(got[o][i], want[o][i], 1e-5 * (1 + std::fabs(want[o][i]))) << "output " << o;
}

TEST(Cpu, RuntimeErrorsAreReported) {
  Graph cx;
  Tensor t = cx.named_tensor("t", {3});
  Tensor i = cx.named_tensor("i", {2}, DType::I32);
  Tensor g = t.gather(i).retrieve();
  Tensor d = cx.named_tensor("d", {2}, DType::I32);
  Tensor m = fmod(i, d).retrieve();
  cx.compile(cpu());
  t.set(std::vector<float>{1, 2, 3});
  i.set(std::vector<int32_t>{2, 5});
  d.set(std::vector<int32_t>{1, 1});
  try {
    cx.execute();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 5 at position 1 is out of range"),
              std::string::npos)
        << e.what();
  }
  i.set(std::vector<int32_t>{2, 0});
  d.set(std::vector<int32_t>{1, 0});
  EXPECT_THROW(cx.execute(), Error);
  d.set(std::vector<int32_t>{1, 2});
  cx.execute();
  EXPECT_EQ(g.to_f32(), (std::vector<float>{3, 1}));
}

size_t count_files(const fs::path& dir, const std::string& ext) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ext;
  return n;
}

TEST(Cpu, EachCompileDumpsToFilesOfItsOwn) {
  // A process compiling several graphs (a training step, then sampling) keeps the dumps
  // of each: the files of a later compile do not overwrite an earlier one's.
  const fs::path dir = fs::path(::testing::TempDir()) / "luminal_dump_test";
  fs::remove_all(dir);
  const testing::ScopedEnv what("LUMINAL_DUMP", "kernels");
  const testing::ScopedEnv where("LUMINAL_DUMP_DIR", dir.c_str());
  std::set<fs::path> seen;
  std::vector<std::string> texts;
  for (const int width : {3, 5}) {
    Graph cx;
    (cx.named_tensor("x", {width}) * 2.0f).exp().retrieve();
    cx.compile(cpu());
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!seen.insert(e.path()).second) continue;
      std::ifstream in(e.path());
      texts.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    ASSERT_EQ(texts.size(), seen.size());
  }
  ASSERT_EQ(texts.size(), 2u);
  EXPECT_NE(texts[0].find("f32[3]"), std::string::npos) << texts[0];
  EXPECT_NE(texts[1].find("f32[5]"), std::string::npos) << texts[1];
}

TEST(Cpu, KernelsAreCachedAndDimsRebindWithoutRecompiling) {
  const fs::path dir = fs::path(::testing::TempDir()) / "luminal_cache_test";
  fs::remove_all(dir);
  setenv("LUMINAL_CACHE_DIR", dir.c_str(), 1);
  auto build = [](Graph& cx) {
    Tensor x = cx.named_tensor("x", {"s", 3});
    return (x.softmax(1) * 2.0).retrieve();
  };
  Graph a;
  Tensor ya = build(a);
  a.compile(cpu());
  EXPECT_EQ(count_files(dir, ".so"), 1u);
  Graph b;
  build(b);
  b.compile(cpu());  // identical source: a cache hit
  EXPECT_EQ(count_files(dir, ".so"), 1u);
  auto run = [&](int64_t s) {
    a.set_dim("s", s);
    Tensor x = a.tensor_of(NodeId{0});
    std::vector<float> v(static_cast<size_t>(s * 3), 0.0f);
    x.set(v);
    a.execute();
    for (float r : ya.to_f32()) EXPECT_NEAR(r, 2.0 / 3.0, 1e-6);
  };
  for (int64_t s : {4, 2, 7}) run(s);
  EXPECT_EQ(count_files(dir, ".so"), 1u);
  // A dim bound to 1 gets kernels of its own, once (CpuOptions::specialize_unit_dims).
  run(1);
  run(1);
  EXPECT_EQ(count_files(dir, ".so"), 2u);
  run(5);
  EXPECT_EQ(count_files(dir, ".so"), 2u);
  unsetenv("LUMINAL_CACHE_DIR");
}

TEST(Cpu, CompilerFailureKeepsTheSourceAndNamesIt) {
  const fs::path dir = fs::path(::testing::TempDir()) / "luminal_cache_fail";
  fs::remove_all(dir);
  setenv("LUMINAL_CACHE_DIR", dir.c_str(), 1);
  setenv("LUMINAL_CXX", "false", 1);
  Graph cx;
  (cx.named_tensor("x", {4}) * 3.0).retrieve();
  try {
    cx.compile(cpu());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("source kept at"), std::string::npos) << msg;
    EXPECT_EQ(count_files(dir, ".cpp"), 1u);
    EXPECT_EQ(count_files(dir, ".so"), 0u);
  }
  unsetenv("LUMINAL_CXX");
  unsetenv("LUMINAL_CACHE_DIR");
}

}  // namespace
}  // namespace luminal
