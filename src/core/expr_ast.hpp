// A small syntax tree for the infix expression language shared by parse_expr and
// the simplifier's rule table (private to src/core).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "luminal/expr.hpp"

namespace luminal::expr_detail {

struct Ast {
  enum class Kind { Num, Ident, Unary, Binary, Call } kind = Kind::Num;
  int64_t value = 0;  // Num
  std::string name;   // Ident name, Call function, or the operator spelling
  std::vector<Ast> kids;
};

/// Parses `text`; throws luminal::Error naming the column of a syntax error.
Ast parse_ast(std::string_view text);

/// Builds the Expr an AST denotes; `ident` resolves identifiers.
Expr instantiate(const Ast& ast, const std::function<Expr(const std::string&)>& ident);

}  // namespace luminal::expr_detail
