// A library kernel's operand views resolved for the symbolic dims they mention, and
// resolved again only when one of those changes: a decode step's products see the same
// views every step while the context length moves on.
#pragma once

#include <string>
#include <vector>

#include "luminal/graph.hpp"
#include "luminal/view.hpp"

namespace luminal::runtime {

class ResolvedViews {
 public:
  /// The concrete views of `n`'s input edges under `dims`.
  const std::vector<ConcreteView>& get(const Node& n, const Bindings& dims);

 private:
  void note_variables(const View& v);

  bool resolved_ = false;
  std::vector<Expr> vars_;
  std::vector<int64_t> at_;
  std::vector<ConcreteView> views_;
};

}  // namespace luminal::runtime
