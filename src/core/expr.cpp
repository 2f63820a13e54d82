// luminal::Expr: construction, evaluation, substitution and printing.
#include "luminal/expr.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "core/expr_table.hpp"
#include "luminal/error.hpp"

namespace luminal {

using expr_detail::build;
using expr_detail::ExprTable;
using expr_detail::node_of;
using expr_detail::NodeKey;

namespace {

bool valid_var_name(std::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
    return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return name != "min" && name != "max" && name != "lo" && name != "hi";
}

}  // namespace

Expr Expr::constant(int64_t value) {
  return from_id(ExprTable::get().intern(NodeKey{ExprOp::Const, 0, 0, value, 0, 0}));
}

Expr Expr::var(std::string_view name, int64_t lo, int64_t hi) {
  LUM_CHECK(valid_var_name(name)) << "invalid symbolic variable name '" << name
                                  << "': use a C identifier other than min, max, lo, hi";
  LUM_CHECK(lo <= hi) << "variable '" << name << "' has empty bounds [" << lo << ", " << hi << "]";
  auto& t = ExprTable::get();
  const uint32_t name_id = t.intern_name(name);
  return from_id(t.intern(NodeKey{ExprOp::Var, name_id, 0, 0, lo, hi}));
}

Expr::Expr(const char* var_name) : Expr(var(var_name)) {}

ExprOp Expr::op() const {
  return node_of(*this).op;
}
Expr Expr::lhs() const {
  LUM_ASSERT(!is_const() && !is_var()) << "lhs() of a leaf expression";
  return from_id(node_of(*this).a);
}
Expr Expr::rhs() const {
  LUM_ASSERT(!is_const() && !is_var()) << "rhs() of a leaf expression";
  return from_id(node_of(*this).b);
}
std::optional<int64_t> Expr::as_const() const {
  const auto& n = node_of(*this);
  if (n.op != ExprOp::Const) return std::nullopt;
  return n.value;
}
std::string_view Expr::var_name() const {
  LUM_ASSERT(is_var()) << "var_name() of a non-variable";
  return ExprTable::get().name(node_of(*this).a);
}
int64_t Expr::lower_bound() const {
  return node_of(*this).lo;
}
int64_t Expr::upper_bound() const {
  return node_of(*this).hi;
}
uint64_t Expr::structural_hash() const {
  return node_of(*this).shash;
}

// ---------------------------------------------------------------------------------
// Operators

Expr operator+(Expr a, Expr b) {
  return build(ExprOp::Add, a, b);
}
Expr operator-(Expr a, Expr b) {
  return build(ExprOp::Add, a, build(ExprOp::Mul, b, -1));
}
Expr operator*(Expr a, Expr b) {
  return build(ExprOp::Mul, a, b);
}
Expr operator/(Expr a, Expr b) {
  return build(ExprOp::Div, a, b);
}
Expr operator%(Expr a, Expr b) {
  return build(ExprOp::Mod, a, b);
}
Expr operator-(Expr a) {
  return build(ExprOp::Mul, a, -1);
}
Expr min(Expr a, Expr b) {
  return build(ExprOp::Min, a, b);
}
Expr max(Expr a, Expr b) {
  return build(ExprOp::Max, a, b);
}
Expr lt(Expr a, Expr b) {
  return build(ExprOp::Lt, a, b);
}
Expr ge(Expr a, Expr b) {
  return build(ExprOp::Ge, a, b);
}
Expr logical_and(Expr a, Expr b) {
  return build(ExprOp::And, a, b);
}
Expr logical_or(Expr a, Expr b) {
  return build(ExprOp::Or, a, b);
}

Expr ceil_div(Expr a, Expr b) {
  if (auto c = b.as_const(); c && *c > 0) return (a + (*c - 1)) / b;
  return -((-a) / b);
}

Expr expr_raw(ExprOp op, Expr a, Expr b) {
  LUM_ASSERT(op != ExprOp::Const && op != ExprOp::Var) << "expr_raw builds binary nodes";
  return Expr::from_id(ExprTable::get().intern(NodeKey{op, a.id(), b.id(), 0, 0, 0}));
}

Expr product(const std::vector<Expr>& v) {
  Expr p = 1;
  for (Expr e : v) p = p * e;
  return p;
}

// ---------------------------------------------------------------------------------
// Rebuilding: simplify and substitute

namespace {

template <class LeafFn>
Expr rebuild(Expr e, std::unordered_map<uint32_t, Expr>& memo, const LeafFn& leaf) {
  if (e.is_const()) return e;
  if (e.is_var()) return leaf(e);
  if (auto it = memo.find(e.id()); it != memo.end()) return it->second;
  Expr r = build(e.op(), rebuild(e.lhs(), memo, leaf), rebuild(e.rhs(), memo, leaf));
  memo.emplace(e.id(), r);
  return r;
}

}  // namespace

Expr simplify(Expr e) {
  std::unordered_map<uint32_t, Expr> memo;
  return rebuild(e, memo, [](Expr v) { return v; });
}

Expr Expr::substitute(std::string_view var, Expr with) const {
  return substitute({{std::string(var), with}});
}

Expr Expr::substitute(const std::vector<std::pair<std::string, Expr>>& map) const {
  std::unordered_map<uint32_t, Expr> memo;
  return rebuild(*this, memo, [&](Expr v) {
    for (const auto& [name, with] : map)
      if (v.var_name() == name) return with;
    return v;
  });
}

std::vector<std::string> Expr::variables() const {
  std::vector<std::string> out;
  std::vector<Expr> stack{*this};
  std::unordered_map<uint32_t, bool> seen;
  while (!stack.empty()) {
    Expr e = stack.back();
    stack.pop_back();
    if (!seen.emplace(e.id(), true).second) continue;
    if (e.is_var()) {
      out.emplace_back(e.var_name());
    } else if (!e.is_const()) {
      stack.push_back(e.lhs());
      stack.push_back(e.rhs());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// ---------------------------------------------------------------------------------
// Evaluation

Bindings::Bindings(std::initializer_list<std::pair<std::string_view, int64_t>> init) {
  for (const auto& [k, v] : init) set(k, v);
}

Bindings::Bindings(const std::unordered_map<std::string, int64_t>& map) {
  for (const auto& [k, v] : map) set(k, v);
}

void Bindings::set(std::string_view name, int64_t value) {
  const uint32_t id = ExprTable::get().intern_name(name);
  if (values_.size() <= id) {
    values_.resize(id + 1, 0);
    has_.resize(id + 1, false);
  }
  values_[id] = value;
  has_[id] = true;
}

std::optional<int64_t> Bindings::get(std::string_view name) const {
  const int64_t* v = find(ExprTable::get().intern_name(name));
  return v ? std::optional<int64_t>(*v) : std::nullopt;
}

namespace {

int64_t eval_node(Expr e, const Bindings& b, Expr root) {
  const auto& n = node_of(e);
  switch (n.op) {
    case ExprOp::Const:
      return n.value;
    case ExprOp::Var: {
      const int64_t* v = b.find(n.a);
      LUM_CHECK(v) << "unbound symbolic dimension '" << e.var_name() << "' in expression "
                   << root.to_string() << " (bind it with set_dim)";
      return *v;
    }
    default:
      break;
  }
  // Both operands are always evaluated (no short-circuit), so operand order, which
  // the simplifier canonicalises, cannot change whether evaluation fails.
  const int64_t x = eval_node(Expr::from_id(n.a), b, root);
  const int64_t y = eval_node(Expr::from_id(n.b), b, root);
  auto r = expr_detail::fold(n.op, x, y);
  LUM_CHECK(r) << (y == 0 ? "division by zero" : "integer overflow") << " evaluating "
               << root.to_string();
  return *r;
}

}  // namespace

int64_t Expr::eval(const Bindings& b) const {
  return eval_node(*this, b, *this);
}
int64_t Expr::eval() const {
  return eval(Bindings());
}

// ---------------------------------------------------------------------------------
// Printing

namespace {

// Precedence: higher binds tighter.
int precedence(ExprOp op) {
  switch (op) {
    case ExprOp::Or:
      return 1;
    case ExprOp::And:
      return 2;
    case ExprOp::Lt:
    case ExprOp::Ge:
      return 3;
    case ExprOp::Add:
      return 4;
    case ExprOp::Mul:
    case ExprOp::Div:
    case ExprOp::Mod:
      return 5;
    default:
      return 7;
  }
}

void print_constant(std::ostream& os, int64_t v, bool c_syntax) {
  if (c_syntax && v == kExprNegInf) {
    os << "(-9223372036854775807LL - 1)";
  } else if (c_syntax && (v > INT32_MAX || v < INT32_MIN)) {
    os << v << "LL";
  } else {
    os << v;
  }
}

class Printer {
 public:
  explicit Printer(bool c_syntax) : c_(c_syntax) {}

  void print(std::ostream& os, Expr e, int min_prec) {
    const auto& n = node_of(e);
    if (n.op == ExprOp::Const) {
      // A negative literal reads as unary minus, which binds tighter than any binary op.
      const bool paren = n.value < 0 && min_prec > 6;
      if (paren) os << '(';
      print_constant(os, n.value, c_);
      if (paren) os << ')';
      return;
    }
    if (n.op == ExprOp::Var) {
      os << e.var_name();
      return;
    }
    const Expr a = e.lhs(), b = e.rhs();
    if (n.op == ExprOp::Min || n.op == ExprOp::Max) {
      os << (c_ ? "lum_" : "") << (n.op == ExprOp::Min ? "min(" : "max(");
      print(os, a, 0);
      os << ", ";
      print(os, b, 0);
      os << ')';
      return;
    }
    if (c_ && (n.op == ExprOp::Div || n.op == ExprOp::Mod) && !truncation_is_floor(a, b)) {
      os << (n.op == ExprOp::Div ? "lum_floordiv(" : "lum_floormod(");
      print(os, a, 0);
      os << ", ";
      print(os, b, 0);
      os << ')';
      return;
    }
    const int p = precedence(n.op);
    const bool paren = p < min_prec;
    if (paren) os << '(';
    switch (n.op) {
      case ExprOp::Add:
        print_sum(os, a, b);
        break;
      case ExprOp::Mul:
        print_binary(os, a, "*", b, p, p + 1);
        break;
      case ExprOp::Div:
        print_binary(os, a, " / ", b, p, p + 1);
        break;
      case ExprOp::Mod:
        print_binary(os, a, " % ", b, p, p + 1);
        break;
      case ExprOp::Lt:
        print_binary(os, a, " < ", b, p + 1, p + 1);
        break;
      case ExprOp::Ge:
        print_binary(os, a, " >= ", b, p + 1, p + 1);
        break;
      case ExprOp::And:
        print_binary(os, a, " && ", b, p, p + 1);
        break;
      case ExprOp::Or:
        print_binary(os, a, " || ", b, p, p + 1);
        break;
      default:
        LUM_ASSERT(false) << "unhandled op";
    }
    if (paren) os << ')';
  }

 private:
  // C's `/` and `%` truncate; they agree with floor semantics for a >= 0, b > 0.
  static bool truncation_is_floor(Expr a, Expr b) {
    return a.lower_bound() >= 0 && b.lower_bound() > 0;
  }

  void print_binary(std::ostream& os, Expr a, const char* op, Expr b, int pa, int pb) {
    print(os, a, pa);
    os << op;
    print(os, b, pb);
  }

  // Prints `a + b`, writing a term with a negative coefficient as a subtraction.
  void print_sum(std::ostream& os, Expr a, Expr b) {
    print(os, a, 4);
    const auto& nb = node_of(b);
    if (nb.op == ExprOp::Const && nb.value < 0 && nb.value != kExprNegInf) {
      os << " - ";
      print_constant(os, -nb.value, c_);
      return;
    }
    if (nb.op == ExprOp::Mul) {
      const auto& coef = node_of(b.rhs());
      if (coef.op == ExprOp::Const && coef.value < 0 && coef.value != kExprNegInf) {
        os << " - ";
        print(os, b.lhs(), coef.value == -1 ? 5 : 5);
        if (coef.value != -1) {
          os << '*';
          print_constant(os, -coef.value, c_);
        }
        return;
      }
    }
    os << " + ";
    print(os, b, 5);
  }

  bool c_;
};

}  // namespace

std::string Expr::to_string() const {
  std::ostringstream os;
  Printer(false).print(os, *this, 0);
  return os.str();
}

std::string Expr::to_c() const {
  std::ostringstream os;
  Printer(true).print(os, *this, 0);
  return os.str();
}

std::string_view expr_c_prelude() {
  return R"(#ifndef LUM_EXPR_FN
#define LUM_EXPR_FN static inline
#endif
LUM_EXPR_FN long long lum_floordiv(long long a, long long b) {
  long long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
LUM_EXPR_FN long long lum_floormod(long long a, long long b) {
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
LUM_EXPR_FN long long lum_min(long long a, long long b) { return a < b ? a : b; }
LUM_EXPR_FN long long lum_max(long long a, long long b) { return a > b ? a : b; }
LUM_EXPR_FN long long lum_mul(long long a, long long b) { return a * b; }
)";
}

std::ostream& operator<<(std::ostream& os, Expr e) {
  return os << e.to_string();
}

std::string to_string(const std::vector<Expr>& shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const std::vector<Expr>& shape) {
  return os << to_string(shape);
}

}  // namespace luminal
