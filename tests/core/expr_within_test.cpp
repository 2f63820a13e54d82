// simplify_within: division and remainder under symbolic ranges of loop counters,
// checked on known identities and, by brute force, on random index expressions over
// every counter value for many bindings of the dims.
#include <gtest/gtest.h>

#include <random>

#include "luminal/error.hpp"
#include "luminal/expr.hpp"
#include "luminal/view.hpp"

namespace luminal {
namespace {

const Expr seq("seq"), past("past");
const Expr i = Expr::var("ci"), j = Expr::var("cj"), k = Expr::var("ck", 0, 3);

// i in [0, seq), j in [past, seq + past), k in [0, 4).
VarRanges counters() {
  return {{"ci", {Expr(0), seq}}, {"cj", {past, seq + past}}, {"ck", {Expr(0), Expr(4)}}};
}

TEST(ExprWithin, SplitsSumsOverSymbolicDivisors) {
  const VarRanges r = counters();
  EXPECT_EQ(simplify_within((k * seq + i) / seq, r), k);
  EXPECT_EQ(simplify_within((k * seq + i) % seq, r), i);
  EXPECT_EQ(simplify_within(((k * seq + i) * 256 + 7) / (seq * 256), r), k);
  EXPECT_EQ(simplify_within((j - past) % seq, r), j - past);
  EXPECT_EQ(simplify_within((j - past) / seq, r), Expr(0));
  EXPECT_EQ(simplify_within(lt(i, seq), r), Expr(1));
  EXPECT_EQ(simplify_within(ge(j, past), r), Expr(1));
  // Not provable: j may reach seq + past - 1 >= seq.
  EXPECT_NE(simplify_within(j % seq, r), j);
  // Exact multiples, and the last position of a multiple's span (the divisor taken as
  // positive: i's range is empty otherwise).
  EXPECT_EQ(simplify_within((i * seq) / seq, r), i);
  EXPECT_EQ(simplify_within((i * seq) % seq, r), Expr(0));
  EXPECT_EQ(simplify_within((i * seq + seq - 1) / seq, r), i);
  EXPECT_EQ(simplify_within((i * seq + seq - 1) % seq, r), seq - 1);
  // A divisor that is a sum.
  EXPECT_EQ(simplify_within((i * (seq + past) + j) / (seq + past), r), i);
  // Without ranges nothing changes.
  EXPECT_EQ(simplify_within((k * seq + i) / seq, {}), (k * seq + i) / seq);
}

TEST(ExprWithin, QuotientsWithinOneMultiplesSpan) {
  // v in [1, 113): a position in a padded dim, one past its start.
  const Expr v = Expr::var("cv", 1, 112), a = Expr::var("ca", 0, 55);
  VarRanges r = counters();
  r["cv"] = {Expr(1), Expr(113)};
  r["ca"] = {Expr(0), Expr(56)};
  EXPECT_EQ(simplify_within((v + 111) / 112, r), Expr(1));
  EXPECT_EQ(simplify_within((v + 111) % 112, r), v - 1);
  EXPECT_EQ(simplify_within((a * 112 + v - 1) / 112, r), a);
  EXPECT_EQ(simplify_within((a * 112 + v - 1) % 112, r), v - 1);
  // Below zero, floor semantics: k - 4 in [-4, 0) is -1 times 4 plus k.
  EXPECT_EQ(simplify_within((k - 4) / 4, r), Expr(-1));
  EXPECT_EQ(simplify_within((k - 4) % 4, r), k);
  // Across two multiples' spans: left as it is.
  EXPECT_EQ(simplify_within((k - 5) / 4, r), (k - 5) / 4);
}

TEST(ExprWithin, FlattenThenSplitIsTheIdentity) {
  // A multi-index over [4, seq, 256] flattened and split again over the same shape.
  const Expr c = Expr::var("cc", 0, 255);
  VarRanges r = counters();
  r["cc"] = {Expr(0), Expr(256)};
  const View v = View::contiguous({4, seq, 256});
  const std::vector<Expr> split = v.unflatten(v.index({k, i, c}));
  ASSERT_EQ(split.size(), 3u);
  EXPECT_EQ(simplify_within(split[0], r), k);
  EXPECT_EQ(simplify_within(split[1], r), i);
  EXPECT_EQ(simplify_within(split[2], r), c);
}

TEST(ExprWithin, QuotientsByAMultipleOfAStride) {
  // c in [0, 8) along a dim of stride 1 inside one of stride 8, split by 16 and by 24.
  const Expr c = Expr::var("cc", 0, 7);
  VarRanges r = counters();
  r["cc"] = {Expr(0), Expr(8)};
  EXPECT_EQ(simplify_within((c + k * 8) / 16, r), k / 2);
  EXPECT_EQ(simplify_within((c + k * 8) % 16, r), k % 2 * 8 + c);
  EXPECT_EQ(simplify_within((c + k * 8 + i * 24) / 48, r), (k + i * 3) / 6);
  // Not when what is left may reach the stride (c + 1 reaches 8): left as it was.
  const Expr kept = (c + 1 + k * 8) / 16;
  EXPECT_EQ(simplify_within(kept, r), kept);
}

// Index-like random trees over the counters and dims.
Expr random_index(std::mt19937& rng, int depth) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  if (depth == 0 || pick(0, 5) == 0) {
    switch (pick(0, 5)) {
      case 0:
        return i;
      case 1:
        return j;
      case 2:
        return k;
      case 3:
        return seq;
      case 4:
        return past;
      default:
        return Expr(pick(-3, 9));
    }
  }
  const Expr a = random_index(rng, depth - 1), b = random_index(rng, depth - 1);
  switch (pick(0, 8)) {
    case 0:
    case 1:
      return a + b;
    case 2:
      return a - b;
    case 3:
      return a * b;
    case 4:
      return a / b;
    case 5:
      return a % b;
    case 6:
      return lt(a, b);
    case 7:
      return a / (seq + pick(0, 1) * past) + a % (seq * pick(1, 4));
    default: {  // a position along a strided dim split by a multiple of the stride
      const int stride = pick(2, 8);
      const Expr strided = a * stride + b % stride;
      return pick(0, 1) ? strided / (stride * pick(1, 4)) : strided % (stride * pick(1, 4));
    }
  }
}

TEST(ExprWithin, AgreesWithEvaluationOnEveryCounterValue) {
  std::mt19937 rng(7);
  const VarRanges r = counters();
  int changed = 0;
  for (int t = 0; t < 1200; ++t) {
    const Expr e = random_index(rng, 4);
    const Expr s = simplify_within(e, r);
    if (s != e) ++changed;
    for (int64_t sq = 1; sq <= 5; ++sq)
      for (int64_t ps = 0; ps <= 3; ++ps)
        for (int64_t vi = 0; vi < sq; ++vi)
          for (int64_t vj = ps; vj < sq + ps; ++vj)
            for (int64_t vk = 0; vk < 4; ++vk) {
              const Bindings b{{"seq", sq}, {"past", ps}, {"ci", vi}, {"cj", vj}, {"ck", vk}};
              int64_t want;
              try {
                want = e.eval(b);
              } catch (const Error&) {
                continue;  // divides by zero: any value may stand in
              }
              ASSERT_EQ(s.eval(b), want)
                  << e << " became " << s << " at seq=" << sq << " past=" << ps << " ci=" << vi
                  << " cj=" << vj << " ck=" << vk;
            }
  }
  EXPECT_GT(changed, 100);  // the rules fired often enough to be tested
}

}  // namespace
}  // namespace luminal
