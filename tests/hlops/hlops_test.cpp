// Composite ops beyond the PyTorch goldens: bad input, symbolic shapes, random
// initialisation and the debugging helpers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

#include "luminal/luminal.hpp"
#include "testing/expect_error.hpp"

namespace luminal {
namespace {

using testing::expect_error;

TEST(Hlops, BadInputNamesTheOpAndShapes) {
  Graph cx;
  Tensor a = cx.tensor({2, 3}), b = cx.tensor({4, 5}), v = cx.tensor({3});
  expect_error([&] { a.matmul(b); }, {"matmul", "[2, 3]", "[4, 5]"});
  expect_error([&] { a.dot(v); }, {"dot", "1-D", "[2, 3]"});
  expect_error([&] { concat({a, v}, 0); }, {"concat", "rank"});
  expect_error([&] { concat({a, b}, 0); }, {"Add", "broadcast"});
  expect_error([&] { a.squeeze(0); }, {"squeeze", "dimension 0", "not 1"});
  expect_error([&] { a.reshape({-1, -1}); }, {"reshape", "more than one -1"});
  expect_error([&] { a.reshape({-1, 4}); }, {"reshape", "cannot infer"});
  expect_error([&] { a.sum({0, 0}); }, {"sum", "repeated axis"});
  expect_error([&] { a.softmax(2); }, {"max", "axis 2", "rank 2"});
  expect_error([&] { a.clamp(1, 0); }, {"clamp"});
  expect_error([&] { a.repeat({2}); }, {"repeat", "rank-2"});
  expect_error([&] { a.index_select(0, a.cast(DType::I32)); }, {"index_select", "1-D"});
  expect_error([&] { cx.tensor({"s", 3}).split(2, 0); }, {"split", "concrete"});
  expect_error([&] { v.tril(); }, {"tril", "2 dimensions"});
  Tensor x = cx.tensor({1, 4, 8}), w = cx.tensor({2, 3, 3});
  expect_error([&] { conv1d(x, w); }, {"conv1d", "input channels 4", "weight channels 3"});
  expect_error([&] { conv1d(v, w); }, {"conv1d", "[N, C, L]"});
  expect_error([&] { conv1d(x, cx.tensor({2, 4, 3}), cx.tensor({3})); }, {"conv1d", "bias", "[2]"});
  expect_error([&] { max_pool1d(x, {.kernel = 0}); }, {"max_pool1d", "kernel"});
  expect_error([&] { a.unfold(1, 5); }, {"unfold", "does not fit"});
  expect_error([&] { cx.rand({"s"}, 1); }, {"rand", "concrete"});
}

TEST(Hlops, SymbolicShapesFlowThroughComposites) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {"s", 3});
  Tensor soft = x.softmax(0).retrieve();
  Tensor mean = x.mean({0}).retrieve();
  Tensor cum = x.cumsum(0).retrieve();
  cx.compile(reference());
  for (int64_t s : {2, 5}) {
    std::vector<float> xs(static_cast<size_t>(s * 3));
    for (size_t k = 0; k < xs.size(); ++k) xs[k] = std::sin(static_cast<float>(k));
    cx.set_dim("s", s);
    x.set(xs);
    cx.execute();
    const auto sm = soft.to_f32(), mn = mean.to_f32(), cs = cum.to_f32();
    for (int c = 0; c < 3; ++c) {
      double denom = 0, total = 0, running = 0, mx = -INFINITY;
      for (int r = 0; r < s; ++r) mx = std::max(mx, double(xs[r * 3 + c]));
      for (int r = 0; r < s; ++r) denom += std::exp(xs[r * 3 + c] - mx);
      for (int r = 0; r < s; ++r) {
        total += xs[r * 3 + c];
        running += xs[r * 3 + c];
        EXPECT_NEAR(sm[r * 3 + c], std::exp(xs[r * 3 + c] - mx) / denom, 1e-6);
        EXPECT_NEAR(cs[r * 3 + c], running, 1e-5);
      }
      EXPECT_NEAR(mn[c], total / s, 1e-6);
    }
  }
}

TEST(Hlops, SeededRandomIsDeterministicAndDistributedAsAsked) {
  Graph cx;
  Tensor u = cx.rand({100, 100}, 42, -1, 3).retrieve();
  Tensor u2 = cx.rand({100, 100}, 42, -1, 3).retrieve();
  Tensor n = cx.randn({100, 100}, 7, 2, 0.5).retrieve();
  cx.compile(reference());
  cx.execute();
  const auto a = u.to_f32(), b = u2.to_f32(), c = n.to_f32();
  EXPECT_EQ(a, b);
  double sum = 0, lo = 1e9, hi = -1e9, nsum = 0, nsq = 0;
  for (float v : a) {
    sum += v;
    lo = std::min(lo, double(v));
    hi = std::max(hi, double(v));
  }
  for (float v : c) {
    nsum += v;
    nsq += double(v) * v;
  }
  EXPECT_GE(lo, -1.0);
  EXPECT_LT(hi, 3.0);
  EXPECT_NEAR(sum / a.size(), 1.0, 0.05);  // mean of U(-1, 3); sd of the mean ~0.012
  const double nmean = nsum / c.size(), nvar = nsq / c.size() - nmean * nmean;
  EXPECT_NEAR(nmean, 2.0, 0.02);  // sd of the mean 0.005
  EXPECT_NEAR(std::sqrt(nvar), 0.5, 0.02);
}

TEST(Hlops, DiffReportsTheWorstMismatches) {
  const std::string path = ::testing::TempDir() + "/luminal_diff.bin";
  auto write = [&](std::vector<float> v) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  };
  Graph cx;
  Tensor x = cx.named_tensor("x", {4});
  x.set(std::vector<float>{1, 2, 3, 4});
  (x * 2.0).diff(path, 1e-6, 0);
  cx.compile(reference());
  write({2, 4, 6, 8});
  EXPECT_NO_THROW(cx.execute());
  write({2, 4.5f, 6, 7});
  expect_error([&] { cx.execute(); },
               {"2 of 4 elements differ", "[3] got 8, expected 7", "[1] got 4"});
  write({2, 4});
  expect_error([&] { cx.execute(); }, {"holds 8 bytes", "4 f32 elements"});
  std::remove(path.c_str());
}

// x rounded to bf16, to nearest, ties to even.
float round_bf16(double x) {
  const float f = static_cast<float>(x);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Over bf16 values the activations compute in f32 and round once, as PyTorch does: each
// result is the exact value rounded to bf16, or (where the f32 steps' error tips the
// rounding) one step of bf16 beside it, and nearly all are the former. Rounded at every step,
// GELU's erf and the tanh forms strayed further.
TEST(Hlops, HalfPrecisionActivationsRoundOnce) {
  const double pi = std::acos(-1.0);
  const auto sigmoid = [](double x) { return 1 / (1 + std::exp(-x)); };
  const std::vector<std::pair<std::string, std::function<double(double)>>> exact = {
      {"gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {"gelu_tanh",
       [&](double x) {
         return 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
       }},
      {"silu", [&](double x) { return x * sigmoid(x); }},
      {"sigmoid", sigmoid},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"erf", [](double x) { return std::erf(x); }},
      {"softplus", [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); }},
  };
  std::vector<float> xs;
  for (int i = 0; i <= 4000; ++i) xs.push_back(round_bf16(-8.0 + 16.0 * i / 4000));
  for (const auto& [name, f] : exact) {
    Graph cx;
    Tensor x = cx.tensor({static_cast<int64_t>(xs.size())}, DType::BF16);
    x.set(xs);
    Tensor y = name == "gelu"        ? x.gelu()
               : name == "gelu_tanh" ? x.gelu_tanh()
               : name == "silu"      ? x.silu()
               : name == "sigmoid"   ? x.sigmoid()
               : name == "tanh"      ? x.tanh()
               : name == "erf"       ? x.erf()
                                     : x.softplus();
    y.retrieve();
    cx.compile(reference());
    cx.execute();
    ASSERT_EQ(y.dtype(), DType::BF16) << name;
    const std::vector<float> got = y.to_f32();
    size_t exact_count = 0, counted = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = round_bf16(f(xs[i]));
      // A bf16 step near want, or the erf approximation's own error (1.5e-7) where the
      // exact value is far smaller.
      const double bound = std::max(std::fabs(want) / 128.0, 1e-6 * (1 + std::fabs(xs[i])));
      ASSERT_LE(std::fabs(got[i] - want), bound) << name << "(" << xs[i] << ")";
      if (std::fabs(want) / 128.0 < 1e-6 * (1 + std::fabs(xs[i]))) continue;
      ++counted;
      exact_count += got[i] == want;
    }
    EXPECT_GE(exact_count, counted * 97 / 100) << name << ": " << exact_count << " of " << counted;
  }
}

// A sum or max over an axis of one element is that element: a view, not a reduction
// kernel of its own.
TEST(Hlops, ReducingOneElementIsAView) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {4, 1, 3});
  x.set(std::vector<float>{1, -2, 3, 4, 5, -6, 7, 8, 9, 10, -11, 12});
  Tensor y = x.sum({1}) * 2.0 + x.max({1}, true).squeeze(1);
  y.retrieve();
  for (uint32_t i = 0; i < cx.num_nodes(); ++i) {
    EXPECT_NE(cx.node(NodeId{i}).op, Op::SumReduce);
    EXPECT_NE(cx.node(NodeId{i}).op, Op::MaxReduce);
  }
  cx.compile(reference());
  cx.execute();
  const std::vector<float> got = y.to_f32();
  ASSERT_EQ(got.size(), 12u);
  const std::vector<float> in{1, -2, 3, 4, 5, -6, 7, 8, 9, 10, -11, 12};
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 3 * in[i]);
  EXPECT_EQ(to_string(x.sum({1}, true).shape()), "[4, 1, 3]");
}

TEST(Hlops, MatmulIsBroadcastMultiplySum) {
  // The pattern the compiler will recognise as a GEMM: one Mul feeding one SumReduce.
  Graph cx;
  Tensor a = cx.tensor({3, 4}), b = cx.tensor({4, 5});
  Tensor c = a.matmul(b);
  const Node& sum = cx.node(c.id());
  EXPECT_EQ(sum.op, Op::SumReduce);
  EXPECT_EQ(cx.node(sum.inputs[0].source).op, Op::Mul);
  EXPECT_EQ(c.shape(), (std::vector<Expr>{3, 5}));
}

}  // namespace
}  // namespace luminal
