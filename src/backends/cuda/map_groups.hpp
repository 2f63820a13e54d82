// Elementwise kernels that read none of each other's values, moved next to each other in
// the plan (private to src/backends/cuda), where code generation makes each such run one
// launch (a map group: codegen.hpp). A decoding layer's RoPE of its keys and the cast of
// its values are each followed by the append that puts them in their cache, and the RoPE
// of its queries comes after both: moved together, the three are one launch.
#pragma once

#include "luminal/compiler/plan.hpp"
#include "luminal/graph.hpp"

namespace luminal::cudagen {

/// Moves each elementwise kernel to just after the run of elementwise kernels before it,
/// where it reads no value of that run or of any kernel after the run's start. Nothing
/// else moves, and every kernel still follows what it reads.
void adjoin_independent_maps(const Graph& g, compiler::KernelPlan& plan);

}  // namespace luminal::cudagen
