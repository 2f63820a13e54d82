// Optimizers as graph nodes: an update step is part of the executable that computes the
// loss and its gradients, so one run is one training step. Parameters and optimizer
// state are graph inputs; the updated values are outputs that Optimizer::advance hands
// back as the next run's inputs (moved, not copied; on a GPU they stay there).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "luminal/tensor.hpp"

namespace luminal::train {

/// A learning rate for each step (0 for the first).
using Schedule = std::function<double(int64_t step)>;
/// The same rate every step.
Schedule constant_lr(double lr);
/// From lr / warmup up to lr over `warmup` steps (step + 1 / warmup of it), then lr.
Schedule linear_warmup(double lr, int64_t warmup);
/// Linear warm-up over `warmup` steps, then cosine decay from lr to `min_lr` at step
/// `total` (and min_lr after).
Schedule warmup_cosine(double lr, int64_t warmup, int64_t total, double min_lr = 0.0);

/// torch.optim.SGD's options.
struct SgdOptions {
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  /// Micro-batches a step: the gradients of `accumulate` runs are averaged, and the
  /// parameters change on every accumulate-th run only.
  int64_t accumulate = 1;
  /// A bool scalar of the graph: where false, the run changes nothing (LossScale::finite).
  Tensor apply_if = {};
};
/// torch.optim.Adam's and AdamW's options (AdamW: decoupled weight decay, 0.01 by
/// default there).
struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t accumulate = 1;  // micro-batches a step, as SgdOptions::accumulate
  Tensor apply_if = {};    // as SgdOptions::apply_if
};

class Optimizer {
 public:
  /// Hands the run's updated parameters and state to the next run and sets its learning
  /// rate (and bias corrections): call after every execute() that trains. `counted`
  /// false: the run was skipped (apply_if was false) and does not count as one.
  void advance(bool counted = true);
  /// Runs taken (advance() calls, plus those a checkpoint brought back).
  int64_t runs() const { return runs_; }
  /// Updates taken: runs() over the micro-batches a step.
  int64_t steps() const { return runs_ / accumulate_; }
  /// The learning rate the next update uses.
  double learning_rate() const { return schedule_(steps()); }
    /// Every value carried from run to run, by name: "<param>" for parameters, "<param>.<slot>"
  /// for optimizer state (momentum_buffer, exp_avg, exp_avg_sq as in torch.optim, and
  /// grad_sum with micro-batches).
  const std::vector<std::pair<std::string, Tensor>>& state() const { return named_; }
  /// Continues after `runs` runs (a checkpoint's), for the schedule, the bias
  /// corrections and the micro-batch count; the state's values are set by the caller.
  void resume(int64_t runs);

  // Built by sgd / adam / adamw.
  struct Carry {
    Tensor input, updated;
  };
  using Scalars = std::function<void(Optimizer&)>;
  /// `apply`: a scalar input set to 1 on the runs that update (with accumulate > 1).
  Optimizer(Graph& graph, std::vector<Carry> carries,
            std::vector<std::pair<std::string, Tensor>> named, Schedule schedule,
            Scalars set_scalars, int64_t accumulate = 1, Tensor apply = {});
  /// Sets a scalar input of the update (the learning rate, a bias correction).
  void set_scalar(const Tensor& input, double value);

 private:
  Graph* graph_;
  std::vector<Carry> carries_;
  std::vector<std::pair<std::string, Tensor>> named_;
  Schedule schedule_;
  Scalars set_scalars_;
  int64_t accumulate_ = 1, runs_ = 0;
  Tensor apply_;
  void refresh_scalars();  // the scalar inputs for the next run
};

/// SGD with momentum, dampening, Nesterov momentum and L2 weight decay, as
/// torch.optim.SGD. `params` are whole input nodes, `grads` their gradients
/// (train::gradients); their names (Graph::named_tensor) name their state in state() and
/// checkpoints. The momentum buffers start at zero.
Optimizer sgd(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, Schedule lr,
              SgdOptions options = {});
/// Adam with bias correction and L2 weight decay, as torch.optim.Adam.
Optimizer adam(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, Schedule lr,
               AdamOptions options = {});
/// AdamW: Adam with weight decay applied to the parameters directly, as torch.optim.AdamW.
Optimizer adamw(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, Schedule lr,
                AdamOptions options = {.weight_decay = 0.01});

/// The gradients scaled so their joint L2 norm is at most `max_norm`
/// (torch.nn.utils.clip_grad_norm_: scale max_norm / (norm + 1e-6) where it is below 1).
std::vector<Tensor> clip_grad_norm(const std::vector<Tensor>& grads, double max_norm);

/// The joint L2 norm of several tensors (a scalar, f32).
Tensor global_norm(const std::vector<Tensor>& tensors);

}  // namespace luminal::train
