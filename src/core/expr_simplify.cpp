// The simplifying constructor behind every Expr operator.
//
// Normal forms kept by construction:
//  - a sum is a left-nested chain of terms sorted by structural hash, each term a
//    monomial times a constant coefficient (coefficient on the right, 1 omitted), and
//    the constant last; like terms are combined, and (x / c) * c + x % c becomes x;
//  - a product is a sorted chain of non-constant factors times one constant; a
//    constant times a sum is distributed;
//  - (c*Q + R) / c and (c*Q + R) % c split off the multiples of c, and a common
//    factor of the coefficients and the divisor is cancelled;
//  - min / max / comparisons of linear expressions are decided by the bounds of their
//    difference; the rest is the rule table (expr_rules.cpp).
// Results are memoised per raw node, so rebuilding a known expression is a lookup.
#include <algorithm>
#include <numeric>

#include "core/expr_rules.hpp"
#include "core/expr_table.hpp"
#include "luminal/error.hpp"

namespace luminal::expr_detail {
namespace {

Expr raw(ExprOp op, Expr a, Expr b) {
  return Expr::from_id(ExprTable::get().intern(NodeKey{op, a.id(), b.id(), 0, 0, 0}));
}

// A node already in normal form: its simplified form is itself.
Expr canon(ExprOp op, Expr a, Expr b) {
  return Expr::from_id(ExprTable::get().intern_canonical(NodeKey{op, a.id(), b.id(), 0, 0, 0}));
}

bool is_op(Expr e, ExprOp op) {
  return !e.is_const() && !e.is_var() && e.op() == op;
}

// A product with a constant coefficient: mono * c.
bool is_scaled(Expr e) {
  return is_op(e, ExprOp::Mul) && e.rhs().is_const();
}

bool order_before(Expr a, Expr b) {
  const uint64_t ha = a.structural_hash(), hb = b.structural_hash();
  return ha != hb ? ha < hb : a.id() < b.id();
}

struct Term {
  Expr mono;
  int64_t coef;
};

struct Linear {
  std::vector<Term> terms;
  int64_t constant = 0;
  bool overflow = false;

  void add_constant(int64_t v) { overflow |= __builtin_add_overflow(constant, v, &constant); }
};

void collect(Expr e, int64_t scale, Linear& out) {
  if (auto c = e.as_const()) {
    int64_t v;
    out.overflow |= __builtin_mul_overflow(*c, scale, &v);
    out.add_constant(v);
  } else if (is_op(e, ExprOp::Add)) {
    collect(e.lhs(), scale, out);
    collect(e.rhs(), scale, out);
  } else if (is_scaled(e)) {
    int64_t v;
    out.overflow |= __builtin_mul_overflow(*e.rhs().as_const(), scale, &v);
    out.terms.push_back({e.lhs(), v});
  } else {
    out.terms.push_back({e, scale});
  }
}

void sort_and_merge(Linear& l) {
  std::sort(l.terms.begin(), l.terms.end(),
            [](const Term& a, const Term& b) { return order_before(a.mono, b.mono); });
  std::vector<Term> merged;
  for (const Term& t : l.terms) {
    if (!merged.empty() && merged.back().mono == t.mono) {
      l.overflow |= __builtin_add_overflow(merged.back().coef, t.coef, &merged.back().coef);
    } else {
      merged.push_back(t);
    }
  }
  std::erase_if(merged, [](const Term& t) { return t.coef == 0; });
  l.terms = std::move(merged);
}

// (x / c) * (c*k) + (x % c) * k  ==  x * k   (floor semantics, any sign of x).
// (y / s) * s * k + (y % s) * k -> y * k, for any divisor s: the multi-index a flat
// index splits into recombines even when the dims are symbolic. The quotient term is
// found by building (y / s) * s and comparing its normal form.
bool recombine_divmod(Linear& l) {
  for (size_t j = 0; j < l.terms.size(); ++j) {
    const Term& m = l.terms[j];
    if (!is_op(m.mono, ExprOp::Mod)) continue;
    const Expr y = m.mono.lhs(), s = m.mono.rhs();
    Linear q;
    collect((y / s) * s, 1, q);
    if (q.overflow || q.constant != 0 || q.terms.size() != 1) continue;
    int64_t expect;
    if (__builtin_mul_overflow(m.coef, q.terms[0].coef, &expect)) continue;
    for (size_t i = 0; i < l.terms.size(); ++i) {
      const Term& d = l.terms[i];
      if (i == j || d.mono != q.terms[0].mono || d.coef != expect) continue;
      const int64_t k = m.coef;
      l.terms.erase(l.terms.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
      l.terms.erase(l.terms.begin() + static_cast<std::ptrdiff_t>(std::min(i, j)));
      collect(y, k, l);
      return true;
    }
  }
  return false;
}

Expr build_linear(Linear l) {
  sort_and_merge(l);
  while (recombine_divmod(l)) sort_and_merge(l);
  Expr chain;
  bool empty = true;
  for (const Term& t : l.terms) {
    Expr term = t.coef == 1 ? t.mono : canon(ExprOp::Mul, t.mono, Expr(t.coef));
    chain = empty ? term : canon(ExprOp::Add, chain, term);
    empty = false;
  }
  if (empty) return Expr(l.constant);
  return l.constant == 0 ? chain : canon(ExprOp::Add, chain, Expr(l.constant));
}

Expr build_add(Expr a, Expr b) {
  if (b.as_const() == 0) return a;
  if (a.as_const() == 0) return b;
  Linear l;
  collect(a, 1, l);
  collect(b, 1, l);
  if (l.overflow) return canon(ExprOp::Add, a, b);
  return build_linear(std::move(l));
}

void collect_factors(Expr e, std::vector<Expr>& out) {
  if (is_op(e, ExprOp::Mul)) {
    collect_factors(e.lhs(), out);
    collect_factors(e.rhs(), out);
  } else {
    out.push_back(e);
  }
}

Expr build_mul(Expr a, Expr b) {
  if (a.is_const() && !b.is_const()) std::swap(a, b);
  if (auto c = b.as_const()) {
    if (*c == 0) return Expr(0);
    if (*c == 1) return a;
    if (is_op(a, ExprOp::Add)) {
      Linear l;
      collect(a, *c, l);
      if (!l.overflow) return build_linear(std::move(l));
    } else if (is_scaled(a)) {
      int64_t k;
      if (!__builtin_mul_overflow(*a.rhs().as_const(), *c, &k)) return build_mul(a.lhs(), Expr(k));
    }
    return canon(ExprOp::Mul, a, b);
  }
  int64_t coef = 1;
  std::vector<Expr> factors;
  for (Expr side : {a, b}) {
    if (is_scaled(side)) {
      if (__builtin_mul_overflow(coef, *side.rhs().as_const(), &coef))
        return canon(ExprOp::Mul, a, b);
      side = side.lhs();
    }
    collect_factors(side, factors);
  }
  std::sort(factors.begin(), factors.end(), order_before);
  Expr chain = factors[0];
  for (size_t i = 1; i < factors.size(); ++i) chain = canon(ExprOp::Mul, chain, factors[i]);
  return coef == 1 ? chain : build_mul(chain, Expr(coef));
}

// A linear `a` divided by a constant c > 0, written as
//   a = c*Q + R  (R's constant in [0, c))  and  R = g*S + r  (g = gcd of R's coefficients
//   and c, r in [0, g)),
// so that floor(a / c) = Q + floor(R / c) = Q + floor(S / (c/g)) and
// a mod c = R mod c = g * (S mod (c/g)) + r.
struct DivModSplit {
  Linear q, r;  // Q and R
  bool has_multiples = false;
  int64_t g = 1;
  Linear s;  // S
};

std::optional<DivModSplit> split_by(Expr a, int64_t c) {
  if (!is_op(a, ExprOp::Add) && !is_scaled(a)) return std::nullopt;
  Linear l;
  collect(a, 1, l);
  if (l.overflow) return std::nullopt;
  DivModSplit out;
  for (const Term& t : l.terms) {
    if (t.coef % c == 0) {
      out.q.terms.push_back({t.mono, t.coef / c});
    } else {
      out.r.terms.push_back(t);
    }
  }
  out.q.constant = floor_div(l.constant, c);
  out.r.constant = floor_mod(l.constant, c);
  out.has_multiples = !out.q.terms.empty() || out.q.constant != 0;
  out.g = c;
  for (const Term& t : out.r.terms) out.g = std::gcd(out.g, t.coef);
  for (const Term& t : out.r.terms) out.s.terms.push_back({t.mono, t.coef / out.g});
  out.s.constant = out.r.constant / out.g;
  return out;
}

std::optional<Expr> div_linear(Expr a, int64_t c) {
  auto p = split_by(a, c);
  if (!p) return std::nullopt;
  if (p->has_multiples) return build_linear(p->q) + build_linear(p->r) / Expr(c);
  if (p->g > 1) return build_linear(p->s) / Expr(c / p->g);
  return std::nullopt;
}

std::optional<Expr> mod_linear(Expr a, int64_t c) {
  auto p = split_by(a, c);
  if (!p) return std::nullopt;
  if (p->has_multiples) return build_linear(p->r) % Expr(c);
  if (p->g > 1)
    return (build_linear(p->s) % Expr(c / p->g)) * Expr(p->g) + Expr(p->r.constant % p->g);
  return std::nullopt;
}

Expr finish(ExprOp op, Expr a, Expr b) {
  Expr e = raw(op, a, b);
  if (auto r = apply_rules(e)) return *r;
  ExprTable::get().set_memo(e.id(), e.id());
  return e;
}

Expr simplify_node(ExprOp op, Expr a, Expr b) {
  const auto ca = a.as_const(), cb = b.as_const();
  if (ca && cb) {
    if (auto v = fold(op, *ca, *cb)) return Expr(*v);
    return canon(op, a, b);  // division by zero or overflow: left for eval to report
  }
  switch (op) {
    case ExprOp::Add:
      return build_add(a, b);
    case ExprOp::Mul:
      return build_mul(a, b);
    case ExprOp::Div:
      if (cb == 1) return a;
      if (cb == -1) return -a;
      if (ca == 0) return Expr(0);
      if (cb && *cb > 0)
        if (auto r = div_linear(a, *cb)) return *r;
      return finish(op, a, b);
    case ExprOp::Mod:
      if (cb == 1 || cb == -1 || ca == 0) return Expr(0);
      if (cb && *cb > 0)
        if (auto r = mod_linear(a, *cb)) return *r;
      return finish(op, a, b);
    case ExprOp::Min:
    case ExprOp::Max: {
      if (a == b) return a;
      const Expr d = a - b;
      const bool is_min = op == ExprOp::Min;
      if (d.upper_bound() <= 0) return is_min ? a : b;
      if (d.lower_bound() >= 0) return is_min ? b : a;
      if (ca || (!cb && order_before(b, a))) std::swap(a, b);
      return finish(op, a, b);
    }
    case ExprOp::Lt:
    case ExprOp::Ge: {
      const Expr d = a - b;
      if (d.upper_bound() < 0) return Expr(op == ExprOp::Lt ? 1 : 0);
      if (d.lower_bound() >= 0) return Expr(op == ExprOp::Lt ? 0 : 1);
      return finish(op, a, b);
    }
    case ExprOp::And:
    case ExprOp::Or:
      if (ca || (!cb && order_before(b, a))) std::swap(a, b);
      return finish(op, a, b);
    case ExprOp::Const:
    case ExprOp::Var:
      break;
  }
  LUM_ASSERT(false) << "simplify_node on a leaf";
}

}  // namespace

Expr build(ExprOp op, Expr a, Expr b) {
  auto& t = ExprTable::get();
  const auto [id, m] = t.intern_with_memo(NodeKey{op, a.id(), b.id(), 0, 0, 0});
  if (m != kNoId) return Expr::from_id(m);
  Expr r = simplify_node(op, a, b);
  t.set_memo(id, r.id());
  return r;
}

}  // namespace luminal::expr_detail
