// Two sets of values for the symbolic dims in some expressions, to order strides and
// extents that are sums and products of dims: what both sets agree on is taken as the
// order for every value of the dims (autograd's view transposes, the sharding pass).
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "luminal/error.hpp"
#include "luminal/expr.hpp"

namespace luminal {

class ExprProbe {
 public:
  /// `what` starts the error of a comparison the two sets disagree on.
  ExprProbe(const std::vector<Expr>& exprs, std::string what) : what_(std::move(what)) {
    std::set<std::string> names;
    for (Expr e : exprs)
      for (const std::string& v : e.variables()) names.insert(v);
    int64_t k = 0;
    for (const std::string& name : names) {
      const int64_t lo = std::max<int64_t>(Expr(name).lower_bound(), 1);
      small_.set(name, lo + 1 + k);
      large_.set(name, lo + 1000 + 17 * k);
      ++k;
    }
  }

  /// -1, 0 or 1 as a < b, a == b or a > b; throws where the two sets of values disagree.
  int compare(Expr a, Expr b) const {
    const int s = sign(a.eval(small_) - b.eval(small_));
    LUM_CHECK(s == sign(a.eval(large_) - b.eval(large_)))
        << what_ << ": cannot order " << a << " and " << b << " for every value of their dims";
    return s;
  }
  /// Whether `a` is a multiple of `b` (> 0) under both sets of values.
  bool divides(Expr b, Expr a) const {
    return a.eval(small_) % b.eval(small_) == 0 && a.eval(large_) % b.eval(large_) == 0;
  }

 private:
  static int sign(int64_t x) { return (x > 0) - (x < 0); }
  std::string what_;
  Bindings small_, large_;
};

}  // namespace luminal
