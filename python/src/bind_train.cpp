// Training in Python (see bindings.hpp): gradients, the optimizers, schedules, clipping,
// loss scaling and checkpoints of luminal::train.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/checkpoint.hpp"
#include "luminal/train/loss_scale.hpp"
#include "luminal/train/optimizer.hpp"
#include "shapes.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace luminal::python {
namespace {

// A learning rate: a number (constant) or a callable of the step (a schedule).
train::Schedule schedule_of(nb::handle lr) {
  if (PyCallable_Check(lr.ptr())) {
    nb::object f = nb::borrow(lr);
    return [f](int64_t step) {
      nb::gil_scoped_acquire held;
      return nb::cast<double>(f(step));
    };
  }
  return train::constant_lr(nb::cast<double>(lr));
}

std::vector<Tensor> tensors_of(nb::handle list) {
  return nb::cast<std::vector<Tensor>>(list);
}

// The optimizer keeps its parameters' and gradients' Python objects (and so the graph).
nb::object kept_optimizer(train::Optimizer opt, nb::handle params, nb::handle grads) {
  nb::object o = nb::cast(std::move(opt));
  nb::detail::keep_alive(o.ptr(), params.ptr());
  nb::detail::keep_alive(o.ptr(), grads.ptr());
  return o;
}

}  // namespace

void bind_train(nb::module_& m) {
  m.def(
      "gradients",
      [](nb::handle loss, nb::handle params, std::optional<Tensor> seed) {
        const Tensor l = nb::cast<Tensor>(loss);
        const std::vector<Tensor> ps = tensors_of(params);
        return tensors_kept_by(loss,
                               seed ? train::gradients(l, ps, *seed) : train::gradients(l, ps));
      },
      "loss"_a, "params"_a, "seed"_a = nb::none(),
      "Adds to the loss's graph the nodes computing d loss / d p for each p of `params` "
      "(whole inputs of the graph) and returns them. The loss is a float scalar, or any "
      "shape with `seed`, the gradient of the loss itself (a vector-Jacobian product). "
      "A parameter the loss does not depend on gets zeros.");

  nb::class_<train::Optimizer>(m, "Optimizer",
                               "An optimizer's update as graph nodes (luminal.sgd, adam, adamw).")
      .def("advance", &train::Optimizer::advance, "counted"_a = true,
           "Hands the run's updated parameters and state to the next run: call after every "
           "Graph.execute() that trains. `counted` False: the run was skipped (its "
           "apply_if was false).")
      .def_prop_ro("steps", &train::Optimizer::steps, "Updates taken.")
      .def_prop_ro("runs", &train::Optimizer::runs, "Runs taken (advance() calls).")
      .def_prop_ro("learning_rate", &train::Optimizer::learning_rate,
                   "The learning rate the next update uses.")
      .def_prop_ro(
          "state", [](const train::Optimizer& o) { return o.state(); },
          "Every value carried from run to run, as (name, Tensor) pairs.")
      .def("resume", &train::Optimizer::resume, "runs"_a,
           "Continues after `runs` runs (a checkpoint's); the state's values are set by "
           "the caller.");

  m.def(
      "sgd",
      [](nb::handle params, nb::handle grads, nb::handle lr, double momentum, double dampening,
         double weight_decay, bool nesterov, int64_t accumulate, std::optional<Tensor> apply_if) {
        train::SgdOptions o{momentum, dampening,  weight_decay,
                            nesterov, accumulate, apply_if.value_or(Tensor())};
        return kept_optimizer(train::sgd(tensors_of(params), tensors_of(grads), schedule_of(lr), o),
                              params, grads);
      },
      "params"_a, "grads"_a, "lr"_a, "momentum"_a = 0.0, "dampening"_a = 0.0,
      "weight_decay"_a = 0.0, "nesterov"_a = false, "accumulate"_a = 1, "apply_if"_a = nb::none(),
      "SGD as torch.optim.SGD, added to the parameters' graph. `lr`: a number or a callable "
      "of the step (luminal.warmup_cosine, ...). `accumulate`: micro-batches a step. "
      "`apply_if`: a bool scalar tensor; where false the run changes nothing "
      "(LossScale.finite).");
  auto adam_like = [](train::Optimizer (*make)(const std::vector<Tensor>&,
                                               const std::vector<Tensor>&, train::Schedule,
                                               train::AdamOptions)) {
    return [make](nb::handle params, nb::handle grads, nb::handle lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t accumulate,
                  std::optional<Tensor> apply_if) {
      train::AdamOptions o{beta1,        beta2,      eps,
                           weight_decay, accumulate, apply_if.value_or(Tensor())};
      return kept_optimizer(make(tensors_of(params), tensors_of(grads), schedule_of(lr), o), params,
                            grads);
    };
  };
  m.def("adam", adam_like(&train::adam), "params"_a, "grads"_a, "lr"_a, "beta1"_a = 0.9,
        "beta2"_a = 0.999, "eps"_a = 1e-8, "weight_decay"_a = 0.0, "accumulate"_a = 1,
        "apply_if"_a = nb::none(),
        "Adam as torch.optim.Adam (see sgd for lr, accumulate, apply_if).");
  m.def("adamw", adam_like(&train::adamw), "params"_a, "grads"_a, "lr"_a, "beta1"_a = 0.9,
        "beta2"_a = 0.999, "eps"_a = 1e-8, "weight_decay"_a = 0.01, "accumulate"_a = 1,
        "apply_if"_a = nb::none(),
        "AdamW as torch.optim.AdamW (see sgd for lr, accumulate, apply_if).");

  m.def("constant_lr", &train::constant_lr, "lr"_a, "The same learning rate every step.");
  m.def("linear_warmup", &train::linear_warmup, "lr"_a, "warmup"_a,
        "A learning rate rising linearly to `lr` over `warmup` steps, then `lr`.");
  m.def("warmup_cosine", &train::warmup_cosine, "lr"_a, "warmup"_a, "total"_a, "min_lr"_a = 0.0,
        "Linear warm-up over `warmup` steps, then cosine decay to `min_lr` at `total`.");

  m.def(
      "clip_grad_norm",
      [](nb::handle grads, double max_norm) {
        const std::vector<Tensor> gs = tensors_of(grads);
        LUM_CHECK(!gs.empty()) << "clip_grad_norm: no gradients";
        return tensors_kept_by(nb::borrow(grads)[0], train::clip_grad_norm(gs, max_norm));
      },
      "grads"_a, "max_norm"_a,
      "The gradients scaled so their joint L2 norm is at most `max_norm` "
      "(torch.nn.utils.clip_grad_norm_).");

  nb::class_<train::LossScale>(
      m, "LossScale", "Dynamic loss scaling for f16 training (torch.amp.GradScaler's rule).")
      .def(
          "__init__",
          [](train::LossScale* self, Graph& g, double initial, double growth, double backoff,
             int64_t interval) {
            new (self) train::LossScale(g, {initial, growth, backoff, interval});
          },
          "graph"_a, "initial"_a = 65536.0, "growth"_a = 2.0, "backoff"_a = 0.5,
          "interval"_a = 2000, nb::keep_alive<1, 2>())
      .def(
          "gradients",
          [](nb::handle self, nb::handle loss, nb::handle params) {
            auto& s = nb::cast<train::LossScale&>(self);
            return tensors_kept_by(loss, s.gradients(nb::cast<Tensor>(loss), tensors_of(params)));
          },
          "loss"_a, "params"_a, "luminal.gradients of loss * scale, divided back by the scale.")
      .def_prop_ro("finite", &train::LossScale::finite,
                   "A bool scalar tensor: the last gradients are all finite (an optimizer's "
                   "apply_if).")
      .def("update", &train::LossScale::update,
           "After Graph.execute(): whether the step's gradients were finite; sets the next "
           "scale. Pass the result to Optimizer.advance.")
      .def_prop_ro("scale", &train::LossScale::scale, "The scale the next run uses.");

  m.def("save_checkpoint", &train::save_checkpoint, "path"_a, "optimizer"_a,
        "Writes the optimizer's parameters, state and run count to a safetensors file.");
  m.def("load_checkpoint", &train::load_checkpoint, "path"_a, "optimizer"_a,
        "Sets the optimizer's parameters and state from a checkpoint and resumes its run "
        "count; a missing or mis-shaped tensor raises luminal.Error before anything is set.");
}

}  // namespace luminal::python
