// Rewrite rules and the rule language.
//
//   ; a comment
//   (ruleset algebra
//     (rewrite add-zero (Add ?a (Const 0)) ?a)                ; lhs => rhs
//     (birewrite add-assoc (Add (Add ?a ?b) ?c) (Add ?a (Add ?b ?c)))  ; both ways
//     (rewrite fold (Mul ?a ?b) (call fold-mul ?a ?b) :if (both-const ?a ?b))
//     (rule distribute ((Mul ?a ?s) (Add ?x ?y))              ; several patterns, joined
//           (union ?s (Add ?x ?y))                            ; actions
//           (union (Mul ?a ?s) (Add (Mul ?a ?x) (Mul ?a ?y)))))
//
// `:if (name args...)` calls a registered C++ predicate; `(call name args...)` a
// registered applier. Unknown names, unbound variables and syntax errors are reported
// as source:line:col.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "luminal/egraph/pattern.hpp"

namespace luminal::eg {

struct Condition {
  std::string name;
  std::vector<ArgRef> args;
};

struct Rule {
  std::string name;
  std::string location;  // source:line:col
  VarTable vars;
  std::vector<Pattern> searchers;  // one for a rewrite; several for a multi-pattern rule
  /// Each action unions two terms; for a rewrite the first is the matched root.
  std::vector<std::pair<Pattern, Pattern>> unions;
  bool union_with_root = false;  // rewrite: union the match root with unions[k].second
  std::vector<Condition> conditions;
};

struct RuleSet {
  std::string name;
  std::vector<Rule> rules;
};

/// Parses rule text; every `(ruleset NAME ...)` becomes one RuleSet. Predicate and
/// applier names are checked against `fns`.
std::vector<RuleSet> parse_rules(std::string_view text, std::string_view source,
                                 const Functions& fns);

/// Rule files compiled into the binary (CMake embeds src/**/rules/*.rules): file name
/// without extension -> text.
const std::map<std::string, std::string_view>& embedded_rule_files();

/// Parses an embedded file by name; throws luminal::Error listing the names if absent.
std::vector<RuleSet> load_embedded_rules(const std::string& file, const Functions& fns);

}  // namespace luminal::eg
