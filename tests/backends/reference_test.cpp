// The reference interpreter against brute-force loops written directly in C++.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "luminal/luminal.hpp"

namespace luminal {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -3, float hi = 3) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TEST(Reference, UnaryOpsMatchLibm) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {4, 5});
  const auto xs = random_floats(20, 1, 0.1f, 4.0f);
  x.set(xs);
  Tensor l = x.log2().retrieve(), e = x.exp2().retrieve(), s = x.sin().retrieve(),
         q = x.sqrt().retrieve(), r = x.recip().retrieve();
  cx.compile(reference());
  cx.execute();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    EXPECT_EQ(l.to_f32()[i], static_cast<float>(std::log2(v)));
    EXPECT_EQ(e.to_f32()[i], static_cast<float>(std::exp2(v)));
    EXPECT_EQ(s.to_f32()[i], static_cast<float>(std::sin(v)));
    EXPECT_EQ(q.to_f32()[i], static_cast<float>(std::sqrt(v)));
    EXPECT_EQ(r.to_f32()[i], static_cast<float>(1.0 / v));
  }
}

TEST(Reference, BroadcastBinaryOps) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {3, 1, 4}), b = cx.named_tensor("b", {2, 1});
  const auto av = random_floats(12, 2), bv = random_floats(2, 3);
  a.set(av);
  b.set(bv);
  Tensor sum = (a + b).retrieve(), prod = (a * b).retrieve(), mod = fmod(a, b).retrieve();
  Tensor lt = less_than(a, b).retrieve();
  cx.compile(reference());
  cx.execute();
  ASSERT_EQ(sum.shape(), (std::vector<Expr>{3, 2, 4}));
  const auto s = sum.to_f32(), p = prod.to_f32(), m = mod.to_f32();
  const auto l = lt.to_i64();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k) {
        const size_t o = (i * 2 + j) * 4 + k;
        const float x = av[i * 4 + k], y = bv[j];
        EXPECT_EQ(s[o], x + y);
        EXPECT_EQ(p[o], x * y);
        EXPECT_EQ(m[o], std::fmod(x, y));
        EXPECT_EQ(l[o], x < y ? 1 : 0);
      }
}

TEST(Reference, IntegerSemantics) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {4}, DType::I32), b = cx.named_tensor("b", {4}, DType::I32);
  a.set(std::vector<int32_t>{std::numeric_limits<int32_t>::max(), -7, 7, -7});
  b.set(std::vector<int32_t>{1, 2, -2, -2});
  Tensor sum = (a + b).retrieve(), mod = fmod(a, b).retrieve(), prod = (a * b).retrieve();
  cx.compile(reference());
  cx.execute();
  EXPECT_EQ(sum.to_i64(), (std::vector<int64_t>{std::numeric_limits<int32_t>::min(), -5, 5, -9}));
  EXPECT_EQ(mod.to_i64(), (std::vector<int64_t>{0, -1, 1, -1}));  // truncated, like C
  EXPECT_EQ(prod.to_i64()[1], -14);
  b.set(std::vector<int32_t>{1, 0, 1, 1});
  EXPECT_THROW(cx.execute(), Error);
}

TEST(Reference, WhereSelectsWithoutTouchingTheOtherBranch) {
  Graph cx;
  Tensor c = cx.named_tensor("c", {4}, DType::Bool);
  Tensor a = cx.named_tensor("a", {4});
  c.set(std::vector<bool>{true, false, true, false});
  a.set(std::vector<float>{1, 2, 3, 4});
  const float inf = std::numeric_limits<float>::infinity();
  Tensor out = where(c, a, cx.constant(-inf)).retrieve();
  cx.compile(reference());
  cx.execute();
  EXPECT_EQ(out.to_f32(), (std::vector<float>{1, -inf, 3, -inf}));
}

TEST(Reference, ReductionsOverEveryAxisOfAPermutedInput) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {2, 3, 4});
  const auto xs = random_floats(24, 4);
  x.set(xs);
  Tensor p = x.permute({2, 0, 1});  // [4, 2, 3]; p[i][j][k] = x[j][k][i]
  std::vector<Tensor> sums, maxes;
  for (int axis = 0; axis < 3; ++axis) {
    sums.push_back(p.sum_reduce(axis).retrieve());
    maxes.push_back(p.max_reduce(axis).retrieve());
  }
  cx.compile(reference());
  cx.execute();
  const int dims[3] = {4, 2, 3};
  auto at = [&](int i, int j, int k) { return xs[(j * 3 + k) * 4 + i]; };
  for (int axis = 0; axis < 3; ++axis) {
    const auto s = sums[axis].to_f32(), m = maxes[axis].to_f32();
    size_t o = 0;
    for (int i = 0; i < (axis == 0 ? 1 : dims[0]); ++i)
      for (int j = 0; j < (axis == 1 ? 1 : dims[1]); ++j)
        for (int k = 0; k < (axis == 2 ? 1 : dims[2]); ++k, ++o) {
          double acc = 0;
          float best = -INFINITY;
          for (int r = 0; r < dims[axis]; ++r) {
            const float v = axis == 0 ? at(r, j, k) : axis == 1 ? at(i, r, k) : at(i, j, r);
            acc += v;
            best = std::max(best, v);
          }
          EXPECT_FLOAT_EQ(s[o], static_cast<float>(acc));
          EXPECT_EQ(m[o], best);
        }
  }
}

TEST(Reference, MaxPropagatesNaNAndIntegerSums) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {3});
  x.set(std::vector<float>{1, std::nanf(""), 2});
  Tensor m = x.max_reduce(0).retrieve();
  Tensor i = cx.named_tensor("i", {3}, DType::I32);
  i.set(std::vector<int32_t>{5, -9, 100});
  Tensor s = i.sum_reduce(0).retrieve();
  cx.compile(reference());
  cx.execute();
  EXPECT_TRUE(std::isnan(m.to_f32()[0]));
  EXPECT_EQ(s.to_i64()[0], 96);
}

TEST(Reference, PaddingReadsZeroAndViewsCompose) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {2, 3});
  x.set(std::vector<float>{1, 2, 3, 4, 5, 6});
  // pad columns by (1, 2), flip rows, slice columns 1..5, then add 10.
  Tensor y = (x.pad(1, 1, 2).flip(0).slice(1, 1, 5) + 10.0).retrieve();
  Tensor e = x.expand(1, 2).retrieve();  // [2, 2, 3]
  cx.compile(reference());
  cx.execute();
  EXPECT_EQ(y.to_f32(), (std::vector<float>{14, 15, 16, 10, 11, 12, 13, 10}));
  EXPECT_EQ(e.to_f32(), (std::vector<float>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
}

TEST(Reference, GatherEmbeddingRowsBuiltFromIota) {
  // Embedding lookup from primitives: flat index = token * dim + iota(dim).
  Graph cx;
  const int vocab = 5, dim = 3;
  Tensor table = cx.named_tensor("table", {vocab, dim});
  Tensor tokens = cx.named_tensor("tokens", {"s"}, DType::I32);
  const auto tv = random_floats(vocab * dim, 5);
  table.set(tv);
  Tensor row = (tokens * static_cast<double>(dim)).expand(1, dim);
  Tensor col = cx.iota(Expr("z"), {dim}).broadcast_to({"s", dim});
  Tensor out = table.gather(row + col).retrieve();
  cx.compile(reference());
  for (std::vector<int32_t> toks : {std::vector<int32_t>{4, 0, 2}, std::vector<int32_t>{1, 1}}) {
    cx.set_dim("s", static_cast<int64_t>(toks.size()));
    tokens.set(toks);
    cx.execute();
    const auto o = out.to_f32();
    ASSERT_EQ(o.size(), toks.size() * dim);
    for (size_t t = 0; t < toks.size(); ++t)
      for (int d = 0; d < dim; ++d) EXPECT_EQ(o[t * dim + d], tv[toks[t] * dim + d]);
  }
}

TEST(Reference, ScatterWritesPositions) {
  Graph cx;
  Tensor dest = cx.named_tensor("dest", {2, 3});
  Tensor idx = cx.named_tensor("idx", {2}, DType::I64);
  Tensor src = cx.named_tensor("src", {2});
  dest.set(std::vector<float>{0, 1, 2, 3, 4, 5});
  idx.set(std::vector<int64_t>{4, 0});
  src.set(std::vector<float>{-1, -2});
  Tensor out = dest.scatter(idx, src).retrieve();
  cx.compile(reference());
  cx.execute();
  EXPECT_EQ(out.to_f32(), (std::vector<float>{-2, 1, 2, 3, -1, 5}));
  EXPECT_EQ(dest.to_f32(), (std::vector<float>{0, 1, 2, 3, 4, 5}));  // input untouched
}

TEST(Reference, IotaExpressions) {
  Graph cx;
  Tensor a = cx.iota(Expr("z") % 3 * 2 + 1, {2, 3}).retrieve();
  Tensor causal = cx.iota(lt(Expr("z") / 4, Expr("z") % 4), {4, 4}, DType::F32).retrieve();
  cx.compile(reference());
  cx.execute();
  EXPECT_EQ(a.to_i64(), (std::vector<int64_t>{1, 3, 5, 1, 3, 5}));
  const auto c = causal.to_f32();
  for (int r = 0; r < 4; ++r)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(c[r * 4 + k], r < k ? 1.0f : 0.0f);
}

TEST(Reference, Casts) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {6});
  x.set(std::vector<float>{1.9f, -1.9f, std::nanf(""), 3e10f, 65519.99f, 1.00048828125f});
  Tensor i = x.cast(DType::I32).retrieve();
  Tensor h = x.cast(DType::F16).retrieve();
  Tensor b = x.cast(DType::BF16).retrieve();
  Tensor back = x.cast(DType::I64).cast(DType::F32).retrieve();
  cx.compile(reference());
  cx.execute();
  EXPECT_EQ(i.to_i64(),
            (std::vector<int64_t>{1, -1, 0, std::numeric_limits<int32_t>::max(), 65519, 1}));
  const Buffer hb = h.data();
  const Buffer bb = b.data();
  for (size_t k = 0; k < 6; ++k) {
    const double v = x.to_f32()[k];
    EXPECT_EQ(hb.span<f16>()[k].bits, f16_bits_from_double(v)) << k;
    EXPECT_EQ(bb.span<bf16>()[k].bits, bf16_bits_from_double(v)) << k;
  }
  EXPECT_EQ(back.to_f32()[0], 1.0f);
}

TEST(Reference, HalfPrecisionArithmeticRoundsOnce) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {64}, DType::F16), b = cx.named_tensor("b", {64}, DType::F16);
  const auto av = random_floats(64, 6), bv = random_floats(64, 7);
  a.set(av);
  b.set(bv);
  Tensor p = (a * b).retrieve();
  cx.compile(reference());
  cx.execute();
  const Buffer ab = a.data(), bb = b.data(), pb = p.data();
  for (size_t k = 0; k < 64; ++k) {
    const double x = ab.get_f64(k), y = bb.get_f64(k);
    EXPECT_EQ(pb.span<f16>()[k].bits, f16_bits_from_double(x * y));
  }
}

TEST(Reference, ReusesInputsAcrossRunsAndRebindsDims) {
  Graph cx;
  Tensor w = cx.named_tensor("w", {3});
  Tensor x = cx.named_tensor("x", {"n", 3});
  Tensor y = (x * w).sum_reduce(1).retrieve();
  w.set(std::vector<float>{1, 10, 100});
  cx.compile(reference());
  cx.set_dim("n", 1);
  x.set(std::vector<float>{1, 2, 3});
  cx.execute();
  EXPECT_EQ(y.to_f32(), (std::vector<float>{321}));
  cx.set_dim("n", 2);
  x.set(std::vector<float>{4, 5, 6, 7, 8, 9});
  cx.execute();
  EXPECT_EQ(y.to_f32(), (std::vector<float>{654, 987}));
}

TEST(Reference, FreesIntermediatesAfterLastUse) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {1000});
  x.set(random_floats(1000, 8, 0.5f, 1.0f));
  Tensor t = x;
  for (int k = 0; k < 10; ++k) t = (t * 1.0001).sqrt();  // 20 intermediates of 4000 bytes
  t.retrieve();
  Tensor unused = (x + 1.0);  // not an output: never computed
  (void)unused;
  cx.compile(reference());
  cx.execute();
  const RunStats st = cx.last_run_stats();
  // Constants (1 element each) aside, at most two 4000-byte values are alive at once.
  EXPECT_LE(st.peak_bytes, 2 * 4000 + 64u);
  EXPECT_EQ(st.nodes_run, 30u);  // 10 constants, 10 Mul, 10 Sqrt; `unused` skipped
}

TEST(Reference, ValuesOfInnerNodesFromGivenInputs) {
  // What a backend checks its kernels against: nodes that are not outputs, under dims and
  // inputs given apart from the graph's own.
  Graph cx;
  Tensor x = cx.named_tensor("x", {"n", 3});
  Tensor w = cx.named_tensor("w", {3});
  Tensor scaled = x * w;
  Tensor sums = scaled.sum_reduce(1);
  (sums.exp2()).retrieve();
  Bindings dims;
  dims.set("n", 2);
  const Buffer xs = Buffer::from(std::vector<float>{1, 2, 3, 4, 5, 6}),
               ws = Buffer::from(std::vector<float>{1, 10, 100});
  const std::vector<Buffer> v =
      reference_values(cx, {scaled.id(), sums.id(), w.id(), sums.id()}, dims,
                       [&](NodeId id) -> const Buffer& { return id == x.id() ? xs : ws; });
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0].to_f32(), (std::vector<float>{1, 20, 300, 4, 50, 600}));
  EXPECT_EQ(v[1].to_f32(), (std::vector<float>{321, 654}));
  EXPECT_EQ(v[2].to_f32(), (std::vector<float>{1, 10, 100}));  // an input: as given
  EXPECT_EQ(v[3].to_f32(), (std::vector<float>{321, 654}));    // a node listed twice
}

}  // namespace
}  // namespace luminal
