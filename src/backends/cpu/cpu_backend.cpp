// The CPU backend: plan -> generate -> compile -> run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include <omp.h>

#include "backends/cpu/attention.hpp"
#include "backends/cpu/codegen.hpp"
#include "backends/cpu/expert_products.hpp"
#include "backends/cpu/gemm.hpp"
#include "backends/cpu/jit.hpp"
#include "backends/cpu/machine.hpp"
#include "backends/cpu/prefetch_tuning.hpp"
#include "backends/cpu/qgemm.hpp"
#include "backends/cpu/simd.hpp"
#include "backends/cpu/team.hpp"
#include "luminal/append_rows_op.hpp"
#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/matmul_op.hpp"
#include "luminal/cpu.hpp"
#include "luminal/error.hpp"
#include "luminal/expert_matmul_op.hpp"
#include "luminal/graph.hpp"
#include "runtime/env.hpp"
#include "runtime/kernel_errors.hpp"
#include "runtime/kernel_profile.hpp"
#include "runtime/liveness.hpp"
#include "runtime/product_rows.hpp"
#include "runtime/program.hpp"
#include "runtime/program_search.hpp"
#include "runtime/resolved_views.hpp"
#include "runtime/search.hpp"

namespace luminal {
namespace {

using KernelFn = void (*)(void**, const int64_t*, int64_t*);

using runtime::env_has;
using runtime::seconds_since;

// Runs the optimised program: kernels read user inputs from the user's graph and store
// the user's outputs back into it.
class CpuExecutable final : public Executable {
 public:
  CpuExecutable(compiler::Optimized program, compiler::KernelPlan plan,
                std::vector<std::string> dims, cpugen::JitResult jit, CpuOptions options)
      : options_(options), program_(std::move(program)), plan_(std::move(plan)) {
    variants_.emplace("", make_variant("", std::move(dims), std::move(jit)));
    find_appendable_bases();
    plan_steps();
  }

  ~CpuExecutable() override {
    for (const auto& [key, profile] : profiles_) print_profile(key, profile);
  }

  void run(Graph& user) override {
    const Graph& g = *program_.graph;
    const auto run_start = std::chrono::steady_clock::now();
    const Variant& variant = variant_for(user.dims());
    profile_ = nullptr;
    if (profiling_) {
      profile_ = &profiles_[variant.key];
      profile_->kernels.resize(plan_.kernels.size());
    }
    std::vector<int64_t> dims;
    for (const std::string& d : variant.dims) dims.push_back(*user.dims().get(d));
    stats_ = RunStats{};
    start_pool(user);
    size_t live = 0;
    auto run_kernels = [&] {
      for (size_t k = 0; k < steps_.size(); ++k) {
        const Step& step = steps_[k];
        // Already there when an earlier QMatMul of the same activations computed it.
        if (!values_[k]) run_step(user, variant, dims, k, live);
        stats_.peak_bytes = std::max(stats_.peak_bytes, live);
        ++stats_.nodes_run;
        for (uint32_t i = step.frees; i < step.frees_end; ++i) {
          std::optional<Buffer>& v = values_[static_cast<size_t>(frees_[i])];
          if (!v) continue;
          live -= v->bytes();
          release(std::move(*v));
          v.reset();
        }
      }
    };
    if (team_fits(user)) {
      cpugen::with_team(omp_get_max_threads(), run_kernels);
    } else {
      run_kernels();
    }
    for (size_t i = 0; i < program_.outputs.size(); ++i) {
      const auto& [user_out, node] = program_.outputs[i];
      const NodeId c = plan_.canon(node);
      if (value(c)) {
        // The last output naming a value takes the buffer itself; others get copies.
        bool later = false;
        for (size_t j = i + 1; j < program_.outputs.size(); ++j)
          later |= plan_.canon(program_.outputs[j].second) == c;
        if (later) {
          user.set_data(user_out, *value(c));
        } else {
          user.set_data(user_out, std::move(*value(c)));
        }
      } else if (g.node(c).op == Op::Input && program_.source_of[c.value] != user_out) {
        user.set_data(user_out, input(user, c));
      }
    }
    for (std::optional<Buffer>& v : values_) v.reset();
    last_pool_.clear();
    if (profile_) {
      profile_->run_seconds += seconds_since(run_start);
      ++profile_->runs;
    }
  }

  RunStats last_run() const override { return stats_; }
  // Also re-lays out the QMatMul weights already set, which the first run would do.
  void prepare(const Graph& user, const Bindings& dims) override {
    variant_for(dims);
    for (const compiler::Kernel& kn : plan_.kernels) {
      const Node& n = program_.graph->node(kn.root);
      const auto* q = dynamic_cast<const compiler::QMatMulOp*>(n.custom.get());
      if (!q) continue;
      const NodeId w = plan_.canon(n.inputs[1].source);
      const Node& wn = program_.graph->node(w);
      const Buffer* raw = wn.op == Op::Input ? user.data(program_.source_of[w.value]) : nullptr;
      if (!raw) continue;  // computed, or not set yet: the first run will see
      check_input_data(wn, w, raw, dims);
      interleaved_weights(user, w, *raw, q->format, wn.shape[0].eval(dims), wn.shape[1].eval(dims));
    }
  }

 private:
  // Compiled kernels for one specialisation of the symbolic dims.
  struct Variant {
    std::string key;                // the dims fixed to 1, each followed by ';'
    std::vector<std::string> dims;  // symbolic dims the kernels take, in order
    cpugen::JitResult jit;
    std::vector<KernelFn> fns;  // per kernel; null for library kernels
  };

  Variant make_variant(std::string key, std::vector<std::string> dims,
                       cpugen::JitResult jit) const {
    Variant v{std::move(key), std::move(dims), std::move(jit), {}};
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const bool custom = program_.graph->node(plan_.kernels[k].root).op == Op::Custom;
      v.fns.push_back(custom ? nullptr
                             : reinterpret_cast<KernelFn>(
                                   v.jit.library->symbol("lum_kernel_" + std::to_string(k))));
    }
    return v;
  }

  // Symbolic dims bound to 1 get kernels of their own, compiled on first use (and cached
  // on disk like any kernel file): with the dim fixed, index arithmetic through reshapes
  // and permutes simplifies to plain strides instead of runtime divisions. Decoding one
  // token at a time (seq = 1) is the case this is for.
  const Variant& variant_for(const Bindings& bound) {
    auto [key, fixed] = runtime::unit_dims(variants_.at("").dims, bound);
    if (!options_.specialize_unit_dims) key.clear(), fixed.clear();
    if (auto it = variants_.find(key); it != variants_.end()) return it->second;
    const auto start = std::chrono::steady_clock::now();
    const std::unique_ptr<Graph> g = runtime::with_dims_fixed(*program_.graph, fixed);
    cpugen::GeneratedSource src = cpugen::generate_source(*g, plan_);
    cpugen::JitResult jit = cpugen::compile_and_load(src.code);
    if (env_has("LUMINAL_LOG", "info"))
      std::fprintf(stderr, "luminal cpu: kernels for %s= 1: compile %.3f s (%s)\n", key.c_str(),
                   seconds_since(start), jit.cache_hit ? "cache hit" : "compiled");
    return variants_.emplace(key, make_variant(key, std::move(src.dims), std::move(jit)))
        .first->second;
  }

  // What a run needs of each kernel beyond the plan, worked out once and kept in flat
  // arrays walked in order: a decode step's weight traffic evicts everything from the
  // caches, and a run that chased each kernel's Node and read list through the heap
  // spent a cache miss on each.
  struct Operand {
    NodeId node;
    int32_t slot;  // of a computed value; -1 for a user input
  };
  struct Step {
    int64_t numel = -1;  // of the output; -1 when symbolic (numel_expr)
    Expr numel_expr;
    DType dtype = DType::F32;
    uint32_t reads = 0, reads_end = 0;  // its operands in operands_
    uint32_t frees = 0, frees_end = 0;  // slots in frees_ that no later kernel reads
    bool matmul = false;
    bool team_aware = false;  // splits its work through cpugen::run_parallel at any size
    const compiler::QMatMulOp* qmatmul = nullptr;
    const compiler::AttentionOp* attention = nullptr;
    uint32_t joined = 0, joined_end = 0;  // later QMatMuls run with this one, in joined_
    bool residual = false;                // a QMatMul with the activations' residual int8 term
  };
  std::vector<Step> steps_;
  std::vector<Operand> operands_;
  std::vector<int32_t> frees_;
  std::vector<uint32_t> joined_;
  std::vector<cpugen::InterleavedProduct> joined_products_;
  std::vector<Buffer> joined_outs_;
  std::vector<runtime::ResolvedViews> views_;  // by kernel; used by custom kernels
  // Computed values during a run, by slot: kernel k's output has slot k.
  std::vector<std::optional<Buffer>> values_;
  std::vector<int32_t> slot_of_;  // by node: its slot, or -1 (user inputs)
  std::optional<Buffer> no_value_;
  std::optional<Buffer>& value(NodeId n) {
    const int32_t slot = slot_of_[n.value];
    return slot < 0 ? no_value_ : values_[static_cast<size_t>(slot)];
  }
  // By node: the data version of a constant-shaped user input last checked against its
  // node, so that its checks do not repeat every run.
  std::vector<uint64_t> checked_version_;
  std::vector<void*> args_;  // a generated kernel's buffers
  std::vector<const Buffer*> custom_inputs_;
  const bool profiling_ = env_has("LUMINAL_PROFILE", "1");

  void plan_steps() {
    const Graph& g = *program_.graph;
    runtime::Liveness liveness = runtime::plan_liveness(g, plan_);
    slot_of_ = std::move(liveness.slot_of);
    frees_ = std::move(liveness.frees);
    steps_.resize(plan_.kernels.size());
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const compiler::Kernel& kn = plan_.kernels[k];
      const Node& root = g.node(kn.root);
      Step& step = steps_[k];
      step.numel_expr = product(root.shape);
      step.numel = step.numel_expr.as_const().value_or(-1);
      step.dtype = root.dtype;
      step.reads = static_cast<uint32_t>(operands_.size());
      for (NodeId r : kn.reads) operands_.push_back({r, slot_of_[r.value]});
      step.reads_end = static_cast<uint32_t>(operands_.size());
      step.frees = liveness.frees_begin[k];
      step.frees_end = liveness.frees_begin[k + 1];
      if (root.op == Op::Custom) {
        step.matmul = dynamic_cast<const compiler::MatMulOp*>(root.custom.get()) != nullptr;
        step.qmatmul = dynamic_cast<const compiler::QMatMulOp*>(root.custom.get());
        step.attention = dynamic_cast<const compiler::AttentionOp*>(root.custom.get());
      }
      step.team_aware = step.attention || appendable_base_[k] || interleaved_product(root);
    }
    views_.resize(plan_.kernels.size());
    values_.resize(plan_.kernels.size());
    checked_version_.assign(g.num_nodes(), 0);
    size_t products = 0, residual = 0;
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      Step& step = steps_[k];
      step.residual = step.qmatmul && options_.int8_activations &&
                      (options_.residual == CpuOptions::Residual::all ||
                       (options_.residual == CpuOptions::Residual::sensitive &&
                        (attention_projection(k) || gated_product(k))));
      products += step.qmatmul != nullptr;
      residual += step.residual;
    }
    if (products > 0 && runtime::env_has("LUMINAL_LOG", "info"))
      std::fprintf(stderr,
                   "luminal cpu: the activations' residual int8 term on %zu of %zu quantised "
                   "products\n",
                   residual, products);
    join_products();
  }

  // Whether QMatMul kernel k feeds an attention (queries, keys, values) or reads its
  // output, within a few ops that are not products (rotary embeddings, norms, casts, the
  // KV cache's append, reshapes).
  bool attention_projection(size_t k) const {
    const Graph& g = *program_.graph;
    auto is_attention = [&](NodeId n) {
      const Node& node = g.node(n);
      return node.op == Op::Custom &&
             dynamic_cast<const compiler::AttentionOp*>(node.custom.get()) != nullptr;
    };
    auto is_product = [&](const Node& node) {
      return node.op == Op::Custom &&
             (dynamic_cast<const compiler::QMatMulOp*>(node.custom.get()) ||
              dynamic_cast<const compiler::MatMulOp*>(node.custom.get()));
    };
    constexpr int kHops = 8;
    const NodeId root = plan_.kernels[k].root;
    // Backwards from the activations, through ops of one input.
    NodeId x = plan_.canon(g.node(root).inputs[0].source);
    for (int hop = 0; hop < kHops; ++hop) {
      if (is_attention(x)) return true;
      const Node& node = g.node(x);
      if (node.inputs.size() != 1 || is_product(node)) break;
      x = plan_.canon(node.inputs[0].source);
    }
    // Forwards from the output, breadth first, each node once.
    std::vector<NodeId> frontier{root};
    std::unordered_set<uint32_t> seen{root.value};
    for (int hop = 0; hop < kHops && !frontier.empty(); ++hop) {
      std::vector<NodeId> next;
      for (NodeId n : frontier)
        for (NodeId user : users_of(n)) {
          if (is_attention(user)) return true;
          if (!is_product(g.node(user)) && seen.insert(user.value).second) next.push_back(user);
        }
      frontier = std::move(next);
    }
    return false;
  }

  // Whether QMatMul kernel k's activations are computed from two or more products'
  // outputs in one kernel: a gated feed-forward's down projection, act(gate(x)) * up(x).
  bool gated_product(size_t k) const {
    const Graph& g = *program_.graph;
    const NodeId x = plan_.canon(g.node(plan_.kernels[k].root).inputs[0].source);
    const int32_t producer = slot_of_[x.value];
    if (producer < 0) return false;
    int products = 0;
    for (NodeId r : plan_.kernels[static_cast<size_t>(producer)].reads) {
      const int32_t slot = slot_of_[r.value];  // kernel `slot` computes r
      products += slot >= 0 && steps_[static_cast<size_t>(slot)].qmatmul != nullptr;
    }
    return products >= 2;
  }

  // The nodes reading `n` (built once).
  const std::vector<NodeId>& users_of(NodeId n) const {
    if (users_.empty()) {
      const Graph& g = *program_.graph;
      users_.resize(g.num_nodes());
      for (uint32_t i = 0; i < g.num_nodes(); ++i)
        for (const Edge& e : g.node(NodeId{i}).inputs)
          users_[plan_.canon(e.source).value].push_back(NodeId{i});
    }
    return users_[n.value];
  }
  mutable std::vector<std::vector<NodeId>> users_;

  // Whether a QMatMul runs on interleaved weights (qmatmul_interleaved).
  bool interleaved_product(const Node& n) const {
    const auto* q = dynamic_cast<const compiler::QMatMulOp*>(n.custom.get());
    if (!q) return false;
    const NodeId w = plan_.canon(n.inputs[1].source);
    const std::vector<Expr>& shape = program_.graph->node(w).shape;
    if (shape.size() != 2) return false;
    const auto rows = shape[0].as_const(), cols = shape[1].as_const();
    return rows && cols && interleaves(w, q->format, *rows, *cols);
  }

  // Whether QMatMul weights `w`, [n, k] in `format`, get an interleaved copy.
  bool interleaves(NodeId w, uint32_t format, int64_t n, int64_t k) const {
    return options_.int8_activations && program_.graph->node(w).op == Op::Input &&
           cpugen::interleavable(format, n, k);
  }

  // Whether this run's kernels go on one thread team held for the whole run
  // (cpugen::with_team): when every kernel either splits its work through run_parallel
  // or is too small to split at all (a decode step). Any other kernel would open an
  // OpenMP region of its own, which inside the team gets one thread.
  bool team_fits(const Graph& user) const {
    if (omp_get_max_threads() < 2) return false;
    for (size_t k = 0; k < steps_.size(); ++k) {
      const Step& step = steps_[k];
      if (step.team_aware) continue;
      if (step.matmul || step.qmatmul ||
          numel_of(user, k) > static_cast<size_t>(cpugen::kParallelElements))
        return false;
    }
    return true;
  }

  // QMatMuls of the same activations with user-input weights (a layer's query, key and
  // value projections; its gate and up projections) run together when the first of them
  // is due: their other input is a weight, so the later ones are ready too. One thread
  // team and one stream of weights then serve all of them (cpugen::qmatmul_group).
  void join_products() {
    const Graph& g = *program_.graph;
    constexpr uint32_t kMaxJoined = 7;  // qmatmul_interleaved takes eight products at most
    auto activations = [&](size_t k) {
      return plan_.canon(g.node(plan_.kernels[k].root).inputs[0].source);
    };
    auto input_weight = [&](size_t k) {
      return g.node(plan_.canon(g.node(plan_.kernels[k].root).inputs[1].source)).op == Op::Input;
    };
    std::vector<bool> taken(steps_.size(), false);
    for (size_t k = 0; k < steps_.size(); ++k) {
      Step& step = steps_[k];
      step.joined = step.joined_end = static_cast<uint32_t>(joined_.size());
      if (!step.qmatmul || taken[k] || !input_weight(k)) continue;
      for (size_t j = k + 1; j < steps_.size() && step.joined_end - step.joined < kMaxJoined; ++j)
        if (steps_[j].qmatmul && !taken[j] && activations(j) == activations(k) && input_weight(j)) {
          joined_.push_back(static_cast<uint32_t>(j));
          taken[j] = true;
          ++step.joined_end;
        }
    }
  }

  // Per kernel, the input an AppendRows kernel may grow in place: a whole input that no
  // other kernel reads. Whether the caller donated it is asked per run.
  void find_appendable_bases() {
    const Graph& g = *program_.graph;
    appendable_base_.assign(plan_.kernels.size(), std::nullopt);
    appended_rows_whole_.assign(plan_.kernels.size(), false);
    std::vector<size_t> readers(g.num_nodes(), 0);
    for (const compiler::Kernel& kn : plan_.kernels)
      for (NodeId r : kn.reads) ++readers[r.value];
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const Node& n = g.node(plan_.kernels[k].root);
      if (n.op != Op::Custom || !dynamic_cast<const AppendRowsOp*>(n.custom.get())) continue;
      const NodeId base = plan_.canon(n.inputs[0].source);
      const Node& b = g.node(base);
      if (b.op == Op::Input && n.inputs[0].view == View::contiguous(b.shape) &&
          readers[base.value] == 1)
        appendable_base_[k] = base;
      const Edge& rows = n.inputs[1];
      appended_rows_whole_[k] =
          rows.view == View::contiguous(g.node(plan_.canon(rows.source)).shape);
    }
  }

  // AppendRows onto a donated input that nothing else reads: the input's buffer grows
  // (geometrically, so rarely moves) and only the new rows are written. nullopt when the
  // kernel is something else or the base cannot be taken.
  std::optional<Buffer> append_in_place(Graph& user, size_t k, size_t numel) {
    if (!appendable_base_[k]) return {};
    const NodeId base = *appendable_base_[k];
    const NodeId source = program_.source_of[base.value];
    if (!user.is_donated(source)) return {};
    const Graph& g = *program_.graph;
    const Node& n = g.node(plan_.kernels[k].root);
    const Edge& rows_edge = n.inputs[1];
    check_input_data(g.node(base), base, user.data(source), user.dims(), user.device_data(source));
    const NodeId rows_node = plan_.canon(rows_edge.source);
    const Buffer& rows_data = input(user, rows_node);
    // New rows that are a whole value in order (a decode step's keys or values) are
    // copied straight from it.
    std::optional<Buffer> gathered;
    if (!appended_rows_whole_[k]) gathered = read_view(rows_data, views_[k].get(n, user.dims())[1]);
    const Buffer& rows = gathered ? *gathered : rows_data;
    Buffer out = *user.take_data(source);
    const size_t old_bytes = out.bytes();
    LUM_CHECK(out.numel() + rows.numel() == numel && rows.dtype() == out.dtype())
        << "internal: AppendRows operands do not add up to its output";
    out.resize(numel);
    std::memcpy(static_cast<std::byte*>(out.data()) + old_bytes, rows.data(), rows.bytes());
    return out;
  }

  // Freed buffers, by dtype and size, for later kernels of this run and the next: the
  // same shapes recur in every layer and every step, so memory stays near the peak of
  // what is live at once, and pages are not faulted in again. Buffers the last run freed
  // and this one has not reused are let go when it ends (a prompt's sizes are not kept
  // through the decoding that follows).
  using PoolKey = std::pair<DType, size_t>;
  std::multimap<PoolKey, Buffer> pool_, last_pool_;

  void start_pool(Graph& user) {
    for (auto& [key, b] : pool_) last_pool_.emplace(key, std::move(b));
    pool_.clear();
    // Last run's outputs are replaced by this run's: their buffers are reusable.
    for (const auto& [user_out, node] : program_.outputs)
      if (program_.graph->node(plan_.canon(node)).op != Op::Input)
        if (auto b = user.take_data(user_out)) release(std::move(*b));
  }

  Buffer allocate(DType dtype, size_t numel) {
    std::optional<Buffer> b;
    for (auto* pool : {&pool_, &last_pool_}) {
      auto it = pool->find({dtype, numel});
      if (it == pool->end()) continue;
      b = std::move(it->second);
      pool->erase(it);
      break;
    }
    if (!b) b = Buffer(dtype, numel, Buffer::Uninitialized{});
    // LUMINAL_CPU_POISON=1 (every test binary sets it): every output starts as all-ones
    // bytes (NaN for floats), so a kernel that leaves elements unwritten cannot pass on
    // what a recycled buffer held, such as the reference interpreter's result for the
    // same output.
    if (poison_ && b->bytes() > 0) std::memset(b->data(), 0xFF, b->bytes());
    return std::move(*b);
  }
  const bool poison_ = env_has("LUMINAL_CPU_POISON", "1");

  void release(Buffer b) {
    const PoolKey key{b.dtype(), b.numel()};
    pool_.emplace(key, std::move(b));
  }

  // LUMINAL_PROFILE=1: one table per variant, so that a decode step's (seq = 1) times
  // are not mixed with the prompt's, whose products take a hundred times as long.
  std::map<std::string, runtime::KernelProfile> profiles_;  // by variant key
  runtime::KernelProfile* profile_ = nullptr;               // this run's, while profiling

  void print_profile(const std::string& key, const runtime::KernelProfile& p) const {
    std::string fixed;  // "seq;past;" -> "seq = 1, past = 1"
    for (size_t at = 0, end; (end = key.find(';', at)) != std::string::npos; at = end + 1)
      fixed += (fixed.empty() ? "" : ", ") + key.substr(at, end - at) + " = 1";
    runtime::print_kernel_profile(*program_.graph, plan_, fixed.empty() ? "dims as bound" : fixed,
                                  p);
  }

  std::vector<std::optional<NodeId>> appendable_base_;  // per kernel
  std::vector<bool> appended_rows_whole_;  // per kernel: its new rows are a whole value
  // By weight input: the data version it was made from, and the interleaved weights.
  std::unordered_map<uint32_t, std::pair<uint64_t, cpugen::InterleavedWeights>> interleaved_;
  // A kernel operand: a computed value, or the user's data for an input. `slot` is
  // slot_of_[r], passed where the caller has it at hand (the flat operand records).
  const Buffer& input(const Graph& user, NodeId r) { return input(user, r, slot_of_[r.value]); }
  const Buffer& input(const Graph& user, NodeId r, int32_t slot) {
    if (slot >= 0 && values_[static_cast<size_t>(slot)]) return *values_[static_cast<size_t>(slot)];
    const NodeId source = program_.source_of[r.value];
    const Buffer* b = user.data(source);
    const uint64_t version = user.data_version(source);
    if (!b || version != checked_version_[r.value]) {
      const Node& n = program_.graph->node(r);
      LUM_CHECK(n.op == Op::Input) << "internal: %" << r.value << " has no value";
      check_input_data(n, r, b, user.dims(), user.device_data(source));
      const bool constant_shape = std::all_of(n.shape.begin(), n.shape.end(),
                                              [](Expr d) { return d.as_const().has_value(); });
      if (constant_shape) checked_version_[r.value] = version;
    }
    return *b;
  }

  size_t numel_of(const Graph& user, size_t k) const {
    const Step& step = steps_[k];
    return static_cast<size_t>(step.numel >= 0 ? step.numel : step.numel_expr.eval(user.dims()));
  }

  // Runs kernel k into a new value; `live` counts the bytes of values held.
  void run_step(Graph& user, const Variant& variant, const std::vector<int64_t>& dims, size_t k,
                size_t& live) {
    const Step& step = steps_[k];
    const size_t numel = numel_of(user, k);
    const auto kernel_start =
        profile_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    Buffer out;
    if (auto appended = append_in_place(user, k, numel)) {
      out = std::move(*appended);
    } else {
      out = allocate(step.dtype, numel);
      if (!variant.fns[k]) {
        run_custom(user, k, out);
        for (uint32_t i = step.joined; i < step.joined_end; ++i)
          if (const std::optional<Buffer>& early = values_[joined_[i]]) live += early->bytes();
      } else {
        args_.assign(1, out.data());
        for (uint32_t i = step.reads; i < step.reads_end; ++i) {
          const Operand& o = operands_[i];
          args_.push_back(const_cast<void*>(input(user, o.node, o.slot).data()));
        }
        int64_t err[3] = {0, 0, 0};
        variant.fns[k](args_.data(), dims.data(), err);
        if (err[0]) runtime::raise_kernel_error(*program_.graph, plan_.kernels[k], err);
      }
    }
    if (profile_) profile_->kernels[k] += seconds_since(kernel_start);
    live += out.bytes();
    values_[k] = std::move(out);
  }

  // Library kernels: MatMul through BLAS; any other CustomOp by its reference semantics.
  void run_custom(const Graph& user, size_t k, Buffer& out) {
    const Step& step = steps_[k];
    const Node& n = program_.graph->node(plan_.kernels[k].root);
    const std::vector<ConcreteView>& views = views_[k].get(n, user.dims());
    std::vector<const Buffer*>& bufs = custom_inputs_;
    bufs.clear();
    for (const Edge& e : n.inputs) bufs.push_back(&input(user, plan_.canon(e.source)));
    if (step.matmul && n.dtype == DType::F32 && bufs[0]->dtype() == DType::F32) {
      const float* a = bufs[0]->span<float>().data();
      if (bufs[1]->dtype() == DType::F32)
        return cpugen::matmul_f32(views[0], a, views[1], bufs[1]->span<float>().data(),
                                  out.span<float>().data(), &product_choices_);
      if (bufs[1]->dtype() == DType::F16)
        return cpugen::matmul_f32_f16(views[0], a, views[1],
                                      static_cast<const uint16_t*>(bufs[1]->data()),
                                      out.span<float>().data());
    }
    // A half-precision product: the operands widened, BLAS, the result rounded back.
    if (step.matmul && (n.dtype == DType::F16 || n.dtype == DType::BF16) &&
        bufs[0]->dtype() == n.dtype && bufs[1]->dtype() == n.dtype) {
      const std::vector<float> a = bufs[0]->to_f32(), b = bufs[1]->to_f32();
      std::vector<float> c(out.numel());
      cpugen::matmul_f32(views[0], a.data(), views[1], b.data(), c.data(), &product_choices_);
      for (size_t i = 0; i < c.size(); ++i) out.set_f64(i, c[i]);
      return;
    }
    if (step.qmatmul) {
      if (step.joined != step.joined_end &&
          run_joined(user, k, views, bufs[0]->span<float>().data(), out))
        return;
      const auto& w = views[1].dims;  // the weight [N, K]
      cpugen::qmatmul(views[0], bufs[0]->span<float>().data(), step.qmatmul->format,
                      bufs[1]->span<uint8_t>().data(), w[0], w[1], out.span<float>().data(),
                      options_.int8_activations,
                      interleaved_weights(user, plan_.canon(n.inputs[1].source), *bufs[1],
                                          step.qmatmul->format, w[0], w[1]),
                      step.residual);
      return;
    }
    if (dynamic_cast<const ExpertMatMulOp*>(n.custom.get())) return run_experts(n, views, out);
    // Attention over f32 or f16 keys and values; half-precision queries are widened and
    // the result rounded back, as for the products above. (Rows in their own order: one
    // stored in another goes by the op's reference semantics.)
    auto f32_or_f16 = [](DType t) { return t == DType::F32 || t == DType::F16; };
    if (step.attention && step.attention->out_order.empty() && bufs[3]->dtype() == DType::Bool &&
        f32_or_f16(bufs[1]->dtype()) && f32_or_f16(bufs[2]->dtype()) &&
        bufs[0]->dtype() == n.dtype) {
      const bool wide = n.dtype == DType::F32;
      const std::vector<float> q = wide ? std::vector<float>{} : bufs[0]->to_f32();
      std::vector<float> result(wide ? 0 : out.numel());
      if (cpugen::attention(views[0], wide ? bufs[0]->span<float>().data() : q.data(), views[1],
                            bufs[1]->data(), bufs[1]->dtype(), views[2], bufs[2]->data(),
                            bufs[2]->dtype(), views[3],
                            static_cast<const uint8_t*>(bufs[3]->data()), step.attention->scale,
                            wide ? out.span<float>().data() : result.data())) {
        for (size_t i = 0; i < result.size(); ++i) out.set_f64(i, result[i]);
        return;
      }
    }
    std::vector<Buffer> in;
    std::vector<std::vector<int64_t>> shapes;
    for (size_t i = 0; i < bufs.size(); ++i) {
      in.push_back(read_view(*bufs[i], views[i]));
      shapes.push_back(views[i].dims);
    }
    std::vector<int64_t> out_shape;
    for (Expr d : n.shape) out_shape.push_back(d.eval(user.dims()));
    out = n.custom->run(in, shapes, out_shape, n.dtype);
  }

  // ExpertMatMul: each stack of experts read where it lies, in its storage format (block,
  // half or f32 matrices); the rows and ids as views.
  void run_experts(const Node& n, const std::vector<ConcreteView>& views, Buffer& out) {
    const std::vector<const Buffer*>& bufs = custom_inputs_;
    std::vector<Buffer> copies;  // plain stacks read through a view or widened
    copies.reserve(2 * bufs.size());
    std::vector<cpugen::ExpertWeights> stacks;
    for (size_t i = 2; i < bufs.size(); ++i) {
      const ConcreteView& wv = views[i];
      const uint32_t stored = program_.graph->node(plan_.canon(n.inputs[i].source)).quant;
      const Buffer* wb = bufs[i];
      // Block-stored experts are read whole (their parameter as it is); plain ones through
      // a copy where their view is not, widened where they are not f32 or half.
      const bool whole = wv.is_dense() && wv.offset == 0;
      LUM_CHECK(whole || stored == kPlainStorage)
          << "internal: ExpertMatMul reads block-stored experts through a view";
      if (!whole) wb = &copies.emplace_back(read_view(*wb, wv));
      if (stored == kPlainStorage && !ggml_type_of(wb->dtype()))
        wb = &copies.emplace_back(Buffer::from(wb->to_f32()));
      const uint32_t format = stored != kPlainStorage ? stored : *ggml_type_of(wb->dtype());
      const int64_t k = wv.dims[2];
      size_t block_elems = 0, block_bytes = 0;
      LUM_CHECK(ggml_block_layout(format, block_elems, block_bytes) &&
                k % static_cast<int64_t>(block_elems) == 0)
          << "ExpertMatMul: experts in " << ggml_type_name(format) << " with rows of " << k;
      stacks.push_back({format, static_cast<const uint8_t*>(wb->data()), wv.dims[0], wv.dims[1], k,
                        k / static_cast<int64_t>(block_elems) * static_cast<int64_t>(block_bytes)});
    }
    Buffer x = read_view(*bufs[0], views[0]);
    if (x.dtype() != DType::F32) x = Buffer::from(x.to_f32());
    const Buffer ids = read_view(*bufs[1], views[1]);
    Buffer result(DType::F32, out.numel(), Buffer::Uninitialized{});
    cpugen::expert_matmul(x.span<float>().data(), views[1].dims[0], views[0].dims[1],
                          views[1].dims[1], ids, stacks, result.span<float>().data(),
                          options_.int8_activations);
    if (out.dtype() == DType::F32) return void(out = std::move(result));
    for (size_t i = 0; i < out.numel(); ++i) out.set_f64(i, result.get_f64(i));
  }

  // Kernel k's QMatMul together with the later ones of the same activations
  // (join_products), when all have interleaved weights and read the activations through
  // the same view; their outputs become their values now. False: kernel k alone.
  bool run_joined(const Graph& user, size_t k, const std::vector<ConcreteView>& views,
                  const float* activations, Buffer& out) {
    const Graph& g = *program_.graph;
    auto weights = [&](size_t j, const std::vector<ConcreteView>& v) {
      const NodeId w = plan_.canon(g.node(plan_.kernels[j].root).inputs[1].source);
      return interleaved_weights(user, w, input(user, w), steps_[j].qmatmul->format, v[1].dims[0],
                                 v[1].dims[1]);
    };
    std::vector<cpugen::InterleavedProduct>& products = joined_products_;
    std::vector<Buffer>& outs = joined_outs_;
    products.clear();
    outs.clear();
    const cpugen::InterleavedWeights* w = weights(k, views);
    if (!w) return false;
    products.push_back({w, out.span<float>().data()});
    for (uint32_t i = steps_[k].joined; i < steps_[k].joined_end; ++i) {
      const size_t j = joined_[i];
      const std::vector<ConcreteView>& vj =
          views_[j].get(g.node(plan_.kernels[j].root), user.dims());
      const cpugen::InterleavedWeights* wj =
          runtime::same_rows(vj[0], views[0]) ? weights(j, vj) : nullptr;
      if (!wj) return false;
      outs.push_back(allocate(steps_[j].dtype, numel_of(user, j)));
      products.push_back({wj, outs.back().span<float>().data()});
    }
    cpugen::qmatmul_group(views[0], activations, products, steps_[k].residual);
    for (uint32_t i = steps_[k].joined; i < steps_[k].joined_end; ++i)
      values_[joined_[i]] = std::move(outs[i - steps_[k].joined]);
    return true;
  }

  // The interleaved copy of a QMatMul weight that is a user input, made on first use and
  // redone when the input's data changes; nullptr where the format has none.
  const cpugen::InterleavedWeights* interleaved_weights(const Graph& user, NodeId r,
                                                        const Buffer& raw, uint32_t format,
                                                        int64_t n, int64_t k) {
    if (!interleaves(r, format, n, k)) return nullptr;
    const uint64_t version = user.data_version(program_.source_of[r.value]);
    auto it = interleaved_.find(r.value);
    if (it == interleaved_.end() || it->second.first != version) {
      cpugen::InterleavedWeights made =
          cpugen::interleave(format, raw.span<uint8_t>().data(), n, k);
      it = interleaved_.insert_or_assign(r.value, std::pair{version, std::move(made)}).first;
    }
    return &it->second.second;
  }

  CpuOptions options_;
  compiler::Optimized program_;
  compiler::KernelPlan plan_;
  // Few-rows kernel or BLAS for products of a few tens of rows, searched per shape.
  runtime::Searcher searcher_{cpugen::cpu_search_context(), runtime::search_settings_from_env()};
  cpugen::ProductChoices product_choices_{searcher_};
  std::map<std::string, Variant> variants_;  // by the dims fixed to 1: "" is the generic code
  RunStats stats_;
};

// The program of an extraction avoiding the kernel kinds `avoid`.
std::unique_ptr<Executable> compile_program(const Graph& graph, const CpuOptions& options,
                                            const std::vector<std::string>& avoid,
                                            std::vector<std::string>& choices) {
  // Kernels run on OpenMP's thread pool. Asking for its size here also makes this
  // library depend on the OpenMP runtime, so it is never unloaded together with a kernel
  // library while its worker threads are alive.
  const int threads = omp_get_max_threads();
  runtime::PlannedProgram p = runtime::optimize_and_plan(
      graph, options.fuse ? compiler::Fusion::StoreShared : compiler::Fusion::Off,
      {.avoid = avoid});
  choices = p.program.choices;
  const auto gen_start = std::chrono::steady_clock::now();
  cpugen::GeneratedSource src = cpugen::generate_source(*p.program.graph, p.plan);
  const double gen_s = seconds_since(gen_start);
  cpugen::JitResult jit = cpugen::compile_and_load(src.code);
  runtime::dump("source", src.code);
  char stages[160];
  std::snprintf(stages, sizeof stages, "codegen %.3f s, compile %.3f s (%s), %d threads", gen_s,
                jit.compile_seconds, jit.cache_hit ? "cache hit" : "compiled", threads);
  runtime::log_compile("cpu", graph, p, stages);
  return std::make_unique<CpuExecutable>(std::move(p.program), std::move(p.plan),
                                         std::move(src.dims), std::move(jit), options);
}

}  // namespace

std::unique_ptr<Executable> CpuBackend::compile(const Graph& graph) const {
  cpugen::reread_simd_env();
  cpugen::prefetch_tuner(0);  // a malformed LUMINAL_CPU_PREFETCH fails here, not mid-run
  return runtime::compile_searching_extractions(
      graph,
      [options = options_](const Graph& g, const std::vector<std::string>& avoid,
                           std::vector<std::string>& choices) {
        return compile_program(g, options, avoid, choices);
      },
      cpugen::cpu_search_context());
}

}  // namespace luminal
