// Property tests: thousands of random expressions; the simplified form must evaluate
// exactly like the unsimplified one, and proven bounds must hold, on random bindings.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "luminal/error.hpp"
#include "luminal/expr.hpp"
#include "testing/random_exprs.hpp"

namespace luminal {
namespace {

using testing::RandomExprs;
using testing::try_eval;

// Every subexpression's value lies within its proven bounds.
void check_bounds(Expr e, const Bindings& b, int& checked) {
  auto v = try_eval(e, b);
  if (!v) return;
  ASSERT_LE(e.lower_bound(), *v) << e.to_string();
  ASSERT_GE(e.upper_bound(), *v) << e.to_string();
  ++checked;
  if (!e.is_const() && !e.is_var()) {
    check_bounds(e.lhs(), b, checked);
    check_bounds(e.rhs(), b, checked);
  }
}

// Simplifies `count` random trees from `make` and compares values on 20 bindings each;
// returns how many comparisons ran (raw evaluation may fail, e.g. division by zero).
template <class Make>
int expect_simplified_agrees(RandomExprs& gen, int count, Make make) {
  int compared = 0;
  for (int n = 0; n < count; ++n) {
    const Expr raw = make();
    const Expr simple = simplify(raw);
    for (int k = 0; k < 20; ++k) {
      const Bindings b = gen.bindings();
      auto expected = try_eval(raw, b);
      if (!expected) continue;
      auto got = try_eval(simple, b);
      EXPECT_TRUE(got.has_value()) << "simplified form fails to evaluate: " << simple.to_string()
                                   << " from " << raw.to_string();
      if (!got || *got != *expected) {
        ADD_FAILURE() << raw.to_string() << "  simplified to  " << simple.to_string()
                      << "  a=" << *b.get("a") << " b=" << *b.get("b") << " i=" << *b.get("i");
        return compared;
      }
      ++compared;
    }
  }
  return compared;
}

TEST(ExprProperty, SimplifiedAgreesWithUnsimplified) {
  RandomExprs gen(12345);
  EXPECT_GT(expect_simplified_agrees(gen, 5000, [&] { return gen.make(4); }), 50000);
}

TEST(ExprProperty, IndexLikeExpressionsAgree) {
  RandomExprs gen(2024);
  EXPECT_GT(expect_simplified_agrees(gen, 8000, [&] { return gen.make_index(5); }), 100000);
}

TEST(ExprProperty, BoundsAreSound) {
  RandomExprs gen(777);
  int checked = 0;
  for (int n = 0; n < 3000; ++n) {
    const Expr raw = gen.make(4);
    const Expr simple = simplify(raw);
    for (int k = 0; k < 10; ++k) {
      const Bindings b = gen.bindings();
      check_bounds(raw, b, checked);
      check_bounds(simple, b, checked);
    }
  }
  EXPECT_GT(checked, 100000);
}

TEST(ExprProperty, PrintParseRoundTripPreservesValue) {
  RandomExprs gen(99);
  for (int n = 0; n < 2000; ++n) {
    const Expr e = simplify(gen.make(3));
    // Parsing re-declares `i` without its bounds, so compare values, not ids.
    const Expr back = parse_expr(e.to_string());
    for (int k = 0; k < 5; ++k) {
      const Bindings b = gen.bindings();
      auto x = try_eval(e, b);
      if (!x) continue;
      auto y = try_eval(back, b);
      ASSERT_TRUE(y.has_value()) << e.to_string();
      ASSERT_EQ(*x, *y) << e.to_string();
    }
  }
}

TEST(ExprProperty, SubstitutionMatchesBinding) {
  RandomExprs gen(4242);
  for (int n = 0; n < 2000; ++n) {
    const Expr e = simplify(gen.make(3));
    const Bindings b = gen.bindings();
    const int64_t a = *b.get("a");
    auto direct = try_eval(e, b);
    if (!direct) continue;
    auto substituted = try_eval(e.substitute("a", Expr(a)), b);
    ASSERT_TRUE(substituted.has_value()) << e.to_string();
    ASSERT_EQ(*direct, *substituted) << e.to_string() << " with a=" << a;
  }
}

}  // namespace
}  // namespace luminal
