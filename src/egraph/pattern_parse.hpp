// Pattern construction from S-expressions (private to src/egraph).
#pragma once

#include "egraph/sexpr.hpp"
#include "luminal/egraph/pattern.hpp"

namespace luminal::eg {

/// `rhs` allows (call ...); on the left-hand side every variable is created, on the
/// right it must already be bound. Errors carry source:line:col.
Pattern pattern_from_sexpr(const SExpr& e, VarTable& vars, std::string_view source, bool rhs);

/// An argument (?x, $k or literal) of a condition or call.
ArgRef arg_from_sexpr(const SExpr& e, VarTable& vars, std::string_view source);

/// A literal attribute token (number, string, #dtype); nullopt if not one.
std::optional<Attr> literal_attr(const SExpr& e);

}  // namespace luminal::eg
