// Operand views resolved once per change of their dims (see resolved_views.hpp).
#include "runtime/resolved_views.hpp"

#include <algorithm>

namespace luminal::runtime {

const std::vector<ConcreteView>& ResolvedViews::get(const Node& n, const Bindings& dims) {
  if (!resolved_)
    for (const Edge& e : n.inputs) note_variables(e.view);
  bool same = resolved_;
  for (size_t i = 0; same && i < vars_.size(); ++i) same = vars_[i].eval(dims) == at_[i];
  if (same) return views_;
  views_.resize(n.inputs.size());
  for (size_t i = 0; i < n.inputs.size(); ++i) n.inputs[i].view.resolve_into(dims, views_[i]);
  for (size_t i = 0; i < vars_.size(); ++i) at_[i] = vars_[i].eval(dims);
  resolved_ = true;
  return views_;
}

void ResolvedViews::note_variables(const View& v) {
  std::vector<Expr> exprs = v.shape();
  exprs.insert(exprs.end(), v.strides().begin(), v.strides().end());
  exprs.push_back(v.offset());
  for (size_t d = 0; d < v.rank(); ++d) {
    exprs.push_back(v.mask_lo(d));
    exprs.push_back(v.mask_hi(d));
  }
  for (Expr e : exprs)
    for (const std::string& name : e.variables())
      if (std::find(vars_.begin(), vars_.end(), Expr::var(name)) == vars_.end())
        vars_.push_back(Expr::var(name));
  at_.assign(vars_.size(), 0);
}

}  // namespace luminal::runtime
