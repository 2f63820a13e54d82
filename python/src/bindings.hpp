// The pieces of the Python module luminal._luminal (module.cpp puts them together).
#pragma once

#include <nanobind/nanobind.h>

namespace luminal::python {

/// Graph: building inputs and constants, dims, compile and execute.
void bind_graph(nanobind::module_& m);
/// Tensor: operators, every hlop as a method, NumPy in and out; the free functions
/// (where, concat, stack, comparisons).
void bind_tensor(nanobind::module_& m);
/// Language models: luminal.Model (load, encode, decode, greedy ids, streamed generation).
void bind_models(nanobind::module_& m);
/// Training: gradients, optimizers, schedules, clipping, loss scaling, checkpoints.
void bind_train(nanobind::module_& m);

}  // namespace luminal::python
