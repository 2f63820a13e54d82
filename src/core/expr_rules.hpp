// The simplifier's rule table (private to src/core).
#pragma once

#include <optional>

#include "luminal/expr.hpp"

namespace luminal::expr_detail {

/// Rewrites `e` (whose children are simplified) by the first matching rule whose
/// condition holds; nullopt if none applies. The result is fully simplified.
std::optional<Expr> apply_rules(Expr e);
size_t rule_count();

}  // namespace luminal::expr_detail
