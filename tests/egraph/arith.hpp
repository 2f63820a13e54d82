// A small arithmetic language for e-graph tests: terms, an evaluator, and the
// predicates the arith.rules file uses.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "luminal/egraph/analysis.hpp"
#include "luminal/egraph/egraph.hpp"
#include "luminal/egraph/extract.hpp"
#include "luminal/egraph/rules.hpp"
#include "luminal/error.hpp"

namespace luminal::eg::testing {

inline Symbol sym(const char* s) {
  return Symbol::of(s);
}

/// An e-graph with arithmetic constant folding over (Const value).
inline std::unique_ptr<EGraph> arith_graph() {
  auto g = std::make_unique<EGraph>();
  g->set_analysis(ConstantFolding::arithmetic(sym("Const")));
  return g;
}

inline const ConstantFolding& folding(const EGraph& g) {
  return dynamic_cast<const ConstantFolding&>(*g.analysis());
}

/// `positive` and `nonzero` on classes with a known constant value.
inline Functions arith_functions() {
  Functions f;
  auto constant = [](const EGraph& g, const Value& v) { return folding(g).data(g.find(v.c)); };
  f.predicates["positive"] = [constant](const EGraph& g, std::span<const Value> a) {
    auto c = constant(g, a[0]);
    return c && *c > 0;
  };
  f.predicates["nonzero"] = [constant](const EGraph& g, std::span<const Value> a) {
    auto c = constant(g, a[0]);
    return c && *c != 0;
  };
  return f;
}

inline ClassId cnst(EGraph& g, double v) {
  return g.add(sym("Const"), AttrList::of({Attr::of_float(v)}), {});
}
inline ClassId var(EGraph& g, const char* name) {
  return g.add(sym("Var"), AttrList::of({Attr::of_str(name)}), {});
}
inline ClassId op(EGraph& g, const char* name, std::initializer_list<ClassId> children) {
  std::vector<ClassId> c(children);
  return g.add(sym(name), AttrList{}, c);
}

/// Evaluates an extracted term with variable values.
inline double evaluate(const EGraph& g, const Extraction& x, ClassId c,
                       const std::map<std::string, double>& vars) {
  const uint32_t n = x.node_for(g.find(c));
  const std::string name(g.node_op(n).name());
  const auto ch = g.node_children(n);
  auto arg = [&](size_t k) { return evaluate(g, x, ch[k], vars); };
  if (name == "Const") return g.node_attrs(n).get()[0].as_float();
  if (name == "Var") {
    const Attr a = g.node_attrs(n).get()[0];
    return vars.at(std::string(Symbol{static_cast<uint32_t>(a.bits)}.name()));
  }
  if (name == "Add") return arg(0) + arg(1);
  if (name == "Sub") return arg(0) - arg(1);
  if (name == "Mul") return arg(0) * arg(1);
  if (name == "Div") return arg(0) / arg(1);
  if (name == "Neg") return -arg(0);
  if (name == "Recip") return 1.0 / arg(0);
  if (name == "Exp2") return std::exp2(arg(0));
  if (name == "Log2") return std::log2(arg(0));
  LUM_FAIL() << "evaluate: unknown op " << name;
}

}  // namespace luminal::eg::testing
