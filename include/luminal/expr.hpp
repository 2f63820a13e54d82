// Symbolic integer expressions for shapes, strides, index maps and kernel bounds.
//
// An Expr is a 32-bit id into a process-wide interning table: building the same
// expression twice yields the same id, so equality is an integer compare and copies
// are free. Every expression built through the operators below is kept simplified
// (constant folding, canonical sums and products, div/mod of sums, bound-based rules);
// `expr_raw` builds without simplification, for tests and for `simplify`.
//
// Semantics: 64-bit integers. `/` and `%` use *floor* division (Python semantics: the
// quotient rounds toward minus infinity, the remainder takes the divisor's sign).
// Comparisons and `&&`/`||` yield 0 or 1; `&&`/`||` evaluate both operands. Variables are
// non-negative unless declared with explicit bounds. Thread-safe.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace luminal {

enum class ExprOp : uint8_t { Const, Var, Add, Mul, Div, Mod, Min, Max, Lt, Ge, And, Or };

inline constexpr int64_t kExprInf = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kExprNegInf = std::numeric_limits<int64_t>::min();

class Bindings;

class Expr {
 public:
  /// The constant 0.
  Expr() = default;
  /// An integer constant; implicit so that literals read naturally (`x * 2 + 1`).
  template <std::integral T>
  requires(!std::same_as<T, bool>) Expr(T value) : Expr(constant(static_cast<int64_t>(value))) {}
  /// A variable, non-negative by default ("s", "batch").
  Expr(const char* var_name);
  Expr(const std::string& var_name) : Expr(var_name.c_str()) {}

  /// A variable known to lie in [lo, hi] (inclusive). Bounds feed simplification.
  static Expr var(std::string_view name, int64_t lo = 0, int64_t hi = kExprInf);
  static Expr constant(int64_t value);
  static Expr from_id(uint32_t id) {
    Expr e;
    e.id_ = id;
    return e;
  }

  uint32_t id() const { return id_; }
  ExprOp op() const;
  /// Child expressions (binary ops only).
  Expr lhs() const;
  Expr rhs() const;
  bool is_const() const { return op() == ExprOp::Const; }
  bool is_var() const { return op() == ExprOp::Var; }
  /// The value if this is a constant.
  std::optional<int64_t> as_const() const;
  /// The variable's name (variables only).
  std::string_view var_name() const;
  /// Proven lower and upper bounds (kExprNegInf / kExprInf when unknown).
  int64_t lower_bound() const;
  int64_t upper_bound() const;
  /// A hash of the structure that is stable across runs (used for canonical order).
  uint64_t structural_hash() const;

  /// Evaluates with variables bound; an unbound variable or division by zero throws
  /// luminal::Error naming it.
  int64_t eval(const Bindings& b) const;
  /// Evaluates an expression without variables.
  int64_t eval() const;

  /// Replaces a variable (by name) with an expression, re-simplifying.
  Expr substitute(std::string_view var, Expr with) const;
  Expr substitute(const std::vector<std::pair<std::string, Expr>>& map) const;
  /// Names of the variables that occur, sorted, without duplicates.
  std::vector<std::string> variables() const;

  /// Human-readable infix form, parseable by parse_expr.
  std::string to_string() const;
  /// A C expression over int64_t; floor div/mod of possibly negative values call the
  /// helpers in expr_c_prelude().
  std::string to_c() const;
  /// C statements bounding the expression over a box of its variables' values: with
  /// `v_lo` and `v_hi` (inclusive) in scope for each variable v, they declare
  /// `<name>_lo` and `<name>_hi`, which hold every value it takes in the box wherever
  /// `<name>_known` (also declared) is nonzero; a divisor that may be zero clears it.
  /// They use the helpers of expr_c_prelude().
  std::string to_c_bounds(std::string_view name) const;

  friend bool operator==(Expr a, Expr b) { return a.id_ == b.id_; }
  friend bool operator!=(Expr a, Expr b) { return a.id_ != b.id_; }

 private:
  uint32_t id_ = 0;
};

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);  // floor division
Expr operator%(Expr a, Expr b);  // floor modulo
Expr operator-(Expr a);
inline Expr& operator+=(Expr& a, Expr b) {
  return a = a + b;
}
inline Expr& operator-=(Expr& a, Expr b) {
  return a = a - b;
}
inline Expr& operator*=(Expr& a, Expr b) {
  return a = a * b;
}
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr lt(Expr a, Expr b);  // a < b as 0/1
Expr ge(Expr a, Expr b);  // a >= b as 0/1
Expr logical_and(Expr a, Expr b);
Expr logical_or(Expr a, Expr b);
/// ceil(a / b) for b != 0.
Expr ceil_div(Expr a, Expr b);

/// Builds a node without simplification (tests, and the input of `simplify`).
Expr expr_raw(ExprOp op, Expr a, Expr b);
/// Rebuilds bottom-up through the simplifying constructors.
Expr simplify(Expr e);
/// t / d when d provably divides t as products of the same factors (the coefficient
/// divisible, every factor of d among t's); nullopt otherwise.
std::optional<Expr> exact_quotient(Expr t, Expr d);
/// A loop counter's symbolic range: lo <= v < hi, where hi may be a symbolic dim.
struct VarRange {
  Expr lo, hi;
};
/// Symbolic ranges by variable name.
using VarRanges = std::unordered_map<std::string, VarRange>;
/// Simplifies `e` knowing the symbolic ranges of some variables (the others are fixed
/// unknowns): divisions and remainders whose dividend is a multiple of the divisor plus
/// something in [0, divisor) — `(i*seq + j) / seq` is i for j < seq — and comparisons
/// decided by the ranges.
Expr simplify_within(Expr e, const VarRanges& ranges);
/// Parses the infix syntax of Expr::to_string (+ - * / % < <= > >= == != && || min max);
/// throws luminal::Error with the column of a syntax error.
Expr parse_expr(std::string_view text);

/// C helpers used by Expr::to_c (floor division and modulo on int64_t).
std::string_view expr_c_prelude();

std::ostream& operator<<(std::ostream& os, Expr e);
std::ostream& operator<<(std::ostream& os, const std::vector<Expr>& shape);
std::string to_string(const std::vector<Expr>& shape);
/// Product of the entries (1 for an empty list).
Expr product(const std::vector<Expr>& v);

/// Values for variables, looked up by interned name.
class Bindings {
 public:
  Bindings() = default;
  Bindings(std::initializer_list<std::pair<std::string_view, int64_t>> init);
  Bindings(const std::unordered_map<std::string, int64_t>& map);
  void set(std::string_view name, int64_t value);
  std::optional<int64_t> get(std::string_view name) const;
  /// Lookup by interned name id (used by Expr::eval).
  const int64_t* find(uint32_t name_id) const {
    return name_id < values_.size() && has_[name_id] ? &values_[name_id] : nullptr;
  }

 private:
  std::vector<int64_t> values_;
  std::vector<bool> has_;
};

}  // namespace luminal

template <>
struct std::hash<luminal::Expr> {
  size_t operator()(luminal::Expr e) const noexcept { return e.id(); }
};
