// The backend-neutral stages of compile() (see program.hpp).
#include "runtime/program.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "runtime/env.hpp"

namespace luminal::runtime {

std::filesystem::path dump_dir() {
  const char* d = std::getenv("LUMINAL_DUMP_DIR");
  const std::filesystem::path dir = d && *d ? d : "luminal-dump";
  std::filesystem::create_directories(dir);
  return dir;
}

namespace {
// Compiles started in this process: the n-th's dumps are named stage.n (n > 1), so a
// program that compiles several graphs (a training step, then sampling) keeps each.
std::atomic<int> compiles{0};
}  // namespace

void dump(const std::string& stage, const std::string& text, const std::string& dot) {
  if (!env_has("LUMINAL_DUMP", stage.c_str()) && !env_has("LUMINAL_DUMP", "all")) return;
  const int n = compiles.load();
  const std::filesystem::path path = dump_dir() / (n > 1 ? stage + "." + std::to_string(n) : stage);
  std::ofstream(path.string() + ".txt") << text;
  if (!dot.empty()) std::ofstream(path.string() + ".dot") << dot;
  std::fprintf(stderr, "luminal: dumped %s to %s\n", stage.c_str(), path.c_str());
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

PlannedProgram optimize_and_plan(const Graph& graph, compiler::Fusion fusion,
                                 const compiler::OptimizeOptions& options, bool computed_masks) {
  PlannedProgram p;
  p.start = std::chrono::steady_clock::now();
  ++compiles;
  dump("hlir", graph.to_text(), graph.to_dot());
  p.program = compiler::optimize(graph, options);
  p.optimize_seconds = seconds_since(p.start);
  dump("egraph", p.program.report.to_string());
  dump("optimized", p.program.graph->to_text(), p.program.graph->to_dot());
  const auto plan_start = std::chrono::steady_clock::now();
  p.plan = compiler::plan_kernels(*p.program.graph, fusion, computed_masks);
  p.plan_seconds = seconds_since(plan_start);
  dump("kernels", p.plan.to_text(*p.program.graph));
  return p;
}

void log_compile(const char* backend, const Graph& graph, const PlannedProgram& p,
                 const std::string& backend_part) {
  if (!env_has("LUMINAL_LOG", "info")) return;
  uint64_t rewrites = 0;
  for (const auto& r : p.program.report.rules) rewrites += r.unions;
  std::fprintf(stderr,
               "luminal %s: %zu nodes -> e-graph %s, %llu rewrites -> %zu nodes -> %zu kernels "
               "(%zu ops fused); e-graph %.3f s, plan %.3f s, %s, total %.3f s\n",
               backend, graph.num_nodes(), p.program.summary().c_str(),
               static_cast<unsigned long long>(rewrites), p.program.graph->num_nodes(),
               p.plan.kernels.size(), p.plan.fused_ops, p.optimize_seconds, p.plan_seconds,
               backend_part.c_str(), seconds_since(p.start));
}

int64_t bound_dim(const Bindings& bound, const std::string& name) {
  const std::optional<int64_t> v = bound.get(name);
  LUM_CHECK(v) << "unbound symbolic dimension '" << name << "' (bind it with set_dim)";
  return *v;
}

std::pair<std::string, std::vector<std::pair<std::string, Expr>>> unit_dims(
    const std::vector<std::string>& dims, const Bindings& bound) {
  std::pair<std::string, std::vector<std::pair<std::string, Expr>>> out;
  for (const std::string& d : dims) {
    if (bound_dim(bound, d) != 1) continue;
    out.first += d + ";";
    out.second.emplace_back(d, Expr(1));
  }
  return out;
}

std::unique_ptr<Graph> with_dims_fixed(const Graph& g,
                                       const std::vector<std::pair<std::string, Expr>>& fixed) {
  auto out = std::make_unique<Graph>();
  for (uint32_t i = 0; i < g.num_nodes(); ++i) {
    Node n = g.node(NodeId{i});
    for (Expr& d : n.shape) d = d.substitute(fixed);
    n.iota = n.iota.substitute(fixed);
    for (Edge& e : n.inputs) e.view = e.view.substitute(fixed);
    out->add_node(std::move(n));
  }
  for (NodeId o : g.outputs()) out->mark_retrieve(o);
  return out;
}

}  // namespace luminal::runtime
