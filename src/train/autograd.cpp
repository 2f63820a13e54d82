// Reverse-mode differentiation over the HLIR graph (see luminal/train/autograd.hpp).
//
// Node ids are a topological order (a node's inputs exist before it), so one walk down
// from the loss's id visits every consumer of a node before the node itself: by then
// its gradient is the sum of all its consumers' contributions. A contribution is the
// consumer's rule (gradient_rules.cpp) giving the gradient of the input *as read*, then
// the transpose of the edge's view (view_gradient.cpp) taking it back to the producer's
// own elements.
#include "luminal/train/autograd.hpp"

#include <optional>

#include "luminal/error.hpp"
#include "train/gradient_rules.hpp"
#include "train/view_gradient.hpp"

namespace luminal::train {
namespace {

std::vector<Tensor> differentiate(const Tensor& loss, const std::vector<Tensor>& params,
                                  const Tensor& seed) {
  Graph& g = loss.graph();
  LUM_CHECK(is_float(loss.dtype())) << "gradients: the loss is " << dtype_name(loss.dtype())
                                    << "; it must be a floating-point value";
  LUM_CHECK(&seed.graph() == &g) << "gradients: the seed belongs to another graph";
  LUM_CHECK(seed.shape() == loss.shape())
      << "gradients: the seed's shape " << to_string(seed.shape()) << " differs from the loss's "
      << to_string(loss.shape());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    LUM_CHECK(p.graph_ptr() == &g) << "gradients: parameter " << i << " is not in the loss's graph";
    const Node& n = g.node(p.id());
    LUM_CHECK(p.view() == View::contiguous(n.shape))
        << "gradients: parameter " << i << " (" << (n.name.empty() ? "%" : n.name)
        << (n.name.empty() ? std::to_string(p.id().value) : "")
        << ") is a view of its node; take the gradient of the whole node";
    LUM_CHECK(is_float(n.dtype)) << "gradients: parameter " << i << " is " << dtype_name(n.dtype)
                                 << "; only floating-point values have one";
  }

  // Nodes on a path from a parameter: only they get gradient nodes. The path does not
  // pass through a node that stops gradients (Graph::stop_gradient).
  const uint32_t last = loss.id().value;
  std::vector<bool> needs(last + 1, false);
  for (const Tensor& p : params)
    if (p.id().value <= last) needs[p.id().value] = true;
  for (uint32_t id = 0; id <= last; ++id) {
    if (g.stops_gradient(NodeId{id})) continue;
    for (const Edge& e : g.node(NodeId{id}).inputs)
      if (needs[e.source.value]) needs[id] = true;
  }

  std::vector<std::optional<Tensor>> grads(last + 1);
  auto add = [&](NodeId to, Tensor contribution) {
    const DType dtype = g.node(to).dtype;
    if (contribution.dtype() != dtype) contribution = contribution.cast(dtype);
    std::optional<Tensor>& slot = grads[to.value];
    slot = slot ? *slot + contribution : contribution;
  };
  if (needs[last])
    add(loss.id(), view_gradient(seed.cast(loss.dtype()), loss.view(), g.node(loss.id()).shape));

  for (uint32_t id = last + 1; id-- > 0;) {
    if (!grads[id] || !needs[id]) continue;
    GradientStep step{&g, g.node(NodeId{id}), g.tensor_of(NodeId{id}), *grads[id]};
    std::vector<bool> wanted(step.node.inputs.size());
    bool any = false;
    for (size_t i = 0; i < wanted.size(); ++i) {
      const Node& source = g.node(step.node.inputs[i].source);
      wanted[i] = needs[step.node.inputs[i].source.value] && is_float(source.dtype);
      any = any || wanted[i];
    }
    if (!any) continue;
    const std::vector<std::optional<InputGradient>> parts =
        gradient_rule(step.node.op)(step, wanted);
    for (size_t i = 0; i < wanted.size(); ++i) {
      if (!wanted[i] || i >= parts.size() || !parts[i]) continue;
      const Edge& e = step.node.inputs[i];
      // Dims the rule summed already leave the view (they are broadcast: reading index 0
      // of them reads the same elements).
      Tensor read = step.input(i);
      for (auto d = parts[i]->summed.rbegin(); d != parts[i]->summed.rend(); ++d)
        read = read.slice(*d, 0, 1).squeeze(*d);
      add(e.source, view_gradient(parts[i]->grad, read.view(), g.node(e.source).shape));
    }
  }

  std::vector<Tensor> out;
  out.reserve(params.size());
  for (const Tensor& p : params) {
    const uint32_t id = p.id().value;
    if (id <= last && grads[id])
      out.push_back(*grads[id]);
    else
      out.push_back(g.zeros(std::vector<Expr>(g.node(p.id()).shape), p.dtype()));
  }
  return out;
}

}  // namespace

std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& params) {
  LUM_CHECK(simplify(loss.numel()) == Expr(1))
      << "gradients: the loss has shape " << to_string(loss.shape())
      << "; a loss of more than one element needs a seed gradient of its shape";
  return differentiate(loss, params, loss.graph().full(loss.shape(), 1.0, loss.dtype()));
}

std::vector<Tensor> gradients(const Tensor& loss, const std::vector<Tensor>& params,
                              const Tensor& seed) {
  return differentiate(loss, params, seed);
}

}  // namespace luminal::train
