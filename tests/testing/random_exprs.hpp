// Random expressions for the property tests over Expr (expr_property_test.cpp,
// expr_bounds_test.cpp): raw trees of every op, and index-like trees.
#pragma once

#include <optional>
#include <random>

#include "luminal/error.hpp"
#include "luminal/expr.hpp"

namespace luminal::testing {

constexpr ExprOp kOps[] = {ExprOp::Add, ExprOp::Add, ExprOp::Mul, ExprOp::Mul,
                           ExprOp::Div, ExprOp::Mod, ExprOp::Min, ExprOp::Max,
                           ExprOp::Lt,  ExprOp::Ge,  ExprOp::And, ExprOp::Or};

class RandomExprs {
 public:
  explicit RandomExprs(uint32_t seed) : rng_(seed) {}

  // A raw (unsimplified) random tree.
  Expr make(int depth) {
    std::uniform_int_distribution<int> leaf(0, 5);
    if (depth == 0 || leaf(rng_) == 0) return variable_or_constant(5, -6, 9);
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
    if (depth == 0 || pick(rng_) == 0) return variable_or_constant(4, -3, 16);
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
  // A leaf: a, b, i in [0, 15], or (the other `kinds` - 3 of `kinds` draws) a constant in
  // [lo, hi].
  Expr variable_or_constant(int kinds, int64_t lo, int64_t hi) {
    switch (std::uniform_int_distribution<int>(0, kinds - 1)(rng_)) {
      case 0:
        return Expr("a");
      case 1:
        return Expr("b");
      case 2:
        return Expr::var("i", 0, 15);
      default:
        return Expr(std::uniform_int_distribution<int64_t>(lo, hi)(rng_));
    }
  }

  std::mt19937 rng_;
};

inline std::optional<int64_t> try_eval(Expr e, const Bindings& b) {
  try {
    return e.eval(b);
  } catch (const Error&) {
    return std::nullopt;  // division by zero or overflow
  }
}

}  // namespace luminal::testing
