// The CUDA backend: plan -> render CUDA C++ -> NVRTC -> run on one stream, every value
// in device memory; user inputs are uploaded once per new data version and outputs are
// copied back to the graph.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <unordered_map>

#include "backends/cuda/attention.hpp"
#include "backends/cuda/compile.hpp"
#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/gemv.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "luminal/append_rows_op.hpp"
#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/matmul_op.hpp"
#include "luminal/cuda.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "runtime/env.hpp"
#include "runtime/kernel_errors.hpp"
#include "runtime/kernel_profile.hpp"
#include "runtime/liveness.hpp"
#include "runtime/program.hpp"
#include "runtime/resolved_views.hpp"

namespace luminal {
namespace {

using cudagen::check;
using cudagen::DeviceBuffer;
using cudagen::KernelShape;

class CudaExecutable final : public Executable {
 public:
  CudaExecutable(std::unique_ptr<cudagen::Device> device, runtime::PlannedProgram planned,
                 cudagen::CudaSource source, const cudagen::Cubin& cubin)
      : device_(std::move(device)),
        program_(std::move(planned.program)),
        plan_(std::move(planned.plan)),
        source_(std::move(source)),
        module_(cubin.code),
        gemm_(*device_),
        gemv_(*device_),
        attention_(*device_),
        copy_view_(*device_) {
    const Graph& g = *program_.graph;
    liveness_ = runtime::plan_liveness(g, plan_);
    functions_.resize(plan_.kernels.size(), {nullptr, nullptr});
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const cudagen::KernelLaunch& l = source_.launches[k];
      if (l.shape == KernelShape::Library || l.shape == KernelShape::InRowGroup) continue;
      functions_[k].first = module_.kernel(l.function);
      if (l.shape == KernelShape::Scatter)
        functions_[k].second = module_.kernel(l.scatter_function);
    }
    for (const compiler::Kernel& kn : plan_.kernels)
      numel_.push_back(product(g.node(kn.root).shape));
    std::vector<bool> seen(g.num_nodes(), false);
    for (const compiler::Kernel& kn : plan_.kernels)
      for (NodeId r : kn.reads) {
        r = plan_.canon(r);
        if (liveness_.slot_of[r.value] < 0 && !seen[r.value]) inputs_read_.push_back(r);
        seen[r.value] = true;
      }
    views_.resize(plan_.kernels.size());
    values_.resize(plan_.kernels.size());
    errors_ = DeviceBuffer(3 * sizeof(int64_t) * std::max<size_t>(plan_.kernels.size(), 1));
    if (profiling_) {
      marks_ = std::vector<cudagen::Event>(plan_.kernels.size() + 1);
      profile_.kernels.resize(plan_.kernels.size());
    }
  }

  ~CudaExecutable() override {
    if (profile_.runs) runtime::print_kernel_profile(*program_.graph, plan_, "cuda", profile_);
  }

  // A run like the one before it (the same dims, nothing run on the host, every input
  // where it was) is captured as a CUDA graph, which later runs replay while that holds:
  // one launch instead of one per kernel. The captured run's buffers stay assigned, so
  // the replays write the same ones.
  void run(Graph& user) override {
    const auto run_start = std::chrono::steady_clock::now();
    device_->make_current();
    std::vector<int64_t> dims(std::max<size_t>(source_.dims.size(), 1), 0);
    for (size_t i = 0; i < source_.dims.size(); ++i) {
      auto v = user.dims().get(source_.dims[i]);
      LUM_CHECK(v) << "unbound symbolic dimension '" << source_.dims[i]
                   << "' (bind it with set_dim)";
      dims[i] = *v;
    }
    const bool inputs_moved = upload_inputs(user);
    if (graph_ && dims == graph_dims_ && !inputs_moved) {
      stats_ = graph_stats_;
      stats_.replayed = true;
      check(cudaEventRecord(started_.get(), device_->stream()), "cudaEventRecord");
      graph_->launch(device_->stream());
      check(cudaEventRecord(finished_.get(), device_->stream()), "cudaEventRecord");
      finish(user);
      return;
    }
    drop_graph();
    const bool capture = graphs_ && steady_ && dims == last_dims_ && !inputs_moved;
    last_dims_ = dims;
    stats_ = RunStats{};
    const auto capture_start = std::chrono::steady_clock::now();
    if (capture)
      check(cudaStreamBeginCapture(device_->stream(), cudaStreamCaptureModeRelaxed),
            "cudaStreamBeginCapture");
    else
      check(cudaEventRecord(started_.get(), device_->stream()), "cudaEventRecord");
    check(cudaMemsetAsync(errors_.data(), 0, errors_.bytes(), device_->stream()),
          "cudaMemsetAsync");
    try {
      run_kernels(user, dims);
    } catch (...) {
      if (capture) {  // leave the stream usable, and do not try capturing again
        cudaGraph_t partial = nullptr;
        cudaStreamEndCapture(device_->stream(), &partial);
        if (partial) cudaGraphDestroy(partial);
        steady_ = false;
      }
      throw;
    }
    if (capture) {
      cudaGraph_t graph = nullptr;
      check(cudaStreamEndCapture(device_->stream(), &graph), "cudaStreamEndCapture");
      graph_ = std::make_unique<cudagen::GraphExec>(graph);
      graph_dims_ = dims;
      graph_stats_ = stats_;
      if (runtime::env_has("LUMINAL_LOG", "info"))
        std::fprintf(stderr, "luminal cuda: captured %zu launches as a CUDA graph in %.3f ms\n",
                     launches_, runtime::seconds_since(capture_start) * 1e3);
      check(cudaEventRecord(started_.get(), device_->stream()), "cudaEventRecord");
      graph_->launch(device_->stream());
    }
    check(cudaEventRecord(finished_.get(), device_->stream()), "cudaEventRecord");
    finish(user);
    steady_ = stats_.host_fallbacks == 0;
    if (!graph_) release_values();
    if (profiling_) {
      for (size_t k = 0; k < plan_.kernels.size(); ++k) {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, marks_[k].get(), marks_[k + 1].get()),
              "cudaEventElapsedTime");
        profile_.kernels[k] += ms * 1e-3;
      }
      profile_.run_seconds += runtime::seconds_since(run_start);
      ++profile_.runs;
    }
  }

  RunStats last_run() const override { return stats_; }

 private:
  // Every kernel in order, each value's buffer freed after its last reader.
  void run_kernels(const Graph& user, std::vector<int64_t>& dims) {
    const Graph& g = *program_.graph;
    size_t live = 0;
    launches_ = 0;
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      if (profiling_) check(cudaEventRecord(marks_[k].get(), device_->stream()), "cudaEventRecord");
      const Node& root = g.node(plan_.kernels[k].root);
      const size_t numel = static_cast<size_t>(numel_[k].eval(user.dims()));
      values_[k] = allocate(numel * dtype_size(root.dtype));
      live += values_[k]->bytes();
      stats_.peak_bytes = std::max(stats_.peak_bytes, live);
      ++stats_.nodes_run;
      const cudagen::KernelLaunch& l = source_.launches[k];
      // A row group's members run when its last one comes; what they read stays till then.
      if (l.shape == KernelShape::InRowGroup) continue;
      ++launches_;
      if (l.shape == KernelShape::Library) {
        run_library(user, k, *values_[k]);
      } else {
        launch(user, k, dims);
      }
      const size_t first = l.shape == KernelShape::Rows ? l.group_begin : k;
      for (uint32_t i = liveness_.frees_begin[first]; i < liveness_.frees_begin[k + 1]; ++i) {
        std::optional<DeviceBuffer>& v = values_[static_cast<size_t>(liveness_.frees[i])];
        live -= v->bytes();
        release(std::move(*v));
        v.reset();
      }
    }
    if (profiling_)
      check(cudaEventRecord(marks_.back().get(), device_->stream()), "cudaEventRecord");
  }

  // After the kernels are queued: outputs into the graph, the device time, any error a
  // kernel recorded.
  void finish(Graph& user) {
    store_outputs(user);
    device_->synchronize();
    float ms = 0;
    check(cudaEventElapsedTime(&ms, started_.get(), finished_.get()), "cudaEventElapsedTime");
    stats_.device_seconds = ms * 1e-3;
    raise_kernel_errors();
  }

  // Every input a kernel reads, checked against the bound dims and uploaded where its
  // data is new (weights go over once, not every run); whether one of them now lives at
  // another address (a captured graph would read the old one). New data of the same size
  // goes where the old was.
  bool upload_inputs(const Graph& user) {
    bool moved = false;
    for (NodeId r : inputs_read_) {
      const uint64_t version = user.data_version(program_.source_of[r.value]);
      auto it = uploaded_.find(r.value);
      if (it != uploaded_.end() && it->second.first == version) {
        // The same data under new dims must still fit them, as on the CPU.
        const Node& n = program_.graph->node(r);
        if (!std::all_of(n.shape.begin(), n.shape.end(),
                         [](Expr d) { return d.as_const().has_value(); }))
          checked_input(user, r);
        continue;
      }
      const Buffer* host = checked_input(user, r);
      if (it == uploaded_.end() || it->second.second.bytes() != host->bytes()) {
        it = uploaded_.insert_or_assign(r.value, std::pair{version, DeviceBuffer(host->bytes())})
                 .first;
        moved = true;
      }
      it->second.first = version;
      check(cudaMemcpyAsync(it->second.second.data(), host->data(), host->bytes(),
                            cudaMemcpyHostToDevice, device_->stream()),
            "copying an input to the GPU");
      // The copy reads the host buffer asynchronously; the caller may change it next.
      device_->synchronize();
    }
    return moved;
  }

  void drop_graph() {
    if (!graph_) return;
    graph_.reset();
    release_values();
  }

  void release_values() {
    for (std::optional<DeviceBuffer>& v : values_)
      if (v) release(std::move(*v)), v.reset();
  }

  // Launches generated kernel k (and a Scatter's ordered second kernel, or the whole of
  // a row group that k closes).
  void launch(const Graph& user, size_t k, std::vector<int64_t>& dims) {
    const cudagen::KernelLaunch& l = source_.launches[k];
    const int64_t threads = l.threads.eval(user.dims());
    if (threads <= 0) return;
    const size_t first = l.shape == KernelShape::Rows ? l.group_begin : k;
    // cudaLaunchKernel takes the address of each parameter's value.
    std::vector<void*>& ptrs = launch_pointers_;
    ptrs.clear();
    for (size_t m = first; m <= k; ++m) {
      ptrs.push_back(values_[m]->data());
      for (NodeId r : plan_.kernels[m].reads) ptrs.push_back(const_cast<void*>(operand(r)));
    }
    int64_t* err = static_cast<int64_t*>(errors_.data()) + 3 * first;
    std::vector<void*>& args = launch_args_;
    args.clear();
    for (void*& p : ptrs) args.push_back(&p);
    args.push_back(&err);
    args.push_back(dims.data());
    int64_t block = cudagen::kMaxBlock, blocks = (threads + block - 1) / block;
    if (l.shape == KernelShape::Rows) {  // a block per row, a thread per element up to the most
      const int64_t len = l.row_len.eval(user.dims());
      block = std::clamp<int64_t>((len + 31) / 32 * 32, 32, cudagen::kMaxBlock);
      blocks = threads;
    }
    const int64_t most = int64_t{device_->multiprocessors()} * (4096 / block);
    check(cudaLaunchKernel(functions_[k].first,
                           dim3(static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, most))),
                           dim3(static_cast<unsigned>(block)), args.data(),
                           static_cast<size_t>(l.shared_bytes), device_->stream()),
          "launching a generated kernel");
    if (functions_[k].second)
      check(cudaLaunchKernel(functions_[k].second, dim3(1), dim3(32), args.data(), 0,
                             device_->stream()),
            "launching a scatter kernel");
  }

  // Library kernels: MatMul through the one-row kernel or cuBLASLt, Attention through its
  // kernel; anything else (and one of those its kernels cannot read) by its reference
  // semantics on the host, its operands copied over and back.
  void run_library(const Graph& user, size_t k, DeviceBuffer& out) {
    const Node& n = program_.graph->node(plan_.kernels[k].root);
    const std::vector<ConcreteView>& views = views_[k].get(n, user.dims());
    if (dynamic_cast<const compiler::MatMulOp*>(n.custom.get())) {
      const DType a = source_dtype(n, 0), b = source_dtype(n, 1);
      if (a == b && a == n.dtype && (a == DType::F32 || a == DType::F16 || a == DType::BF16)) {
        const void* a_data = operand(n.inputs[0].source);
        const void* b_data = operand(n.inputs[1].source);
        if (gemv_.run(views[0], a_data, views[1], b_data, a, out.data()) ||
            gemm_.run(views[0], a_data, views[1], b_data, a, out.data()))
          return;
      }
    } else if (const auto* at = dynamic_cast<const compiler::AttentionOp*>(n.custom.get());
               at && n.dtype == DType::F32 && source_dtype(n, 3) == DType::Bool) {
      if (attention_.run(views[0], operand(n.inputs[0].source), source_dtype(n, 0), views[1],
                         operand(n.inputs[1].source), source_dtype(n, 1), views[2],
                         operand(n.inputs[2].source), source_dtype(n, 2), views[3],
                         operand(n.inputs[3].source), at->scale, static_cast<float*>(out.data())))
        return;
    } else if (dynamic_cast<const AppendRowsOp*>(n.custom.get())) {
      if (append_rows(n, views, out)) return;
    }
    ++stats_.host_fallbacks;
    std::vector<Buffer> in;
    std::vector<std::vector<int64_t>> shapes;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      // A user input is read where it is set; a computed value is copied back first.
      const NodeId r = plan_.canon(n.inputs[i].source);
      const int32_t slot = liveness_.slot_of[r.value];
      const Buffer computed = slot >= 0 ? download(static_cast<size_t>(slot)) : Buffer();
      in.push_back(read_view(slot >= 0 ? computed : *checked_input(user, r), views[i]));
      shapes.push_back(views[i].dims);
    }
    std::vector<int64_t> out_shape;
    for (Expr d : n.shape) out_shape.push_back(d.eval(user.dims()));
    const Buffer result = n.custom->run(in, shapes, out_shape, n.dtype);
    LUM_CHECK(result.bytes() == out.bytes()) << "internal: " << n.custom->name() << " produced "
                                             << result.bytes() << " bytes, not " << out.bytes();
    check(cudaMemcpyAsync(out.data(), result.data(), result.bytes(), cudaMemcpyHostToDevice,
                          device_->stream()),
          "copying a host-computed value to the GPU");
    device_->synchronize();  // `result` is freed on return
  }

  // concat({base, rows}, 0): each operand copied into its part of the output. (Growing
  // a donated base in place needs inputs that stay on the device.)
  bool append_rows(const Node& n, const std::vector<ConcreteView>& views, DeviceBuffer& out) {
    if (source_dtype(n, 0) != n.dtype || source_dtype(n, 1) != n.dtype) return false;
    const size_t esize = dtype_size(n.dtype);
    const size_t base_bytes = static_cast<size_t>(views[0].numel()) * esize;
    LUM_CHECK(base_bytes + static_cast<size_t>(views[1].numel()) * esize == out.bytes())
        << "internal: AppendRows operands do not add up to its output";
    auto* dst = static_cast<char*>(out.data());
    // Should the second copy be refused, the caller's fallback overwrites the whole output.
    return !views[0].has_mask() && !views[1].has_mask() &&
           copy_view_.run(views[0], operand(n.inputs[0].source), esize, dst) &&
           copy_view_.run(views[1], operand(n.inputs[1].source), esize, dst + base_bytes);
  }

  DType source_dtype(const Node& n, size_t i) const {
    return program_.graph->node(plan_.canon(n.inputs[i].source)).dtype;
  }

  // Computed value `slot` (kernel `slot`'s output) copied to the host.
  Buffer download(size_t slot) {
    const DType t = program_.graph->node(plan_.kernels[slot].root).dtype;
    const DeviceBuffer& v = *values_[slot];
    Buffer host(t, v.bytes() / dtype_size(t), Buffer::Uninitialized{});
    check(cudaMemcpyAsync(host.data(), v.data(), v.bytes(), cudaMemcpyDeviceToHost,
                          device_->stream()),
          "copying a value from the GPU");
    device_->synchronize();
    return host;
  }

  // The device address of a kernel operand: a computed value, or a user input (uploaded
  // at the start of the run).
  const void* operand(NodeId r) {
    r = plan_.canon(r);
    const int32_t slot = liveness_.slot_of[r.value];
    if (slot < 0) return uploaded_.at(r.value).second.data();
    LUM_ASSERT(values_[static_cast<size_t>(slot)]) << "%" << r.value << " has no value";
    return values_[static_cast<size_t>(slot)]->data();
  }

  const Buffer* checked_input(const Graph& user, NodeId r) const {
    const Node& n = program_.graph->node(r);
    LUM_ASSERT(n.op == Op::Input) << "%" << r.value << " has no value";
    const Buffer* b = user.data(program_.source_of[r.value]);
    check_input_data(n, r, b, user.dims());
    return b;
  }

  void store_outputs(Graph& user) {
    const Graph& g = *program_.graph;
    for (const auto& [user_out, node] : program_.outputs) {
      const NodeId c = plan_.canon(node);
      const int32_t slot = liveness_.slot_of[c.value];
      if (slot < 0) {
        if (g.node(c).op == Op::Input && program_.source_of[c.value] != user_out)
          user.set_data(user_out, *checked_input(user, c));
        continue;
      }
      user.set_data(user_out, download(static_cast<size_t>(slot)));
    }
  }

  void raise_kernel_errors() {
    std::vector<int64_t> err(errors_.bytes() / sizeof(int64_t));
    check(cudaMemcpy(err.data(), errors_.data(), errors_.bytes(), cudaMemcpyDeviceToHost),
          "reading kernel errors");
    for (size_t k = 0; k < plan_.kernels.size(); ++k)
      if (err[3 * k]) runtime::raise_kernel_error(*program_.graph, plan_.kernels[k], &err[3 * k]);
  }

  // Freed device buffers by size, reused by later kernels of this run and the next: the
  // same sizes recur in every layer and every step.
  DeviceBuffer allocate(size_t bytes) {
    DeviceBuffer b;
    if (auto it = pool_.find(bytes); it != pool_.end()) {
      b = std::move(it->second);
      pool_.erase(it);
    } else {
      b = DeviceBuffer(bytes);
    }
    // Test binaries set LUMINAL_CPU_POISON: outputs start as all-ones bytes (NaN for
    // floats) on every backend, so an element a kernel leaves unwritten shows.
    if (poison_ && bytes)
      check(cudaMemsetAsync(b.data(), 0xFF, bytes, device_->stream()), "cudaMemsetAsync");
    return b;
  }
  void release(DeviceBuffer b) { pool_.emplace(b.bytes(), std::move(b)); }

  std::unique_ptr<cudagen::Device> device_;
  compiler::Optimized program_;
  compiler::KernelPlan plan_;
  cudagen::CudaSource source_;
  cudagen::Module module_;
  cudagen::Gemm gemm_;
  cudagen::Gemv gemv_;
  cudagen::Attention attention_;
  cudagen::ViewCopy copy_view_;
  runtime::Liveness liveness_;
  std::vector<std::pair<const void*, const void*>> functions_;  // by kernel; null: none
  std::vector<Expr> numel_;                                     // by kernel: output elements
  std::vector<void*> launch_pointers_, launch_args_;            // reused by every launch
  std::vector<NodeId> inputs_read_;  // user inputs the kernels read, each once
  std::vector<runtime::ResolvedViews> views_;
  std::vector<std::optional<DeviceBuffer>> values_;  // by kernel, during a run
  std::unordered_map<uint32_t, std::pair<uint64_t, DeviceBuffer>> uploaded_;  // by input node
  std::multimap<size_t, DeviceBuffer> pool_;
  DeviceBuffer errors_;                // three int64 per kernel (runtime/kernel_errors.hpp)
  cudagen::Event started_, finished_;  // around the kernels, for RunStats::device_seconds
  const bool poison_ = runtime::env_has("LUMINAL_CPU_POISON", "1");
  RunStats stats_;
  // LUMINAL_PROFILE=1: each kernel's time between events recorded around it (a row
  // group's members before its last show none), summed over runs and printed on
  // destruction. Runs are not captured while profiling.
  const bool profiling_ = runtime::env_has("LUMINAL_PROFILE", "1");
  std::vector<cudagen::Event> marks_;  // before each kernel, and after the last
  runtime::KernelProfile profile_;
  // CUDA-graph capture and replay (see run); LUMINAL_CUDA_GRAPHS=0 turns it off.
  const bool graphs_ = !runtime::env_has("LUMINAL_CUDA_GRAPHS", "0") && !profiling_;
  bool steady_ = false;  // the last run ran every kernel on the GPU
  std::vector<int64_t> last_dims_, graph_dims_;
  std::unique_ptr<cudagen::GraphExec> graph_;
  RunStats graph_stats_;
  size_t launches_ = 0;  // by the last run: kernels and library calls
};

}  // namespace

bool cuda_available(std::string* why) {
  const std::string reason = cudagen::why_unavailable(0);
  if (why) *why = reason;
  return reason.empty();
}

namespace cudagen {

CompiledProgram compile_program(const Graph& graph, const std::string& arch, bool fuse) {
  CompiledProgram c{runtime::optimize_and_plan(
                        graph, fuse ? compiler::Fusion::RecomputeShared : compiler::Fusion::Off),
                    {},
                    {}};
  const auto gen_start = std::chrono::steady_clock::now();
  c.source = generate_cuda_source(*c.planned.program.graph, c.planned.plan);
  const double gen_s = runtime::seconds_since(gen_start);
  runtime::dump("source", c.source.code);
  c.cubin = compile_cubin(c.source.code, arch);
  char stages[160];
  std::snprintf(stages, sizeof stages, "codegen %.3f s, NVRTC %.3f s (%s) for %s", gen_s,
                c.cubin.compile_seconds, c.cubin.cache_hit ? "cache hit" : "compiled",
                arch.c_str());
  runtime::log_compile("cuda", graph, c.planned, stages);
  return c;
}

}  // namespace cudagen

std::unique_ptr<Executable> CudaBackend::compile(const Graph& graph) const {
  auto device = std::make_unique<cudagen::Device>(options_.device);
  cudagen::CompiledProgram c = cudagen::compile_program(graph, device->arch(), options_.fuse);
  return std::make_unique<CudaExecutable>(std::move(device), std::move(c.planned),
                                          std::move(c.source), c.cubin);
}

}  // namespace luminal
