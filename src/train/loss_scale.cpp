// Dynamic loss scaling (see luminal/train/loss_scale.hpp).
#include "luminal/train/loss_scale.hpp"

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/train/autograd.hpp"

namespace luminal::train {

LossScale::LossScale(Graph& graph, LossScaleOptions o)
    : graph_(&graph), options_(o), scale_(o.initial) {
  LUM_CHECK(o.initial > 0 && o.growth >= 1 && o.backoff > 0 && o.backoff < 1 && o.interval >= 1)
      << "LossScale: needs initial > 0, growth >= 1, 0 < backoff < 1 and interval >= 1";
  scale_input_ = graph.named_tensor("loss_scale", {});
  scale_input_.set(std::vector<float>{static_cast<float>(scale_)});
}

std::vector<Tensor> LossScale::gradients(const Tensor& loss, const std::vector<Tensor>& params) {
  LUM_CHECK(loss.graph_ptr() == graph_) << "LossScale: the loss is in another graph";
  const Tensor seed = scale_input_.cast(loss.dtype()).broadcast_to(loss.shape());
  std::vector<Tensor> grads = train::gradients(loss, params, seed);
  // x - x is 0 for every finite x and NaN for an infinity or a NaN: one sum tells.
  std::optional<Tensor> bad;
  for (Tensor& g : grads) {
    g = g / scale_input_.cast(g.dtype());
        const Tensor x = g.cast(DType::F32);
    const Tensor zero = (x - x).sum();  // every axis
    bad = bad ? *bad + zero : zero;
  }
  // (Comparisons with NaN are false; eq is not a primitive and would say true.)
  finite_ = logical_and(lt(*bad, 0.5), gt(*bad, -0.5));
  finite_.keep();
  return grads;
}

const Tensor& LossScale::finite() const {
  LUM_CHECK(finite_.graph_ptr()) << "LossScale: finite() before gradients(); take the "
                                    "gradients in a statement of their own first";
  return finite_;
}

bool LossScale::update() {
  LUM_CHECK(finite_.graph_ptr()) << "LossScale: update() before gradients()";
  const bool ok = finite_.data().to_f64()[0] != 0;
  if (!ok) {
    scale_ *= options_.backoff;
    good_ = 0;
  } else if (++good_ >= options_.interval) {
    scale_ *= options_.growth;
    good_ = 0;
  }
  scale_input_.set(std::vector<float>{static_cast<float>(scale_)});
  return ok;
}

}  // namespace luminal::train
