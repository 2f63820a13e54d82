// The rule-language parser.
#include "luminal/egraph/rules.hpp"

#include "egraph/pattern_parse.hpp"
#include "luminal/error.hpp"

namespace luminal::eg {
namespace {

class RuleParser {
 public:
  RuleParser(std::string_view source, const Functions& fns) : source_(source), fns_(fns) {}

  RuleSet ruleset(const SExpr& e) {
    LUM_CHECK(e.kind == SExpr::Kind::List && !e.items.empty() && e.items[0].is_atom("ruleset"))
        << where(source_, e) << "expected (ruleset NAME rule...)";
    LUM_CHECK(e.items.size() >= 2 && e.items[1].kind == SExpr::Kind::Atom)
        << where(source_, e) << "ruleset needs a name";
    RuleSet rs;
    rs.name = e.items[1].text;
    for (size_t k = 2; k < e.items.size(); ++k) {
      const SExpr& r = e.items[k];
      LUM_CHECK(r.kind == SExpr::Kind::List && !r.items.empty() &&
                r.items[0].kind == SExpr::Kind::Atom)
          << where(source_, r) << "expected a rule";
      const std::string& kind = r.items[0].text;
      if (kind == "rewrite") {
        rs.rules.push_back(rewrite(r, false));
      } else if (kind == "birewrite") {
        rs.rules.push_back(rewrite(r, false));
        rs.rules.push_back(rewrite(r, true));
      } else if (kind == "rule") {
        rs.rules.push_back(multi(r));
      } else {
        LUM_FAIL() << where(source_, r.items[0]) << "unknown rule kind '" << kind
                   << "' (expected rewrite, birewrite or rule)";
      }
    }
    return rs;
  }

 private:
  // Splits off trailing `:if (cond)` clauses; returns the index where they start.
  size_t conditions(const SExpr& r, size_t from, Rule& rule) {
    size_t k = from;
    while (k < r.items.size() && !r.items[k].is_atom(":if")) ++k;
    for (size_t c = k; c < r.items.size(); c += 2) {
      LUM_CHECK(r.items[c].is_atom(":if")) << where(source_, r.items[c]) << "expected :if";
      LUM_CHECK(c + 1 < r.items.size()) << where(source_, r.items[c]) << ":if needs a condition";
      const SExpr& cond = r.items[c + 1];
      LUM_CHECK(cond.kind == SExpr::Kind::List && !cond.items.empty() &&
                cond.items[0].kind == SExpr::Kind::Atom)
          << where(source_, cond) << "a condition is (predicate args...)";
      Condition out;
      out.name = cond.items[0].text;
      LUM_CHECK(fns_.predicates.count(out.name))
          << where(source_, cond.items[0]) << "unknown predicate '" << out.name << "'";
      for (size_t a = 1; a < cond.items.size(); ++a)
        out.args.push_back(arg_from_sexpr(cond.items[a], rule.vars, source_));
      rule.conditions.push_back(std::move(out));
    }
    return k;
  }

  void check_appliers(const Pattern& p, const SExpr& at) {
    for (const PatternNode& n : p.nodes)
      LUM_CHECK(n.kind != PatternNode::Kind::Call || fns_.appliers.count(n.call))
          << where(source_, at) << "unknown applier '" << n.call << "'";
  }

  Rule rewrite(const SExpr& r, bool reversed) {
    LUM_CHECK(r.items.size() >= 4 && r.items[1].kind == SExpr::Kind::Atom)
        << where(source_, r) << "expected (" << r.items[0].text << " NAME LHS RHS [:if COND]...)";
    Rule rule;
    rule.name = r.items[1].text + (reversed ? "-rev" : "");
    rule.location = where(source_, r);
    const SExpr& lhs = reversed ? r.items[3] : r.items[2];
    const SExpr& rhs = reversed ? r.items[2] : r.items[3];
    rule.searchers.push_back(pattern_from_sexpr(lhs, rule.vars, source_, false));
    LUM_CHECK(rule.searchers[0].root_op())
        << where(source_, lhs) << "a left-hand side must be an operator pattern";
    Pattern out = pattern_from_sexpr(rhs, rule.vars, source_, true);
    check_appliers(out, rhs);
    rule.union_with_root = true;
    rule.unions.emplace_back(Pattern{}, std::move(out));
    const size_t end = conditions(r, 4, rule);
    LUM_CHECK(end == 4) << where(source_, r.items[4]) << "unexpected '" << r.items[4].text
                        << "' after the right-hand side";
    return rule;
  }

  Rule multi(const SExpr& r) {
    LUM_CHECK(r.items.size() >= 4 && r.items[1].kind == SExpr::Kind::Atom &&
              r.items[2].kind == SExpr::Kind::List)
        << where(source_, r) << "expected (rule NAME (PATTERN...) (union A B)... [:if COND]...)";
    Rule rule;
    rule.name = r.items[1].text;
    rule.location = where(source_, r);
    for (const SExpr& p : r.items[2].items) {
      rule.searchers.push_back(pattern_from_sexpr(p, rule.vars, source_, false));
      LUM_CHECK(rule.searchers.back().root_op())
          << where(source_, p) << "each searched pattern must be an operator pattern";
    }
    LUM_CHECK(!rule.searchers.empty()) << where(source_, r.items[2]) << "no patterns to search";
    const size_t end = conditions(r, 3, rule);
    for (size_t k = 3; k < end; ++k) {
      const SExpr& a = r.items[k];
      LUM_CHECK(a.kind == SExpr::Kind::List && a.items.size() == 3 && a.items[0].is_atom("union"))
          << where(source_, a) << "an action is (union TERM TERM)";
      Pattern x = pattern_from_sexpr(a.items[1], rule.vars, source_, true);
      Pattern y = pattern_from_sexpr(a.items[2], rule.vars, source_, true);
      check_appliers(x, a);
      check_appliers(y, a);
      rule.unions.emplace_back(std::move(x), std::move(y));
    }
    LUM_CHECK(!rule.unions.empty()) << where(source_, r) << "a rule needs at least one action";
    return rule;
  }

  std::string_view source_;
  const Functions& fns_;
};

}  // namespace

std::vector<RuleSet> parse_rules(std::string_view text, std::string_view source,
                                 const Functions& fns) {
  RuleParser p(source, fns);
  std::vector<RuleSet> out;
  for (const SExpr& e : read_sexprs(text, source)) out.push_back(p.ruleset(e));
  return out;
}

std::vector<RuleSet> load_embedded_rules(const std::string& file, const Functions& fns) {
  const auto& files = embedded_rule_files();
  auto it = files.find(file);
  if (it == files.end()) {
    std::string names;
    for (const auto& [name, text] : files) names += (names.empty() ? "" : ", ") + name;
    LUM_FAIL() << "no embedded rule file '" << file << "' (have: " << names << ")";
  }
  return parse_rules(it->second, file + ".rules", fns);
}

}  // namespace luminal::eg
