// The backend-neutral front of every backend's compile(): the HLIR dump, the e-graph
// optimisation, the kernel plan, their dumps, and the one-line compile log. A backend
// takes the planned program from here and only renders, compiles and runs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "luminal/compiler/optimize.hpp"
#include "luminal/compiler/plan.hpp"

namespace luminal::runtime {

struct PlannedProgram {
  compiler::Optimized program;
  compiler::KernelPlan plan;
  double optimize_seconds = 0, plan_seconds = 0;
  std::chrono::steady_clock::time_point start;  // when compile() began
};

/// $LUMINAL_DUMP_DIR (default ./luminal-dump), created.
std::filesystem::path dump_dir();

/// LUMINAL_DUMP=hlir,egraph,optimized,kernels,source,search (or "all") writes each stage as
/// text (and DOT where it is a graph) into $LUMINAL_DUMP_DIR (default ./luminal-dump): the
/// first compile of the process as `stage.txt`, the n-th as `stage.n.txt`.
void dump(const std::string& stage, const std::string& text, const std::string& dot = "");

double seconds_since(std::chrono::steady_clock::time_point t);

/// Optimises `graph` and plans its kernels (fused as `fusion` says; attention masks left
/// to the backend as `computed_masks` says: compiler::plan_kernels), dumping each stage
/// that LUMINAL_DUMP asks for.
PlannedProgram optimize_and_plan(const Graph& graph, compiler::Fusion fusion,
                                 const compiler::OptimizeOptions& options = {},
                                 bool computed_masks = false);

/// With LUMINAL_LOG=info: one line of what compile() did, `backend_part` being the
/// backend's own stages ("codegen 0.01 s, compile 0.2 s (cache hit)").
void log_compile(const char* backend, const Graph& graph, const PlannedProgram& p,
                 const std::string& backend_part);

/// The value `bound` gives dim `name`; an Error naming it where it is not bound.
int64_t bound_dim(const Bindings& bound, const std::string& name);

/// The kernels' symbolic dims that `bound` sets to 1, as a key ("seq;past;") and as
/// substitutions: unit dims get kernels of their own, whose index arithmetic through
/// reshapes and permutes simplifies to plain strides (decoding one token at a time).
/// Every dim must be bound.
std::pair<std::string, std::vector<std::pair<std::string, Expr>>> unit_dims(
    const std::vector<std::string>& dims, const Bindings& bound);

/// A copy of `g` with the given dims substituted in every shape, view and iota.
std::unique_ptr<Graph> with_dims_fixed(const Graph& g,
                                       const std::vector<std::pair<std::string, Expr>>& fixed);

}  // namespace luminal::runtime
