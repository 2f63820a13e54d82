// Property tests: thousands of random expressions; the simplified form must evaluate
// exactly like the unsimplified one, and proven bounds must hold, on random bindings.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "luminal/error.hpp"
#include "luminal/expr.hpp"

namespace luminal {
namespace {

constexpr ExprOp kOps[] = {ExprOp::Add, ExprOp::Add, ExprOp::Mul, ExprOp::Mul,
                           ExprOp::Div, ExprOp::Mod, ExprOp::Min, ExprOp::Max,
                           ExprOp::Lt,  ExprOp::Ge,  ExprOp::And, ExprOp::Or};

class RandomExprs {
 public:
  explicit RandomExprs(uint32_t seed) : rng_(seed) {}

  // A raw (unsimplified) random tree.
  Expr make(int depth) {
    std::uniform_int_distribution<int> leaf(0, 5);
    if (depth == 0 || leaf(rng_) == 0) {
      switch (std::uniform_int_distribution<int>(0, 4)(rng_)) {
        case 0:
          return Expr("a");
        case 1:
          return Expr("b");
        case 2:
          return Expr::var("i", 0, 15);
        default:
          return Expr(std::uniform_int_distribution<int64_t>(-6, 9)(rng_));
      }
    }
    const ExprOp op = kOps[std::uniform_int_distribution<size_t>(0, std::size(kOps) - 1)(rng_)];
    return expr_raw(op, make(depth - 1), make(depth - 1));
  }

  // Index-like trees: sums, scaling, and div/mod by positive constants, the shapes
  // that view index math produces and the div/mod rules target.
  Expr make_index(int depth) {
    std::uniform_int_distribution<int> pick(0, 7);
    auto small = [&](int64_t lo, int64_t hi) {
      return Expr(std::uniform_int_distribution<int64_t>(lo, hi)(rng_));
    };
    if (depth == 0 || pick(rng_) == 0) {
      switch (std::uniform_int_distribution<int>(0, 3)(rng_)) {
        case 0:
          return Expr("a");
        case 1:
          return Expr("b");
        case 2:
          return Expr::var("i", 0, 15);
        default:
          return small(-3, 16);
      }
    }
    switch (pick(rng_)) {
      case 0:
      case 1:
        return expr_raw(ExprOp::Add, make_index(depth - 1), make_index(depth - 1));
      case 2:
        return expr_raw(ExprOp::Mul, make_index(depth - 1), small(-3, 8));
      case 3:
      case 4:
        return expr_raw(ExprOp::Div, make_index(depth - 1), small(1, 12));
      case 5:
      case 6:
        return expr_raw(ExprOp::Mod, make_index(depth - 1), small(1, 12));
      default:
        return expr_raw(pick(rng_) < 4 ? ExprOp::Min : ExprOp::Max, make_index(depth - 1),
                        make_index(depth - 1));
    }
  }

  Bindings bindings() {
    std::uniform_int_distribution<int64_t> v(0, 12), i(0, 15);
    return Bindings{{"a", v(rng_)}, {"b", v(rng_)}, {"i", i(rng_)}};
  }

  std::mt19937& rng() { return rng_; }

 private:
  std::mt19937 rng_;
};

std::optional<int64_t> try_eval(Expr e, const Bindings& b) {
  try {
    return e.eval(b);
  } catch (const Error&) {
    return std::nullopt;  // division by zero or overflow
  }
}

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
