// The simplifier's rewrite rules, kept as data: `lhs -> rhs if condition`.
//
// Pattern syntax is the expression syntax. In a pattern, x y z w match any
// expression and c0..c9 match constants only; a repeated name must match the same
// expression. Conditions are evaluated on the matched constants, with lo(x) and hi(x)
// giving the proven bounds of a matched expression. Matching of + * min max && ||
// tries both operand orders.
#include "core/expr_rules.hpp"

#include <array>

#include "core/expr_ast.hpp"
#include "core/expr_table.hpp"
#include "luminal/error.hpp"

namespace luminal::expr_detail {
namespace {

struct RuleText {
  const char* lhs;
  const char* rhs;
  const char* cond;  // "" = always
};

// Sums, products and div/mod of linear sums by constants are normalised in C++
// (expr_simplify.cpp); these rules cover what those normal forms leave.
constexpr RuleText kRuleTexts[] = {
    // Division (floor).
    {"x / c0 / c1", "x / (c0 * c1)", "c0 > 0 && c1 > 0"},
    // The same for non-negative symbolic divisors (dims): one normal form, so a
    // multi-index split off a flat index recombines (where a divisor is 0, both forms
    // divide by zero).
    {"x / y / z", "x / (y * z)", "lo(y) >= 0 && lo(z) >= 0"},
    {"x / c0", "0", "c0 > 0 && lo(x) >= 0 && hi(x) < c0"},
    {"x / c0", "-1", "c0 > 0 && lo(x) >= -c0 && hi(x) < 0"},
    {"x % c0 / c1", "x / c1 % (c0 / c1)", "c0 > 0 && c1 > 0 && c0 % c1 == 0"},
    {"x / y", "0", "lo(x) >= 0 && hi(x) < lo(y)"},
    {"x * y / y", "x", "lo(y) > 0"},
    {"x / x", "1", "lo(x) > 0"},
    // Modulo (floor: the result takes the divisor's sign).
    {"x % c0", "x", "c0 > 0 && lo(x) >= 0 && hi(x) < c0"},
    {"x % c0 % c1", "x % c1", "c1 > 0 && c0 % c1 == 0"},
    {"x % y", "x", "lo(x) >= 0 && hi(x) < lo(y)"},
    {"x * y % y", "0", "lo(y) > 0"},
    {"x % x", "0", "lo(x) > 0"},
    // Min and max by bounds (linear differences are decided in C++).
    {"min(x, y)", "x", "hi(x) <= lo(y)"},
    {"min(x, y)", "y", "hi(y) <= lo(x)"},
    {"max(x, y)", "y", "hi(x) <= lo(y)"},
    {"max(x, y)", "x", "hi(y) <= lo(x)"},
    {"min(min(x, y), x)", "min(x, y)", ""},
    {"max(max(x, y), x)", "max(x, y)", ""},
    // Comparisons.
    {"x < y", "1", "hi(x) < lo(y)"},
    {"x < y", "0", "lo(x) >= hi(y)"},
    {"x >= y", "1", "lo(x) >= hi(y)"},
    {"x >= y", "0", "hi(x) < lo(y)"},
    {"x + c0 < c1", "x < c1 - c0", ""},
    {"x + c0 >= c1", "x >= c1 - c0", ""},
    {"x * c0 < c1", "x < (c1 + c0 - 1) / c0", "c0 > 1"},
    {"x * c0 >= c1", "x >= (c1 + c0 - 1) / c0", "c0 > 1"},
    // Logic on 0/1 values.
    {"x && 0", "0", ""},
    {"x && c0", "x", "c0 != 0 && lo(x) >= 0 && hi(x) <= 1"},
    {"x && x", "x", "lo(x) >= 0 && hi(x) <= 1"},
    {"x || c0", "1", "c0 != 0"},
    {"x || 0", "x", "lo(x) >= 0 && hi(x) <= 1"},
    {"x || x", "x", "lo(x) >= 0 && hi(x) <= 1"},
};

constexpr int kMaxSlots = 8;

struct Pattern {
  enum class Kind { Num, Any, Const, Op } kind = Kind::Num;
  ExprOp op = ExprOp::Const;
  int slot = 0;
  int64_t value = 0;
  std::vector<Pattern> kids;
};

struct Rule {
  Pattern lhs;
  Ast rhs;
  Ast cond;
  bool has_cond = false;
  std::vector<std::string> slot_names;
  std::string text;  // for error messages
};

using Env = std::array<Expr, kMaxSlots>;
using Bound = std::array<bool, kMaxSlots>;

bool is_commutative(ExprOp op) {
  return op == ExprOp::Add || op == ExprOp::Mul || op == ExprOp::Min || op == ExprOp::Max ||
         op == ExprOp::And || op == ExprOp::Or;
}

ExprOp op_of(const Ast& a, const std::string& rule) {
  static const std::pair<const char*, ExprOp> kMap[] = {
      {"+", ExprOp::Add},   {"*", ExprOp::Mul},  {"/", ExprOp::Div},  {"%", ExprOp::Mod},
      {"<", ExprOp::Lt},    {">=", ExprOp::Ge},  {"&&", ExprOp::And}, {"||", ExprOp::Or},
      {"min", ExprOp::Min}, {"max", ExprOp::Max}};
  for (const auto& [name, op] : kMap)
    if (a.name == name) return op;
  LUM_ASSERT(false) << "operator '" << a.name << "' cannot appear in a rule pattern: " << rule;
}

int slot_of(const std::string& name, std::vector<std::string>& slots) {
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i] == name) return static_cast<int>(i);
  LUM_ASSERT(slots.size() < kMaxSlots) << "too many pattern variables";
  slots.push_back(name);
  return static_cast<int>(slots.size() - 1);
}

Pattern compile_pattern(const Ast& a, std::vector<std::string>& slots, const std::string& rule) {
  Pattern p;
  switch (a.kind) {
    case Ast::Kind::Num:
      p.kind = Pattern::Kind::Num;
      p.value = a.value;
      return p;
    case Ast::Kind::Ident:
      p.kind = a.name[0] == 'c' ? Pattern::Kind::Const : Pattern::Kind::Any;
      p.slot = slot_of(a.name, slots);
      return p;
    case Ast::Kind::Binary:
    case Ast::Kind::Call:
      p.kind = Pattern::Kind::Op;
      p.op = op_of(a, rule);
      for (const auto& k : a.kids) p.kids.push_back(compile_pattern(k, slots, rule));
      return p;
    case Ast::Kind::Unary:
      break;
  }
  LUM_ASSERT(false) << "unary operators cannot appear in a rule pattern: " << rule;
}

bool match(const Pattern& p, Expr e, Env& env, Bound& bound) {
  switch (p.kind) {
    case Pattern::Kind::Num:
      return e.as_const() == p.value;
    case Pattern::Kind::Const:
      if (!e.is_const()) return false;
      [[fallthrough]];
    case Pattern::Kind::Any:
      if (bound[p.slot]) return env[p.slot] == e;
      bound[p.slot] = true;
      env[p.slot] = e;
      return true;
    case Pattern::Kind::Op:
      break;
  }
  if (e.is_const() || e.is_var() || e.op() != p.op) return false;
  const Env env0 = env;
  const Bound bound0 = bound;
  if (match(p.kids[0], e.lhs(), env, bound) && match(p.kids[1], e.rhs(), env, bound)) return true;
  if (!is_commutative(p.op)) return false;
  env = env0;
  bound = bound0;
  if (match(p.kids[0], e.rhs(), env, bound) && match(p.kids[1], e.lhs(), env, bound)) return true;
  env = env0;
  bound = bound0;
  return false;
}

// Evaluates a rule condition; nullopt when it is undefined (e.g. division by zero).
std::optional<int64_t> eval_cond(const Ast& a, const Rule& r, const Env& env) {
  auto value_of = [&](const std::string& name) -> Expr {
    for (size_t i = 0; i < r.slot_names.size(); ++i)
      if (r.slot_names[i] == name) return env[i];
    LUM_ASSERT(false) << "condition names unknown variable " << name << " in " << r.text;
  };
  switch (a.kind) {
    case Ast::Kind::Num:
      return a.value;
    case Ast::Kind::Ident:
      return value_of(a.name).as_const();
    case Ast::Kind::Call: {
      Expr x = value_of(a.kids.at(0).name);
      return a.name == "lo" ? x.lower_bound() : x.upper_bound();
    }
    case Ast::Kind::Unary: {
      auto v = eval_cond(a.kids[0], r, env);
      if (!v) return v;
      return a.name == "-" ? -*v : static_cast<int64_t>(*v == 0);
    }
    case Ast::Kind::Binary:
      break;
  }
  auto x = eval_cond(a.kids[0], r, env);
  if (!x) return x;
  if (a.name == "&&" && *x == 0) return 0;
  if (a.name == "||" && *x != 0) return 1;
  auto y = eval_cond(a.kids[1], r, env);
  if (!y) return y;
  const std::string& op = a.name;
  if (op == "==") return *x == *y;
  if (op == "!=") return *x != *y;
  if (op == "<") return *x < *y;
  if (op == "<=") return *x <= *y;
  if (op == ">") return *x > *y;
  if (op == ">=") return *x >= *y;
  if (op == "&&" || op == "||") return *y != 0;
  if (op == "-") return fold(ExprOp::Add, *x, -*y);
  if (op == "+") return fold(ExprOp::Add, *x, *y);
  if (op == "*") return fold(ExprOp::Mul, *x, *y);
  if (op == "/") return fold(ExprOp::Div, *x, *y);
  if (op == "%") return fold(ExprOp::Mod, *x, *y);
  LUM_ASSERT(false) << "unknown operator " << op << " in condition of " << r.text;
}

struct RuleSet {
  std::vector<Rule> rules;
  std::array<std::vector<const Rule*>, 12> by_op;  // indexed by the root ExprOp

  RuleSet() {
    rules.reserve(std::size(kRuleTexts));
    for (const auto& t : kRuleTexts) {
      Rule r;
      r.text = std::string(t.lhs) + " -> " + t.rhs + (*t.cond ? " if " : "") + t.cond;
      r.lhs = compile_pattern(parse_ast(t.lhs), r.slot_names, r.text);
      r.rhs = parse_ast(t.rhs);
      r.has_cond = *t.cond != 0;
      if (r.has_cond) r.cond = parse_ast(t.cond);
      rules.push_back(std::move(r));
    }
    for (const auto& r : rules) by_op[static_cast<size_t>(r.lhs.op)].push_back(&r);
  }
};

const RuleSet& rule_set() {
  static const RuleSet* set = new RuleSet();
  return *set;
}

}  // namespace

std::optional<Expr> apply_rules(Expr e) {
  if (e.is_const() || e.is_var()) return std::nullopt;
  for (const Rule* r : rule_set().by_op[static_cast<size_t>(e.op())]) {
    Env env{};
    Bound bound{};
    if (!match(r->lhs, e, env, bound)) continue;
    if (r->has_cond) {
      auto ok = eval_cond(r->cond, *r, env);
      if (!ok || *ok == 0) continue;
    }
    return instantiate(r->rhs, [&](const std::string& name) {
      for (size_t i = 0; i < r->slot_names.size(); ++i)
        if (r->slot_names[i] == name) return env[i];
      LUM_ASSERT(false) << "right-hand side names unknown variable " << name << " in " << r->text;
    });
  }
  return std::nullopt;
}

size_t rule_count() {
  return rule_set().rules.size();
}

}  // namespace luminal::expr_detail
