// The saturation loop with per-rule back-off.
#include "luminal/egraph/scheduler.hpp"

#include <chrono>
#include <iomanip>
#include <sstream>
#include <unordered_map>

#include "luminal/error.hpp"

namespace luminal::eg {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Classes holding at least one node of each operator: the roots worth searching.
std::unordered_map<uint32_t, std::vector<ClassId>> index_by_op(const EGraph& g) {
  std::unordered_map<uint32_t, std::vector<ClassId>> index;
  for (ClassId c : g.classes()) {
    uint32_t last = UINT32_MAX;
    for (uint32_t n : g.node_ids(c)) {
      const uint32_t op = g.node_op(n).v;
      if (op == last) continue;
      auto& v = index[op];
      if (v.empty() || v.back() != c) v.push_back(c);
      last = op;
    }
  }
  return index;
}

bool conditions_hold(const EGraph& g, const Rule& rule, const Subst& s, const Functions& fns) {
  for (const Condition& c : rule.conditions) {
    std::vector<Value> args;
    for (const ArgRef& a : c.args) args.push_back(a.resolve(s));
    if (!fns.predicates.at(c.name)(g, args)) return false;
  }
  return true;
}

// Matches stored flat: per match a root and the rule's bound variables.
struct Matches {
  size_t class_vars = 0, attr_vars = 0;
  std::vector<ClassId> roots, classes;
  std::vector<Attr> attrs;
  size_t size() const { return roots.size(); }
  void add(ClassId root, const Subst& s) {
    roots.push_back(root);
    classes.insert(classes.end(), s.classes.begin(),
                   s.classes.begin() + static_cast<std::ptrdiff_t>(class_vars));
    attrs.insert(attrs.end(), s.attrs.begin(),
                 s.attrs.begin() + static_cast<std::ptrdiff_t>(attr_vars));
  }
  void load(size_t i, Subst& s) const {
    std::copy_n(classes.begin() + static_cast<std::ptrdiff_t>(i * class_vars), class_vars,
                s.classes.begin());
    std::copy_n(attrs.begin() + static_cast<std::ptrdiff_t>(i * attr_vars), attr_vars,
                s.attrs.begin());
    s.attr_set = attr_vars >= 32 ? ~0u : (1u << attr_vars) - 1;
  }
  void clear() {
    roots.clear();
    classes.clear();
    attrs.clear();
  }
};

// All substitutions of a rule's searchers (several patterns are joined on shared
// variables by matching each next pattern at every candidate root under the bindings).
Matches search(const EGraph& g, const Rule& rule,
               const std::unordered_map<uint32_t, std::vector<ClassId>>& index) {
  Matches out;
  out.class_vars = rule.vars.classes.size();
  out.attr_vars = rule.vars.attrs.size();
  std::function<void(size_t, const Subst&, ClassId)> step = [&](size_t k, const Subst& s,
                                                                ClassId root) {
    if (k == rule.searchers.size()) {
      out.add(root, s);
      return;
    }
    const Pattern& p = rule.searchers[k];
    auto it = index.find(p.root_op()->v);
    if (it == index.end()) return;
    for (ClassId c : it->second)
      match_class(g, p, c, s, [&](const Subst& m) { step(k + 1, m, k == 0 ? c : root); });
  };
  step(0, empty_subst(rule.vars), ClassId{});
  return out;
}

uint64_t apply(EGraph& g, const Rule& rule, const Matches& matches, const Functions& fns) {
  uint64_t unions = 0;
  Subst s;
  for (size_t i = 0; i < matches.size(); ++i) {
    matches.load(i, s);
    if (!conditions_hold(g, rule, s, fns)) continue;
    for (const auto& [lhs, rhs] : rule.unions) {
      std::optional<ClassId> a = rule.union_with_root ? std::optional<ClassId>(matches.roots[i])
                                                      : instantiate(g, lhs, s, fns);
      if (!a) continue;
      std::optional<ClassId> b = instantiate(g, rhs, s, fns);
      if (b && g.merge(*a, *b)) ++unions;
    }
  }
  return unions;
}

}  // namespace

std::string_view stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Saturated:
      return "saturated";
    case StopReason::IterationLimit:
      return "iteration limit";
    case StopReason::NodeLimit:
      return "node limit";
    case StopReason::TimeLimit:
      return "time limit";
  }
  return "?";
}

std::pair<uint64_t, uint64_t> apply_rule(EGraph& g, const Rule& rule, const Functions& fns) {
  LUM_CHECK(g.clean()) << "apply_rule: rebuild() the e-graph first";
  const auto matches = search(g, rule, index_by_op(g));
  return {matches.size(), apply(g, rule, matches, fns)};
}

RunReport run_rules(EGraph& g, const std::vector<const RuleSet*>& sets, const Functions& fns,
                    const RunLimits& limits) {
  const auto start = Clock::now();
  std::vector<const Rule*> rules;
  for (const RuleSet* s : sets)
    for (const Rule& r : s->rules) rules.push_back(&r);
  RunReport report;
  report.rules.resize(rules.size());
  for (size_t i = 0; i < rules.size(); ++i) report.rules[i].name = rules[i]->name;
  std::vector<size_t> banned_until(rules.size(), 0);
  g.rebuild();

  for (size_t iter = 0;; ++iter) {
    if (iter >= limits.max_iterations) {
      report.reason = StopReason::IterationLimit;
      break;
    }
    const auto iter_start = Clock::now();
    IterationStats st;
    const auto index = index_by_op(g);
    // Search everything first, then apply: matches see one consistent e-graph.
    std::vector<Matches> found(rules.size());
    bool any_banned = false;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (banned_until[i] > iter) {
        any_banned = true;
        continue;
      }
      RuleStats& rs = report.rules[i];
      const auto t = Clock::now();
      found[i] = search(g, *rules[i], index);
      rs.search_seconds += since(t);
      const size_t threshold = limits.match_limit << rs.times_banned;
      if (limits.match_limit && found[i].size() > threshold) {
        banned_until[i] = iter + 1 + (limits.ban_length << rs.times_banned);
        ++rs.times_banned;
        found[i].clear();
        any_banned = true;
      }
    }
    for (size_t i = 0; i < rules.size(); ++i) {
      if (found[i].size() == 0) continue;
      RuleStats& rs = report.rules[i];
      const auto t = Clock::now();
      const uint64_t u = apply(g, *rules[i], found[i], fns);
      rs.apply_seconds += since(t);
      rs.matches += found[i].size();
      rs.unions += u;
      st.matches += found[i].size();
      st.unions += u;
    }
    const auto rebuild_start = Clock::now();
    st.repairs = g.rebuild();
    st.rebuild_seconds = since(rebuild_start);
    st.nodes = g.num_nodes();
    st.classes = g.num_classes();
    st.seconds = since(iter_start);
    report.iterations.push_back(st);
    const bool grew = report.iterations.size() < 2 ||
                      st.nodes != report.iterations[report.iterations.size() - 2].nodes;
    if (st.unions == 0 && !grew && !any_banned) {
      report.reason = StopReason::Saturated;
      break;
    }
    if (g.num_nodes() > limits.max_nodes) {
      report.reason = StopReason::NodeLimit;
      break;
    }
    if (since(start) > limits.max_seconds) {
      report.reason = StopReason::TimeLimit;
      break;
    }
  }
  report.seconds = since(start);
  return report;
}

std::string RunReport::to_string() const {
  std::ostringstream os;
  os << "saturation: " << stop_reason_name(reason) << " after " << iterations.size()
     << " iterations, " << std::fixed << std::setprecision(3) << seconds << " s\n";
  os << "  iter    nodes  classes  matches   unions  repairs      ms  rebuild ms\n";
  for (size_t i = 0; i < iterations.size(); ++i) {
    const auto& it = iterations[i];
    os << std::setw(6) << i << std::setw(9) << it.nodes << std::setw(9) << it.classes
       << std::setw(9) << it.matches << std::setw(9) << it.unions << std::setw(9) << it.repairs
       << std::setw(8) << std::setprecision(2) << it.seconds * 1e3 << std::setw(12)
       << it.rebuild_seconds * 1e3 << "\n";
  }
  os << "  rule                         matches   unions  banned  search ms  apply ms\n";
  for (const auto& r : rules) {
    os << "  " << std::left << std::setw(28) << r.name << std::right << std::setw(9) << r.matches
       << std::setw(9) << r.unions << std::setw(8) << r.times_banned << std::setw(11)
       << std::setprecision(2) << r.search_seconds * 1e3 << std::setw(10) << r.apply_seconds * 1e3
       << "\n";
  }
  return os.str();
}

}  // namespace luminal::eg
