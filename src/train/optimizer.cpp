// Optimizers as graph nodes (see luminal/train/optimizer.hpp). Each update follows
// torch.optim's arithmetic step for step, so the same initial weights and gradients give
// the same weights; what changes from step to step (the learning rate, Adam's bias
// corrections) are scalar inputs computed on the host in double precision.
#include "luminal/train/optimizer.hpp"

#include <cmath>
#include <numbers>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace luminal::train {

Schedule constant_lr(double lr) {
  return [lr](int64_t) { return lr; };
}

Schedule linear_warmup(double lr, int64_t warmup) {
  LUM_CHECK(warmup >= 0) << "linear_warmup: negative warm-up " << warmup;
  return [lr, warmup](int64_t step) {
    return step < warmup ? lr * static_cast<double>(step + 1) / static_cast<double>(warmup) : lr;
  };
}

Schedule warmup_cosine(double lr, int64_t warmup, int64_t total, double min_lr) {
  LUM_CHECK(warmup >= 0 && total > warmup)
      << "warmup_cosine: needs 0 <= warm-up (" << warmup << ") < total steps (" << total << ")";
  return [=](int64_t step) {
    if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    if (step >= total) return min_lr;
    const double done = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * done));
  };
}

Optimizer::Optimizer(Graph& graph, std::vector<Carry> carries,
                     std::vector<std::pair<std::string, Tensor>> named, Schedule schedule,
                     Scalars set_scalars, int64_t accumulate, Tensor apply)
    : graph_(&graph),
      carries_(std::move(carries)),
      named_(std::move(named)),
      schedule_(std::move(schedule)),
      set_scalars_(std::move(set_scalars)),
      accumulate_(accumulate),
      apply_(std::move(apply)) {
  // The updated values stay where the run leaves them (a GPU's memory) until advance().
  for (const Carry& c : carries_) graph_->keep_on_device(c.updated.id());
  refresh_scalars();
}

void Optimizer::refresh_scalars() {
  set_scalars_(*this);
  if (apply_.graph_ptr()) set_scalar(apply_, (runs_ + 1) % accumulate_ == 0 ? 1.0 : 0.0);
}

void Optimizer::set_scalar(const Tensor& input, double value) {
  Tensor(input).set(std::vector<float>{static_cast<float>(value)});
}

void Optimizer::advance(bool counted) {
  for (const Carry& c : carries_) {
    const NodeId from = c.updated.id(), to = c.input.id();
    if (auto on_device = graph_->take_device_data(from)) {
      graph_->set_device_data(to, std::move(*on_device));
      continue;
    }
    auto data = graph_->take_data(from);
    LUM_CHECK(data) << "optimizer: no updated value of " << graph_->node(to).name
                    << " to carry over: advance() follows an execute()";
    graph_->set_data(to, std::move(*data));
  }
  if (counted) ++runs_;
  refresh_scalars();
}

void Optimizer::resume(int64_t runs) {
  LUM_CHECK(runs >= 0) << "optimizer: cannot resume after " << runs << " runs";
  runs_ = runs;
  refresh_scalars();
}

namespace {

// What every optimizer checks and builds: its parameters, their state inputs (zeros to
// start), the scalar inputs and the carries.
struct Builder {
  Graph& g;
  int64_t accumulate;
  std::vector<Optimizer::Carry> carries;
  std::vector<std::pair<std::string, Tensor>> named;
  Tensor apply;      // 1 on the runs that update (micro-batches only)
  Tensor condition;  // apply_if: false, nothing changes

  Builder(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const char* what,
          int64_t micro_batches, const Tensor& apply_if)
      : g(params.empty() ? throw Error(std::string(what) + ": no parameters") : params[0].graph()),
        accumulate(micro_batches),
        condition(apply_if) {
    LUM_CHECK(accumulate >= 1) << what << ": accumulate must be at least 1, got " << accumulate;
    LUM_CHECK(!condition.graph_ptr() ||
              (condition.graph_ptr() == &g && condition.dtype() == DType::Bool &&
               simplify(condition.numel()) == Expr(1)))
        << what << ": apply_if must be a bool scalar of the parameters' graph";
    if (accumulate > 1) apply = scalar("apply");
    LUM_CHECK(params.size() == grads.size())
        << what << ": " << params.size() << " parameters but " << grads.size() << " gradients";
    for (size_t i = 0; i < params.size(); ++i) {
      const Node& n = g.node(params[i].id());
      LUM_CHECK(params[i].graph_ptr() == &g && grads[i].graph_ptr() == &g)
          << what << ": parameter " << i << " or its gradient is in another graph";
      LUM_CHECK(n.op == Op::Input && params[i].view() == View::contiguous(n.shape))
          << what << ": parameter " << i << " is not a whole input node";
      LUM_CHECK(is_float(n.dtype))
          << what << ": parameter " << n.name << " is " << dtype_name(n.dtype);
      LUM_CHECK(grads[i].shape() == params[i].shape())
          << what << ": the gradient of " << n.name << " has shape " << to_string(grads[i].shape())
          << ", the parameter " << to_string(params[i].shape());
      named.emplace_back(n.name, params[i]);
    }
  }

  Tensor scalar(const std::string& name) { return g.named_tensor("optimizer." + name, {}); }

  // A state input of `p`'s shape and type, zeros to start.
  Tensor state(const Tensor& p, const std::string& slot) {
        const Node n = g.node(p.id());  // a copy: adding the state's node may move the graph's
        for (const Expr& d : n.shape)
      LUM_CHECK(simplify(d).as_const()) << "optimizer: parameter " << n.name
                                        << " has a symbolic shape " << to_string(n.shape);
    const int64_t count = simplify(product(n.shape)).eval();
    const std::string name = n.name + "." + slot;
    Tensor s = g.named_tensor(name, n.shape, n.dtype);
    s.set_buffer(Buffer::from_doubles(std::vector<double>(static_cast<size_t>(count), 0.0), n.dtype));
    named.emplace_back(name, s);
    return s;
  }

  // A value the update changes: with micro-batches, on the runs that update only.
  void carry(const Tensor& input, const Tensor& updated) {
    Tensor next = updated.cast(input.dtype());
    if (accumulate > 1) next = where(gt(apply, 0.5), next, input);
    if (condition.graph_ptr()) next = where(condition.reshape({}), next, input);
    carries.push_back({input, next});
  }

  // The gradient an update uses: with micro-batches, the mean of this run's and those
  // summed since the last update (a state slot, cleared by each update).
  Tensor gradient(const Tensor& p, const Tensor& grad) {
    const Tensor d = grad.cast(p.dtype());
    if (accumulate == 1) return d;
    const Tensor sum = state(p, "grad_sum");
    const Tensor total = sum + d;
    // A skipped run (apply_if false) adds nothing to the sum.
    const Tensor kept = condition.graph_ptr() ? where(condition.reshape({}), total, sum) : total;
    carries.push_back({sum, where(gt(apply, 0.5), 0.0, kept)});
    return total * (1.0 / static_cast<double>(accumulate));
  }

  Optimizer finish(Schedule schedule, Optimizer::Scalars scalars) {
    return Optimizer(g, std::move(carries), std::move(named), std::move(schedule),
                     std::move(scalars), accumulate, apply);
  }
};

// A scalar input read in a tensor's type.
Tensor as(const Tensor& scalar, const Tensor& like) {
  return scalar.cast(like.dtype());
}

}  // namespace

Optimizer sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, Schedule lr,
              SgdOptions o) {
  Builder b(params, grads, "sgd", o.accumulate, o.apply_if);
  LUM_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0))
      << "sgd: Nesterov momentum needs a momentum and zero dampening";
  const Tensor rate = b.scalar("lr"), first = b.scalar("first");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    Tensor d = b.gradient(p, grads[i]);
    if (o.weight_decay != 0) d = d + p * o.weight_decay;
    if (o.momentum != 0) {
      // The buffer starts as the first gradient itself (torch: no dampening then).
      const Tensor buffer = b.state(p, "momentum_buffer");
      const Tensor next = where(gt(first, 0.5), d, buffer * o.momentum + d * (1.0 - o.dampening));
      b.carry(buffer, next);
      d = o.nesterov ? d + next * o.momentum : next;
    }
    b.carry(p, p - d * as(rate, p));
  }
  return b.finish(lr, [rate, first, lr](Optimizer& opt) {
    opt.set_scalar(rate, lr(opt.steps()));
    opt.set_scalar(first, opt.steps() == 0 ? 1.0 : 0.0);
  });
}

namespace {

Optimizer adam_like(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    Schedule lr, AdamOptions o, bool decoupled, const char* what) {
  Builder b(params, grads, what, o.accumulate, o.apply_if);
  LUM_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.eps >= 0)
      << what << ": betas must lie in [0, 1) and eps be non-negative (got " << o.beta1 << ", "
      << o.beta2 << ", " << o.eps << ")";
  // step_size = lr / (1 - beta1^t), inv_root = 1 / sqrt(1 - beta2^t), decay = 1 - lr wd.
  const Tensor step_size = b.scalar("step_size"), inv_root = b.scalar("inv_sqrt_bias2"),
               decay = b.scalar("decay");
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i];
    Tensor d = b.gradient(p, grads[i]);
    if (o.weight_decay != 0 && !decoupled) d = d + p * o.weight_decay;
    Tensor kept = decoupled && o.weight_decay != 0 ? p * as(decay, p) : p;
    const Tensor m = b.state(p, "exp_avg"), v = b.state(p, "exp_avg_sq");
    const Tensor m_next = m * o.beta1 + d * (1.0 - o.beta1);
    const Tensor v_next = v * o.beta2 + d * d * (1.0 - o.beta2);
    const Tensor denom = v_next.sqrt() * as(inv_root, p) + o.eps;
    b.carry(m, m_next);
    b.carry(v, v_next);
    b.carry(p, kept - as(step_size, p) * m_next / denom);
  }
  return b.finish(lr, [=](Optimizer& opt) {
    const double t = static_cast<double>(opt.steps() + 1), rate = lr(opt.steps());
    opt.set_scalar(step_size, rate / (1.0 - std::pow(o.beta1, t)));
    opt.set_scalar(inv_root, 1.0 / std::sqrt(1.0 - std::pow(o.beta2, t)));
    opt.set_scalar(decay, 1.0 - rate * o.weight_decay);
  });
}

}  // namespace

Optimizer adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, Schedule lr,
               AdamOptions options) {
  return adam_like(params, grads, std::move(lr), options, false, "adam");
}

Optimizer adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, Schedule lr,
                AdamOptions options) {
  return adam_like(params, grads, std::move(lr), options, true, "adamw");
}

Tensor global_norm(const std::vector<Tensor>& tensors) {
  LUM_CHECK(!tensors.empty()) << "global_norm: no tensors";
  std::optional<Tensor> total;
  for (const Tensor& t : tensors) {
        const Tensor x = t.cast(DType::F32);
    const Tensor sq = (x * x).sum();  // every axis
    total = total ? *total + sq : sq;
  }
  return total->sqrt();
}

std::vector<Tensor> clip_grad_norm(const std::vector<Tensor>& grads, double max_norm) {
  LUM_CHECK(max_norm > 0) << "clip_grad_norm: max_norm must be positive, got " << max_norm;
  const Tensor norm = global_norm(grads);
  const Tensor scale = (max_norm / (norm + 1e-6)).minimum(scalar_like(norm, 1.0));
  std::vector<Tensor> out;
  for (const Tensor& g : grads) out.push_back(g * scale.cast(g.dtype()));
  return out;
}

}  // namespace luminal::train
