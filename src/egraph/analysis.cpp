// The analysis set and the constant-folding and typing analyses.
#include "luminal/egraph/analysis.hpp"

#include <algorithm>
#include <cmath>

#include "luminal/error.hpp"

namespace luminal::eg {

void AnalysisSet::make(const EGraph& g, ClassId c, uint32_t node) {
  for (auto& a : parts_) a->make(g, c, node);
}
bool AnalysisSet::merge(ClassId into, ClassId from) {
  bool changed = false;
  for (auto& a : parts_) changed |= a->merge(into, from);
  return changed;
}
bool AnalysisSet::remake(const EGraph& g, ClassId c, uint32_t node) {
  bool changed = false;
  for (auto& a : parts_) changed |= a->remake(g, c, node);
  return changed;
}
void AnalysisSet::modify(EGraph& g, ClassId c) {
  for (auto& a : parts_) a->modify(g, g.find(c));
}

std::unique_ptr<ConstantFolding> ConstantFolding::arithmetic(Symbol const_op) {
  auto cf = std::make_unique<ConstantFolding>(const_op);
  auto binary = [&](const char* name, double (*f)(double, double)) {
    cf->set_fold(Symbol::of(name), [f](std::span<const double> v) -> std::optional<double> {
      if (v.size() != 2) return std::nullopt;
      return f(v[0], v[1]);
    });
  };
  auto unary = [&](const char* name, double (*f)(double)) {
    cf->set_fold(Symbol::of(name), [f](std::span<const double> v) -> std::optional<double> {
      if (v.size() != 1) return std::nullopt;
      return f(v[0]);
    });
  };
  binary("Add", [](double a, double b) { return a + b; });
  binary("Sub", [](double a, double b) { return a - b; });
  binary("Mul", [](double a, double b) { return a * b; });
  binary("Div", [](double a, double b) { return a / b; });
  binary("Max", [](double a, double b) { return std::max(a, b); });
  binary("Min", [](double a, double b) { return std::min(a, b); });
  unary("Neg", [](double a) { return -a; });
  unary("Recip", [](double a) { return 1.0 / a; });
  return cf;
}

std::optional<double> ConstantFolding::compute(const EGraph& g, uint32_t node) {
  const Symbol op = g.node_op(node);
  if (op == const_op_) {
    const auto& attrs = g.node_attrs(node).get();
    if (attrs.empty()) return std::nullopt;
    return attrs[0].as_float();
  }
  auto it = folds_.find(op.v);
  if (it == folds_.end()) return std::nullopt;
  std::vector<double> values;
  for (ClassId c : g.node_children(node)) {
    const auto& v = data(g.find(c));
    if (!v) return std::nullopt;
    values.push_back(*v);
  }
  return it->second(values);
}

bool ConstantFolding::join(std::optional<double>& into, const std::optional<double>& from) {
  if (!from) return false;
  if (!into) {
    into = from;
    return true;
  }
  const bool same = *into == *from || (std::isnan(*into) && std::isnan(*from));
  LUM_ASSERT(same) << "constant folding: one e-class holds both " << *into << " and " << *from
                   << " (an unsound rewrite)";
  return false;
}

void ConstantFolding::modify(EGraph& g, ClassId c) {
  const auto& v = data(g.find(c));
  if (!v) return;
  const ClassId k = g.add(const_op_, AttrList::of({Attr::of_float(*v)}), {});
  g.merge(c, k);
}

TypeInfo TypeAnalysis::compute(const EGraph& g, uint32_t node) {
  std::vector<TypeInfo> children;
  for (ClassId c : g.node_children(node)) children.push_back(data(g.find(c)));
  return infer_(g.node_op(node), g.node_attrs(node), children);
}

bool TypeAnalysis::join(TypeInfo& into, const TypeInfo& from) {
  if (!from.known) return false;
  if (!into.known) {
    into = from;
    return true;
  }
  LUM_ASSERT(into == from) << "type analysis: one e-class holds " << dtype_name(into.dtype)
                           << to_string(into.shape) << " and " << dtype_name(from.dtype)
                           << to_string(from.shape) << " (an unsound rewrite)";
  return false;
}

}  // namespace luminal::eg
