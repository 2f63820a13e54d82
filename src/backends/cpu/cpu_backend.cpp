// The CPU backend: plan -> generate -> compile -> run.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "backends/cpu/codegen.hpp"
#include "backends/cpu/jit.hpp"
#include "luminal/cpu.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace luminal {
namespace {

using KernelFn = void (*)(void**, const int64_t*, int64_t*);

bool env_has(const char* var, const char* word) {
  const char* v = std::getenv(var);
  return v && std::strstr(v, word);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

class CpuExecutable final : public Executable {
 public:
  CpuExecutable(compiler::KernelPlan plan, std::vector<std::string> dims, cpugen::JitResult jit)
      : plan_(std::move(plan)), dims_(std::move(dims)), jit_(std::move(jit)) {
    for (size_t k = 0; k < plan_.kernels.size(); ++k)
      fns_.push_back(reinterpret_cast<KernelFn>(jit_.library->symbol("lum_kernel_" + std::to_string(k))));
  }

  void run(Graph& g) override {
    std::vector<int64_t> dims;
    for (const std::string& d : dims_) {
      auto v = g.dims().get(d);
      LUM_CHECK(v) << "unbound symbolic dimension '" << d << "' (bind it with set_dim)";
      dims.push_back(*v);
    }
    const size_t count = g.num_nodes();
    // Last kernel reading each value, so it can be freed right after.
    std::vector<size_t> last_use(count, 0);
    for (size_t k = 0; k < plan_.kernels.size(); ++k)
      for (NodeId r : plan_.kernels[k].reads) last_use[r.value] = k;
    std::vector<std::optional<Buffer>> values(count);
    stats_ = RunStats{};
    size_t live = 0;
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const compiler::Kernel& kn = plan_.kernels[k];
      const Node& root = g.node(kn.root);
      int64_t numel = 1;
      for (Expr d : root.shape) numel *= d.eval(g.dims());
      Buffer out(root.dtype, static_cast<size_t>(numel));
      std::vector<void*> bufs{out.data()};
      for (NodeId r : kn.reads) bufs.push_back(const_cast<void*>(input(g, r, values).data()));
      int64_t err[3] = {0, 0, 0};
      fns_[k](bufs.data(), dims.data(), err);
      if (err[0]) report(g, kn, err);
      live += out.bytes();
      values[kn.root.value] = std::move(out);
      stats_.peak_bytes = std::max(stats_.peak_bytes, live);
      ++stats_.nodes_run;
      for (NodeId r : kn.reads) {
        if (last_use[r.value] == k && values[r.value] && !g.is_output(r)) {
          live -= values[r.value]->bytes();
          values[r.value].reset();
        }
      }
    }
    for (NodeId o : g.outputs()) {
      const NodeId c = plan_.canon(o);
      if (values[c.value]) g.set_data(o, *values[c.value]);
    }
  }

  RunStats last_run() const override { return stats_; }

 private:
  const Buffer& input(const Graph& g, NodeId r, const std::vector<std::optional<Buffer>>& values) {
    if (values[r.value]) return *values[r.value];
    const Node& n = g.node(r);
    const Buffer* b = g.data(r);
    LUM_CHECK(n.op == Op::Input) << "internal: %" << r.value << " has no value";
    LUM_CHECK(b) << "input '" << n.name << "' (%" << r.value << ") has no data: call set() before execute()";
    LUM_CHECK(b->dtype() == n.dtype) << "input '" << n.name << "' is " << dtype_name(n.dtype)
                                     << " but its data is " << dtype_name(b->dtype());
    int64_t numel = 1;
    for (Expr d : n.shape) numel *= d.eval(g.dims());
    LUM_CHECK(b->numel() == static_cast<size_t>(numel))
        << "input '" << n.name << "' of shape " << to_string(n.shape) << " needs " << numel << " elements, got "
        << b->numel();
    return *b;
  }

  [[noreturn]] static void report(const Graph& g, const compiler::Kernel& k, const int64_t* err) {
    const Node& n = g.node(k.root);
    const std::string where = "%" + std::to_string(k.root.value) + " (" + std::string(op_name(n.op)) + ")";
    const char* what = err[0] == 1 ? "Gather in " : err[0] == 2 ? "Scatter " : "Mod in ";
    LUM_CHECK(err[0] != 3) << what << where << ": integer division by zero at element " << err[2];
    LUM_FAIL() << what << where << ": index " << err[1] << " at position " << err[2] << " is out of range";
  }

  compiler::KernelPlan plan_;
  std::vector<std::string> dims_;
  cpugen::JitResult jit_;
  std::vector<KernelFn> fns_;
  RunStats stats_;
};

}  // namespace

std::unique_ptr<Executable> CpuBackend::compile(const Graph& graph) const {
  const auto start = std::chrono::steady_clock::now();
  const bool log = env_has("LUMINAL_LOG", "info");
  compiler::KernelPlan plan = compiler::plan_kernels(graph, options_.fuse);
  const double plan_s = seconds_since(start);
  if (env_has("LUMINAL_DUMP", "hlir")) std::fprintf(stderr, "== hlir ==\n%s", graph.to_text().c_str());
  if (env_has("LUMINAL_DUMP", "kernels")) std::fprintf(stderr, "== kernels ==\n%s", plan.to_text(graph).c_str());
  const auto gen_start = std::chrono::steady_clock::now();
  cpugen::GeneratedSource src = cpugen::generate_source(graph, plan);
  const double gen_s = seconds_since(gen_start);
  cpugen::JitResult jit = cpugen::compile_and_load(src.code);
  if (env_has("LUMINAL_DUMP", "source"))
    std::fprintf(stderr, "== source ==\n%s\n", jit.library->path().c_str());
  if (log) {
    std::fprintf(stderr,
                 "luminal cpu: %zu nodes -> %zu kernels (%zu ops fused); plan %.3f s, codegen %.3f s, "
                 "compile %.3f s (%s), total %.3f s\n",
                 graph.num_nodes(), plan.kernels.size(), plan.fused_ops, plan_s, gen_s, jit.compile_seconds,
                 jit.cache_hit ? "cache hit" : "compiled", seconds_since(start));
  }
  return std::make_unique<CpuExecutable>(std::move(plan), std::move(src.dims), std::move(jit));
}

}  // namespace luminal
