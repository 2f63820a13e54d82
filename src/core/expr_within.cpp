// Simplification under symbolic ranges of loop counters.
//
// The interning simplifier only knows integer bounds, so it cannot see that a counter j
// running over a symbolic dim `seq` makes (i*seq + j) / seq equal to i. Generated kernels
// are full of such quotients (a multi-index flattened and split again over other shapes);
// left alone, each costs a 64-bit division per element. This pass splits a dividend into
// multiples of the divisor plus a remainder and drops the division when the remainder's
// symbolic range lies in [0, divisor). A divisor that could be zero is taken as positive:
// at zero the original expression divides by zero, so no value is more right than another.
#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "luminal/expr.hpp"

namespace luminal {
namespace {

bool is_op(Expr e, ExprOp op) {
  return !e.is_const() && !e.is_var() && e.op() == op;
}

bool nonnegative(Expr e) {
  return e.lower_bound() >= 0;
}

void terms_of(Expr e, std::vector<Expr>& out) {
  if (is_op(e, ExprOp::Add)) {
    terms_of(e.lhs(), out);
    terms_of(e.rhs(), out);
  } else if (e != Expr(0)) {
    out.push_back(e);
  }
}

std::vector<Expr> terms_of(Expr e) {
  std::vector<Expr> out;
  terms_of(e, out);
  return out;
}

// A monomial as coefficient times a multiset of factors.
struct Monomial {
  int64_t coef = 1;
  std::vector<Expr> factors;
};

void factor(Expr e, Monomial& m) {
  if (auto c = e.as_const()) {
    m.coef *= *c;
  } else if (is_op(e, ExprOp::Mul)) {
    factor(e.lhs(), m);
    factor(e.rhs(), m);
  } else {
    m.factors.push_back(e);
  }
}

}  // namespace

std::optional<Expr> exact_quotient(Expr t, Expr d) {
  Monomial mt, md;
  factor(t, mt);
  factor(d, md);
  if (md.coef == 0 || mt.coef % md.coef != 0) return std::nullopt;
  for (Expr f : md.factors) {
    auto it = std::find(mt.factors.begin(), mt.factors.end(), f);
    if (it == mt.factors.end()) return std::nullopt;
    mt.factors.erase(it);
  }
  Expr q = mt.coef / md.coef;
  for (Expr f : mt.factors) q = q * f;
  return q;
}

namespace {

struct Range {  // inclusive
  Expr lo, hi;
};

class Within {
 public:
  explicit Within(const VarRanges& ranges) : ranges_(ranges) {}

  Expr run(Expr e) {
    if (e.is_const() || e.is_var()) return e;
    if (auto it = memo_.find(e.id()); it != memo_.end()) return it->second;
    const Expr a = run(e.lhs()), b = run(e.rhs());
    Expr out;
    switch (e.op()) {
      case ExprOp::Add:
        out = a + b;
        break;
      case ExprOp::Mul:
        out = a * b;
        break;
      case ExprOp::Div:
        out = divmod(a / b);
        break;
      case ExprOp::Mod:
        out = divmod(a % b);
        break;
      case ExprOp::Min:
        out = min(a, b);
        break;
      case ExprOp::Max:
        out = max(a, b);
        break;
      case ExprOp::Lt:
        out = compare(lt(a, b));
        break;
      case ExprOp::Ge:
        out = compare(ge(a, b));
        break;
      case ExprOp::And:
        out = logical_and(a, b);
        break;
      case ExprOp::Or:
        out = logical_or(a, b);
        break;
      default:
        out = e;
        break;
    }
    memo_.emplace(e.id(), out);
    return out;
  }

 private:
  // Symbolic bounds of e, or nullopt when they cannot be stated.
  std::optional<Range> range(Expr e) {
    if (e.is_const()) return Range{e, e};
    if (e.is_var()) {
      auto it = ranges_.find(std::string(e.var_name()));
      if (it == ranges_.end()) return Range{e, e};  // a fixed unknown, such as a dim
      return Range{it->second.lo, it->second.hi - 1};
    }
    switch (e.op()) {
      case ExprOp::Add: {
        auto a = range(e.lhs()), b = range(e.rhs());
        if (!a || !b) return std::nullopt;
        return Range{a->lo + b->lo, a->hi + b->hi};
      }
      case ExprOp::Mul: {
        auto a = range(e.lhs());
        if (!a) return std::nullopt;
        if (auto c = e.rhs().as_const())
          return *c >= 0 ? Range{a->lo * *c, a->hi * *c} : Range{a->hi * *c, a->lo * *c};
        auto b = range(e.rhs());
        if (!b || !nonnegative(a->lo) || !nonnegative(b->lo)) return std::nullopt;
        return Range{a->lo * b->lo, a->hi * b->hi};
      }
      case ExprOp::Div: {
        auto a = range(e.lhs());
        if (!a || !nonnegative(e.rhs())) return std::nullopt;
        return Range{a->lo / e.rhs(), a->hi / e.rhs()};  // floor division is monotonic
      }
      case ExprOp::Mod:
        if (!nonnegative(e.rhs())) return std::nullopt;
        return Range{Expr(0), e.rhs() - 1};
      case ExprOp::Lt:
      case ExprOp::Ge:
      case ExprOp::And:
      case ExprOp::Or:
        return Range{Expr(0), Expr(1)};
      default:
        return std::nullopt;
    }
  }

  // a / d or a % d: peel the multiples of d off a; if what is left lies in [0, d), the
  // quotient is the peeled multiple and the remainder what is left.
  Expr divmod(Expr e) {
    if (!is_op(e, ExprOp::Div) && !is_op(e, ExprOp::Mod)) return e;
    const Expr d = e.rhs();
    if (!nonnegative(d) || d == Expr(0)) return e;
    // Multiples are recognised as the divisor itself times something, or (for a sum
    // that was distributed) its first non-constant term times something.
    std::vector<Expr> leads{d};
    for (Expr t : terms_of(d))
      if (!t.is_const() && t != d) {
        leads.push_back(t);
        break;
      }
    Expr rem = e.lhs(), quot = 0;
    for (bool progress = true; progress;) {
      progress = false;
      const std::vector<Expr> terms = terms_of(rem);
      for (Expr t : terms) {
        for (Expr lead : leads) {
          auto k = exact_quotient(t, lead);
          if (!k) continue;
          const Expr candidate = rem - *k * d;
          if (terms_of(candidate).size() < terms.size()) {
            rem = candidate;
            quot = quot + *k;
            progress = true;
            break;
          }
        }
        if (progress) break;
      }
    }
    auto r = range(rem);
    if (!r) return strided(e);
    // (Below the divisor: below d - 1, or at most 0, the divisor being taken as positive.)
    if (nonnegative(r->lo) && (nonnegative(d - 1 - r->hi) || nonnegative(-r->hi)))
      return e.op() == ExprOp::Div ? quot : rem;
    // ... or in [-d, 0): one multiple too many was peeled ((c s + s - 1) / s is c).
    if (nonnegative(-1 - r->hi) && (nonnegative(r->lo + d) || nonnegative(r->lo + 1)))
      return e.op() == ExprOp::Div ? quot - 1 : rem + d;
    // What is left lies within one multiple's span, [q d, (q + 1) d), though not the first:
    // (v + 111) / 112 with v in [1, 113) is 1 (a position in padding's coordinates, one
    // past its start, taken back to the unpadded value's).
    const auto lo = r->lo.as_const(), hi = r->hi.as_const(), dc = d.as_const();
    if (lo && hi && dc && *dc > 0) {
      const auto floor_div = [](int64_t x, int64_t y) { return x / y - (x % y != 0 && x < 0); };
      const int64_t q = floor_div(*lo, *dc);
      if (q == floor_div(*hi, *dc)) return e.op() == ExprOp::Div ? quot + q : rem - q * *dc;
    }
    return strided(e);
  }

  // a / D or a % D for a constant D = k m, where a = k x + r with r in [0, k): the
  // quotient is x / m and the remainder k (x % m) + r (floor semantics, any sign of x).
  // (A position along a dim of stride k split over a coarser one: (c + 8 i) / 16 with c
  // in [0, 8) is i / 2.) The largest such k wins.
  Expr strided(Expr e) {
    const auto dc = e.rhs().as_const();
    if (!dc || *dc < 4) return e;
    const std::vector<Expr> terms = terms_of(e.lhs());
    // The candidate strides: the divisor's common factors with the terms' coefficients.
    std::vector<int64_t> strides;
    for (Expr t : terms) {
      Monomial mono;
      factor(t, mono);
      if (mono.coef == kExprNegInf) continue;
      const int64_t k = std::gcd(*dc, mono.coef < 0 ? -mono.coef : mono.coef);
      if (k >= 2 && k < *dc) strides.push_back(k);
    }
    std::sort(strides.rbegin(), strides.rend());
    strides.erase(std::unique(strides.begin(), strides.end()), strides.end());
    for (int64_t k : strides) {
      Expr x = 0, r = 0;
      for (Expr t : terms) {
        if (auto q = exact_quotient(t, Expr(k)))
          x = x + *q;
        else
          r = r + t;
      }
      if (x == Expr(0)) continue;
      auto rr = range(r);
      if (!rr || !nonnegative(rr->lo) || !nonnegative(Expr(k - 1) - rr->hi)) continue;
      const Expr m = *dc / k;
      return e.op() == ExprOp::Div ? divmod(x / m) : divmod(x % m) * k + r;
    }
    return e;
  }

  // A comparison decided by the range of its operands' difference.
  Expr compare(Expr e) {
    if (!is_op(e, ExprOp::Lt) && !is_op(e, ExprOp::Ge)) return e;
    auto r = range(e.lhs() - e.rhs());
    if (!r) return e;
    const bool lt = e.op() == ExprOp::Lt;
    if (nonnegative(-1 - r->hi)) return Expr(lt ? 1 : 0);
    if (nonnegative(r->lo)) return Expr(lt ? 0 : 1);
    return e;
  }

  const VarRanges& ranges_;
  std::unordered_map<uint32_t, Expr> memo_;
};

}  // namespace

Expr simplify_within(Expr e, const VarRanges& ranges) {
  return ranges.empty() ? e : Within(ranges).run(e);
}

}  // namespace luminal
