// Training checkpoints: parameters, optimizer state and the step count in one
// safetensors file, so a run stopped and resumed takes the same next steps.
#pragma once

#include <string>

#include "luminal/train/optimizer.hpp"

namespace luminal::train {

/// Writes every value `opt` carries from step to step (Optimizer::state(): parameters,
/// moments, momentum buffers, summed micro-batch gradients), as the last advance() left
/// them, and the run count. The
/// file is written under a temporary name and renamed into place, so an error leaves no
/// half-written checkpoint.
void save_checkpoint(const std::string& path, const Optimizer& opt);

/// Sets every value of Optimizer::state() from a checkpoint save_checkpoint wrote and
/// resumes its run count. A missing tensor or one of another shape raises
/// luminal::Error naming the file and the tensor, before anything is set; a tensor of
/// another floating-point type is converted.
void load_checkpoint(const std::string& path, Optimizer& opt);

}  // namespace luminal::train
