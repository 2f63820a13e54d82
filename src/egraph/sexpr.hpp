// A small S-expression reader with line:column positions (private to src/egraph).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace luminal::eg {

struct SExpr {
  enum class Kind { Atom, String, List } kind = Kind::Atom;
  std::string text;  // Atom / String
  std::vector<SExpr> items;
  int line = 1, col = 1;
  bool is_atom(std::string_view s) const { return kind == Kind::Atom && text == s; }
};

/// Reads every top-level form; `;` starts a comment. Throws luminal::Error as
/// "source:line:col: message".
std::vector<SExpr> read_sexprs(std::string_view text, std::string_view source);

/// "source:line:col: " for error messages.
std::string where(std::string_view source, const SExpr& e);

}  // namespace luminal::eg
