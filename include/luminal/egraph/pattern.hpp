// Patterns over e-nodes and e-matching.
//
// Syntax (S-expressions): `(Op attr... child...)`. Children are `?name` (any e-class) or
// nested patterns; attributes are literals — integers (`3`, matching Int or Float
// attributes of equal value), floats (`0.5`), strings (`"x"`), dtypes (`#f32`) — or
// `$name` (any attribute). Attributes and children may interleave; each keeps its order.
// On a right-hand side, `(call name arg...)` asks a registered C++ applier for the class.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "luminal/egraph/egraph.hpp"

namespace luminal::eg {

/// Variable names of one rule: ?class variables and $attribute variables.
struct VarTable {
  std::vector<std::string> classes, attrs;
  int class_var(const std::string& name, bool create);
  int attr_var(const std::string& name, bool create);
};

/// The most ?class and $attribute variables one rule may use (each).
inline constexpr int kMaxRuleVars = 16;

/// Bindings of a match: fixed-size, so copying a match allocates nothing. Class entries
/// are invalid and attribute bits clear until bound.
struct Subst {
  std::array<ClassId, kMaxRuleVars> classes{};
  std::array<Attr, kMaxRuleVars> attrs{};
  uint32_t attr_set = 0;  // bit v: attrs[v] is bound
  bool has_attr(int v) const { return (attr_set >> v) & 1u; }
};

/// An argument of a condition or applier call.
struct Value {
  bool is_class = true;
  ClassId c;
  Attr a;
};

struct ArgRef {
  enum class Kind { ClassVar, AttrVar, Literal } kind = Kind::Literal;
  int var = -1;
  Attr literal;
  Value resolve(const Subst& s) const;
};

struct AttrPattern {
  bool is_var = false;
  int var = -1;
  Attr literal;
};

struct PatternNode {
  enum class Kind { Var, Op, Call } kind = Kind::Var;
  int var = -1;                    // Var
  Symbol op;                       // Op
  std::vector<AttrPattern> attrs;  // Op
  std::vector<uint32_t> children;  // Op: child pattern node indices
  std::string call;                // Call: applier name
  std::vector<ArgRef> call_args;   // Call
};

class Pattern {
 public:
  std::vector<PatternNode> nodes;
  uint32_t root = 0;
  /// The root operator, or nullopt for a bare variable / call.
  std::optional<Symbol> root_op() const;
  /// S-expression text.
  std::string to_string(const VarTable& vars) const;
};

/// Parses a pattern from S-expression text (variables added to `vars`).
Pattern parse_pattern(std::string_view text, VarTable& vars);

/// Every substitution under which `p` matches class `c`, extending `base`.
void match_class(const EGraph& g, const Pattern& p, ClassId c, const Subst& base,
                 const std::function<void(const Subst&)>& on_match);
/// A fresh, empty substitution for `vars`.
Subst empty_subst(const VarTable& vars);

using Applier = std::function<std::optional<ClassId>(EGraph&, std::span<const Value>)>;
using Predicate = std::function<bool(const EGraph&, std::span<const Value>)>;

/// Named C++ predicates (for `:if`) and appliers (for `(call ...)`).
struct Functions {
  std::unordered_map<std::string, Predicate> predicates;
  std::unordered_map<std::string, Applier> appliers;
  /// Includes the built-in predicate `distinct` (classes not equivalent).
  Functions();
};

/// Builds the pattern's term in the e-graph under `s`; nullopt if an applier declines.
std::optional<ClassId> instantiate(EGraph& g, const Pattern& p, const Subst& s,
                                   const Functions& fns);

}  // namespace luminal::eg
