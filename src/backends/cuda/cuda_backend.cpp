// The CUDA backend: plan -> render CUDA C++ -> NVRTC -> run on one stream, every value
// in device memory; user inputs are uploaded once per new data version and outputs are
// copied back to the graph.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <limits>
#include <optional>
#include <thread>
#include <unordered_map>

#include "backends/cuda/arena.hpp"
#include "backends/cuda/attention.hpp"
#include "backends/cuda/attention_grad.hpp"
#include "backends/cuda/compile.hpp"
#include "backends/cuda/copy_view.hpp"
#include "backends/cuda/device.hpp"
#include "backends/cuda/device_storage.hpp"
#include "backends/cuda/device_trials.hpp"
#include "backends/cuda/expert_products.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/gemv.hpp"
#include "backends/cuda/kernel_trace.hpp"
#include "backends/cuda/map_groups.hpp"
#include "backends/cuda/mixed_products.hpp"
#include "backends/cuda/nvrtc.hpp"
#include "backends/cuda/quant_products.hpp"
#include "backends/cuda/shared_products.hpp"
#include "backends/cuda/top_k.hpp"
#include "backends/cuda/window_products.hpp"
#include "luminal/append_rows_op.hpp"
#include "luminal/collective.hpp"
#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/matmul_op.hpp"
#include "luminal/cuda.hpp"
#include "luminal/error.hpp"
#include "luminal/expert_matmul_op.hpp"
#include "luminal/graph.hpp"
#include "luminal/quant.hpp"
#include "luminal/reference.hpp"
#include "luminal/top_k_op.hpp"
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

using cudagen::check;
using cudagen::DeviceBuffer;
using cudagen::KernelShape;

class CudaExecutable final : public Executable {
  // A run's events (its start and end, for RunStats::device_seconds; its end is also what
  // host reads of its handed-over outputs wait for) and its kernels' error words, copied
  // back behind it. Two, used in turn: a queued run is settled by the next call.
  struct RunRecord {
    explicit RunRecord(size_t error_bytes) : errors(error_bytes) {}
    cudagen::Event started;
    std::shared_ptr<cudagen::Event> finished = std::make_shared<cudagen::Event>();
    cudagen::Event copied;
    cudagen::PinnedBuffer errors;
    bool open = false;  // closed (queued) and not yet settled
  };

 public:
  CudaExecutable(std::unique_ptr<cudagen::Device> device, runtime::PlannedProgram planned,
                 cudagen::CudaSource source, const std::vector<cudagen::Cubin>& cubins)
      : device_(std::move(device)),
        program_(std::move(planned.program)),
        plan_(std::move(planned.plan)),
        source_(std::move(source)),
        searcher_(cudagen::search_context(*device_), runtime::search_settings_from_env()),
        gemm_(*device_, searcher_),
        gemv_(*device_, searcher_),
        attention_(*device_, searcher_),
        copy_view_(*device_),
        mixed_(*device_, gemv_, gemm_, copy_view_),
        quant_(*device_, searcher_, gemm_, copy_view_),
        errors_(error_bytes(plan_)),
        records_{RunRecord(errors_.bytes()), RunRecord(errors_.bytes())} {
    const Graph& g = *program_.graph;
    liveness_ = runtime::plan_liveness(g, plan_);
    for (const cudagen::Cubin& c : cubins)
      modules_.push_back(std::make_unique<cudagen::Module>(c.code));
    functions_.resize(plan_.kernels.size(), {nullptr, nullptr});
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const cudagen::KernelLaunch& l = source_.launches[k];
      if (l.shape == KernelShape::Library || l.shape == KernelShape::InGroup) continue;
      functions_[k].first = modules_.at(l.part)->kernel(l.function);
      if (l.shape == KernelShape::Scatter)
        functions_[k].second = modules_.at(l.scatter_part)->kernel(l.scatter_function);
      if (cudagen::tracing()) cudagen::trace_name(functions_[k].first, describe(k), true);
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
    computed_masks_.resize(plan_.kernels.size());
    for (size_t k = 0; k < plan_.kernels.size(); ++k)
      if (plan_.kernels[k].computed_mask)
        computed_masks_[k].emplace(*plan_.kernels[k].computed_mask);
    value_ptr_.assign(plan_.kernels.size(), nullptr);
    destination_.assign(plan_.kernels.size(), nullptr);
    owned_.resize(plan_.kernels.size());
    // What is released after each kernel: a group's members' reads stay till its last.
    releases_.assign(plan_.kernels.size(), {0, 0});
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const cudagen::KernelLaunch& l = source_.launches[k];
      if (l.shape == KernelShape::InGroup) continue;
      releases_[k] = {liveness_.frees_begin[group_begin(k)], liveness_.frees_begin[k + 1]};
    }
    find_appendable_bases();
    append_of_rows_.assign(plan_.kernels.size(), std::nullopt);
    prepared_cache_.resize(plan_.kernels.size());
    settled_.resize(plan_.kernels.size());
    // (LUMINAL_CUDA_ROWS_IN_PLACE=0: appended rows computed apart and copied, to measure.)
    if (!runtime::env_has("LUMINAL_CUDA_ROWS_IN_PLACE", "0")) find_rows_written_in_place();
    // A run of products of the same activations is launched with its first kernel, which
    // writes the others' values before their turn: only where no value dies inside the
    // run, whose memory one of theirs could take.
    // (LUMINAL_CUDA_SHARED_PRODUCTS=0: each alone, to measure what this is worth.)
    shared_runs_ = runtime::env_has("LUMINAL_CUDA_SHARED_PRODUCTS", "0")
                       ? std::vector<uint32_t>(plan_.kernels.size(), 1)
                       : cudagen::shared_product_runs(g, plan_);
    for (size_t k = 0; k < shared_runs_.size(); ++k)
      for (size_t j = k; j + 1 < k + shared_runs_[k]; ++j)
        if (releases_[j].first != releases_[j].second) shared_runs_[k] = 1;
    // (LUMINAL_CUDA_COLLECTIVES_BESIDE=0: every collective inside the graphs, the work
    // after it waiting for it, to measure what overlapping them is worth.)
    collective_beside_.assign(plan_.kernels.size(), false);
    if (!runtime::env_has("LUMINAL_CUDA_COLLECTIVES_BESIDE", "0")) find_collectives_beside();
    spares_ = std::make_shared<cudagen::SpareBuffers>();
    dims_ = DeviceBuffer(sizeof(int64_t) * std::max<size_t>(source_.dims.size(), 1));
    dims_arg_ = dims_.data();
    if (std::any_of(source_.launches.begin(), source_.launches.end(),
                    [](const cudagen::KernelLaunch& l) { return l.parted; })) {
      part_scratch_ = DeviceBuffer(cudagen::kPartScratchBytes);
      check(cudaMemsetAsync(part_scratch_.data(), 0, part_scratch_.bytes(), device_->stream()),
            "cudaMemsetAsync");
      part_scratch_arg_ = part_scratch_.data();
    }
    clear_errors();
    if (profiling_) {
      marks_ = std::vector<cudagen::Event>(plan_.kernels.size() + 1);
      profile_.kernels.resize(plan_.kernels.size());
      first_run_.kernels.resize(plan_.kernels.size());
    }
  }

  ~CudaExecutable() override {
    if (cudagen::tracing()) {
      try {
        std::fputs(cudagen::trace_report().c_str(), stderr);
      } catch (const Error& e) {  // (a destructor must not throw)
        std::fprintf(stderr, "luminal cuda: no kernel trace: %s\n", e.what());
      }
    }
    device_->recorder().drop();  // (its graphs launch kernels of modules_ and the libraries')
    for (RunRecord& r : records_)  // (a queued run may still copy its error words back)
      if (r.open) cudaEventSynchronize(r.copied.get());
    if (graph_runs_ && runtime::env_has("LUMINAL_LOG", "info")) {
      const cudagen::StreamRecorder::Replay& t = graph_totals_;
      const double recorded = static_cast<double>(std::max<size_t>(graph_runs_, 1));
      std::fprintf(stderr,
                   "luminal cuda: %zu of %zu runs as CUDA graphs (%zu graphs instantiated in "
                   "%.1f ms); a recorded run: %.1f nodes, %.1f given new parameters in %.3f ms, "
                   "%.1f launched one by one\n",
                   graph_runs_, runs_, t.instantiated, t.instantiate_seconds * 1e3,
                   static_cast<double>(t.nodes) / recorded,
                   static_cast<double>(t.updated) / recorded, t.update_seconds / recorded * 1e3,
                   static_cast<double>(t.queued) / recorded);
      const HostPhases& h = host_phases_;
      const double n = static_cast<double>(std::max<size_t>(h.runs, 1)) / 1e3;
      std::fprintf(stderr,
                   "luminal cuda: the host's ms a run: inputs %.3f, placing values %.3f, dims "
                   "%.3f, recording %.3f, replaying %.3f, outputs and waiting %.3f\n",
                   h.inputs / n, h.place / n, h.dims / n, h.record / n, h.replay / n, h.finish / n);
    }
    if (profile_.runs)
      runtime::print_kernel_profile(*program_.graph, plan_, "cuda, runs after the first", profile_);
    else if (first_run_.runs)
      runtime::print_kernel_profile(*program_.graph, plan_, "cuda, one run", first_run_);
  }

  // Runs after the first are recorded (StreamRecorder) and run as CUDA graphs, one a
  // segment of the run: the first recording of some work builds them, later ones update
  // the nodes whose parameters moved (a decode step's cache length, where its new rows
  // go, buffers handed over), so a step is a few launches. A run exactly like the one the
  // graphs hold (the same dims, every input where it was, nothing handed over or grown in
  // place) launches them again without going through the kernels at all. Work that needs
  // the stream itself (a search's timed runs, a kernel on the host, a cache moved to more
  // memory) queues what was recorded, and the rest of that run is launched kernel by
  // kernel.
  void run(Graph& user) override { run(user, /*wait=*/true); }

  // Returns without waiting for the GPU where every output stays on it, so a decoding
  // loop prepares its next step while the device runs this one.
  void queue(Graph& user) override {
    const bool all_on_device =
        std::all_of(program_.outputs.begin(), program_.outputs.end(),
                    [&](const auto& o) { return user.is_kept_on_device(o.first); });
    run(user, !all_on_device || profiling_ || cudagen::tracing());
  }

  // Queued between two events: one the caller's stream reaches before the run, the other
  // this stream after it.
  void queue_on(Graph& user, void* stream) override {
    device_->make_current();
    const auto theirs = static_cast<cudaStream_t>(stream);
    check(cudaEventRecord(theirs_reached_.get(), theirs), "cudaEventRecord");
    check(cudaStreamWaitEvent(device_->stream(), theirs_reached_.get(), 0), "cudaStreamWaitEvent");
    queue(user);
    check(cudaEventRecord(ours_reached_.get(), device_->stream()), "cudaEventRecord");
    check(cudaStreamWaitEvent(theirs, ours_reached_.get(), 0), "cudaStreamWaitEvent");
  }

  void wait() override {
    if (!records_[0].open && !records_[1].open) return;
    stats_.device_seconds = 0;
    for (size_t i : {record_ ^ 1, record_})
      if (records_[i].open) settle(records_[i]);
  }

  // A run, settled before returning where `wait` (see finish).
  void run(Graph& user, bool wait) {
    const auto run_start = std::chrono::steady_clock::now();
    device_->make_current();
    // The run before the last may still be open where an error cut the last one short.
    record_ ^= 1;
    if (records_[record_].open) settle(records_[record_]);
    RunRecord& rec = records_[record_];
    std::vector<int64_t> dims(std::max<size_t>(source_.dims.size(), 1), 0);
    for (size_t i = 0; i < source_.dims.size(); ++i)
      dims[i] = runtime::bound_dim(user.dims(), source_.dims[i]);
    const bool inputs_moved = upload_inputs(user);
    const bool outputs_moved = find_destinations(user);
    // Outputs left on the device are handed over, so their buffers are new every run
    // (those written into the caller's memory are where the caller put them).
    const bool hands_over =
        std::any_of(program_.outputs.begin(), program_.outputs.end(), [&](const auto& o) {
          return user.is_kept_on_device(o.first) && !user.is_written_into(o.first);
        });
    cudagen::StreamRecorder& recorder = device_->recorder();
    // (A trace notes each run's launches as they are made: none are launched again unseen.)
    if (repeatable_ && dims == graph_dims_ && !inputs_moved && !outputs_moved && !hands_over &&
        !cudagen::tracing()) {
      stats_ = graph_stats_;
      stats_.graph_nodes_updated = 0;
      ++runs_, ++graph_runs_;
      if (alone_) device_->hold_stream();
      check(cudaEventRecord(rec.started.get(), device_->stream()), "cudaEventRecord");
      recorder.launch_again();
      copy_to_destinations(user);
      close(rec);
      stats_.issue_seconds = runtime::seconds_since(run_start);
      finish(user, wait);
      return;
    }
    // (The host's time in each part of a run that goes through the kernels, for
    // LUMINAL_LOG=info.)
    auto phase_end = [&, last = run_start](double HostPhases::*phase) mutable {
      const auto now = std::chrono::steady_clock::now();
      host_phases_.*phase += std::chrono::duration<double>(now - last).count();
      last = now;
    };
    phase_end(&HostPhases::inputs);
    place_values(user, dims);
    phase_end(&HostPhases::place);
    stats_ = RunStats{};
    grew_ = false;
    if (alone_) device_->hold_stream();
    check(cudaEventRecord(rec.started.get(), device_->stream()), "cudaEventRecord");
    if (dims != uploaded_dims_) {  // (pageable memory: the copy has read it on return)
      check(cudaMemcpyAsync(dims_.data(), dims.data(), dims.size() * sizeof(int64_t),
                            cudaMemcpyHostToDevice, device_->stream()),
            "copying the dims to the GPU");
      uploaded_dims_ = dims;
    }
    if (graphs_ && ran_) device_->begin_recording();
    phase_end(&HostPhases::dims);
    try {
      run_kernels(user);
    } catch (...) {
      recorder.flush();  // what was recorded is queued, as it would have been launched
      device_->release_stream();
      throw;
    }
    ran_ = true;
    stats_.launches = launches_;
    phase_end(&HostPhases::record);
    if (recorder.recording()) {
      const cudagen::StreamRecorder::Replay r = recorder.replay();
      stats_.replayed = r.queued == 0;
      stats_.graph_nodes_updated = r.updated;
      graph_totals_ += r;
    }
    ++runs_;
    graph_runs_ += stats_.replayed;
    copy_to_destinations(user);
    close(rec);
    stats_.issue_seconds = runtime::seconds_since(run_start);
    if (cudagen::tracing()) cudagen::trace_run_end();
    phase_end(&HostPhases::replay);
    finish(user, wait);
    phase_end(&HostPhases::finish);
    ++host_phases_.runs;
    repeatable_ = stats_.replayed && !hands_over && !grew_;
    graph_dims_ = dims;
    graph_stats_ = stats_;
    if (profiling_) {
      runtime::KernelProfile& p = first_run_.runs ? profile_ : first_run_;
      for (size_t k = 0; k < plan_.kernels.size(); ++k) {
        float ms = 0;
        check(cudaEventElapsedTime(&ms, marks_[k].get(), marks_[k + 1].get()),
              "cudaEventElapsedTime");
        p.kernels[k] += ms * 1e-3;
      }
      p.run_seconds += runtime::seconds_since(run_start);
      ++p.runs;
    }
  }

  RunStats last_run() const override { return stats_; }
  void time_device_alone(bool on) override { alone_ = on; }

  /// The library modules compiling in the background: waited for on destruction.
  void keep_compiling(std::vector<std::future<void>> tasks) {
    library_compiles_ = std::move(tasks);
  }

  // Uploads the inputs already set whose shapes are fixed (a model's weights), so the
  // first run's time is its kernels' alone (a prompt's time to first token), and a model
  // too large for the GPU stops here, before any run.
  void prepare(const Graph& user, const Bindings&) override {
    device_->make_current();
    check_uploads_fit(user);
    for (NodeId r : inputs_read_) {
      const NodeId source = program_.source_of[r.value];
      const Node& n = program_.graph->node(r);
      const bool fixed = std::all_of(n.shape.begin(), n.shape.end(),
                                     [](Expr d) { return d.as_const().has_value(); });
      if (fixed && !user.device_data(source) && user.data(source)) upload(user, r);
    }
  }

 private:
  // Every kernel in order, into the places place_values() found.
  void run_kernels(Graph& user) {
    size_t live = 0;
    launches_ = 0;
    beside_.clear();
    std::fill(settled_.begin(), settled_.end(), 0);
    attention_.begin_run();
    size_t shared_until = 0;  // kernels before it ran with the first of their run
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      if (profiling_) check(cudaEventRecord(marks_[k].get(), device_->stream()), "cudaEventRecord");
      const size_t bytes = value_bytes_[k];
      bool grown = false;
      // An append whose rows their kernel already wrote into the cache: nothing to launch.
      const bool rows_written = prepared_cache_[k].data() != nullptr;
      if (sizes_[k] > 0) {
        value_ptr_[k] = static_cast<char*>(arena_.data()) + arena_plan_.offsets[k];
        if (const std::optional<size_t> j = append_of_rows_[k])  // rows written in the cache
          if (std::optional<GrownCache> cache = take_cache(user, *j, value_bytes_[*j])) {
            value_ptr_[k] = static_cast<char*>(cache->buffer.data()) + cache->old_bytes;
            prepared_cache_[*j] = std::move(cache->buffer);
          }
      } else if (std::optional<DeviceBuffer> in_place = grown_in_place(user, k, bytes)) {
        owned_[k] = std::move(*in_place);
        value_ptr_[k] = owned_[k].data();
        grown = true;
      } else if (destination_[k]) {
        value_ptr_[k] = destination_[k];
      } else {
        if (owned_[k].bytes() != bytes) owned_[k] = spares_->take(bytes);
        value_ptr_[k] = owned_[k].data();
      }
      if (!beside_.empty() && waits_for_collectives(k)) join_collectives();
      // Test binaries set LUMINAL_CPU_POISON: outputs start as all-ones bytes (NaN for
      // floats) on every backend, so an element a kernel leaves unwritten shows.
      const bool done = k < shared_until;
      if (poison_ && bytes && !grown && !done)
        check(device_->memset(value_ptr_[k], 0xFF, bytes), "cudaMemsetAsync");
      live += bytes;
      stats_.peak_bytes = std::max(stats_.peak_bytes, live);
      ++stats_.nodes_run;
      const cudagen::KernelLaunch& l = source_.launches[k];
      // A group's members run when its last one comes; what they read stays till then.
      if (l.shape == KernelShape::InGroup) continue;
      if (!done && !rows_written) {
        ++launches_;
        if (shared_runs_[k] > 1 && run_shared_products(user, k))
          shared_until = k + shared_runs_[k];
        else if (!grown && l.shape == KernelShape::Library)
          run_library(user, k, value_ptr_[k], bytes);
        else if (!grown)
          launch(user, k);
      }
      if (checking_ && !ran_) check_values(user, k + 1);
      for (uint32_t i = releases_[k].first; i < releases_[k].second; ++i)
        live -= value_bytes_[static_cast<size_t>(liveness_.frees[i])];
    }
    if (profiling_)
      check(cudaEventRecord(marks_.back().get(), device_->stream()), "cudaEventRecord");
  }

  // Each value's size under the bound dims and its place: a range of the arena, or
  // memory of its own for a value the run may take from an input (a cache grown in
  // place), hands over or writes into the caller's memory (an output kept on the
  // device). The arena is planned again only where a value outgrows its range: a value
  // whose size follows the dims gets up to an eighth more room, so a decoding step's
  // growing values (a mask over the keys) keep their places, and the step spends no host
  // time planning or giving graph nodes new addresses.
  void place_values(const Graph& user, const std::vector<int64_t>& dims) {
    std::vector<bool> handed(plan_.kernels.size(), false);
    for (const auto& [user_out, node] : program_.outputs)
      if (const int32_t slot = liveness_.slot_of[plan_.canon(node).value];
          slot >= 0 && user.is_kept_on_device(user_out))
        handed[static_cast<size_t>(slot)] = true;
    if (dims == placed_dims_ && handed == placed_handed_ && !value_bytes_.empty()) return;
    const Graph& g = *program_.graph;
    if (value_bytes_.empty()) {
      value_bytes_.resize(plan_.kernels.size());
      sizes_.resize(plan_.kernels.size());
      for (size_t k = 0; k < plan_.kernels.size(); ++k)
        if (const std::optional<int64_t> n = numel_[k].as_const())
          value_bytes_[k] =
              static_cast<size_t>(*n) * dtype_size(g.node(plan_.kernels[k].root).dtype);
        else
          sized_by_dims_.push_back(k);
    }
    for (size_t k : sized_by_dims_)
      value_bytes_[k] = static_cast<size_t>(numel_[k].eval(user.dims())) *
                        dtype_size(g.node(plan_.kernels[k].root).dtype);
    bool fits = handed == placed_handed_ && !placed_dims_.empty();
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      sizes_[k] = handed[k] || appendable_base_[k] ? 0 : value_bytes_[k];
      fits = fits && sizes_[k] <= room_[k] && (sizes_[k] == 0) == (room_[k] == 0);
    }
    if (!fits) {
      room_ = sizes_;
      for (size_t k : sized_by_dims_) room_[k] = cudagen::with_headroom(sizes_[k]);
      arena_plan_ = cudagen::plan_arena(room_, releases_, liveness_.frees);
    }
    if (arena_.bytes() < arena_plan_.bytes) {  // room to spare, for sizes that keep growing
      arena_ = DeviceBuffer(arena_plan_.bytes + arena_plan_.bytes / 4);
      if (runtime::env_has("LUMINAL_LOG", "info"))
        std::fprintf(stderr, "luminal cuda: an arena of %.1f MiB for %zu values\n",
                     static_cast<double>(arena_.bytes()) / (1 << 20), plan_.kernels.size());
    }
    placed_dims_ = dims;
    placed_handed_ = std::move(handed);
  }

  // After a run's kernels are queued: its end marked, and its kernels' error words
  // copied back behind it.
  void close(RunRecord& rec) {
    check(cudaEventRecord(rec.finished->get(), device_->stream()), "cudaEventRecord");
    check(cudaMemcpyAsync(rec.errors.data(), errors_.data(), errors_.bytes(),
                          cudaMemcpyDeviceToHost, device_->stream()),
          "copying kernel errors back");
    check(cudaEventRecord(rec.copied.get(), device_->stream()), "cudaEventRecord");
    device_->release_stream();  // (held where timed alone)
    rec.open = true;
  }

  // Outputs into the graph; then the queued run before this one settled (the GPU has this
  // one's work meanwhile), and this one where the caller waits.
  void finish(Graph& user, bool wait) {
    store_outputs(user, records_[record_].finished);
    stats_.device_seconds = 0;
    if (RunRecord& before = records_[record_ ^ 1]; before.open) settle(before);
    if (wait) settle(records_[record_]);
  }

  // Waits for a closed run: its device time into stats_, any error a kernel recorded raised.
  void settle(RunRecord& rec) {
    rec.open = false;
    check(cudaEventSynchronize(rec.copied.get()), "a CUDA kernel failed");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, rec.started.get(), rec.finished->get()),
          "cudaEventElapsedTime");
    stats_.device_seconds += ms * 1e-3;
    const auto* err = static_cast<const int64_t*>(rec.errors.data());
    for (size_t k = 0; k < plan_.kernels.size(); ++k)
      if (err[3 * k]) {
        forget_errors(rec);
        runtime::raise_kernel_error(*program_.graph, plan_.kernels[k], &err[3 * k]);
      }
  }

  // The error words stay as they are from one run to the next: only a failing kernel sets
  // them, so they are cleared once, here, and again after one is reported. (A memset in
  // every run was a graph node ahead of each run's first kernel: a lone one-row product
  // 0.0358 -> 0.0346 ms without it, one decode step 0.0461 -> 0.0450, bench/results/cuda.md.)
  void clear_errors() {
    check(cudaMemsetAsync(errors_.data(), 0, errors_.bytes(), device_->stream()),
          "cudaMemsetAsync");
    check(cudaStreamSynchronize(device_->stream()), "clearing the kernels' error words");
  }

  // After `raised`'s errors: the words cleared, and a run queued after it (which copied
  // the same words back) made to forget the ones it only inherited.
  void forget_errors(const RunRecord& raised) {
    clear_errors();
    const auto* was = static_cast<const int64_t*>(raised.errors.data());
    for (RunRecord& r : records_) {
      if (&r == &raised || !r.open) continue;
      auto* err = static_cast<int64_t*>(r.errors.data());
      for (size_t i = 0; i < 3 * plan_.kernels.size(); i += 3)
        if (std::equal(err + i, err + i + 3, was + i)) err[i] = 0;
    }
  }

  // Every input a kernel reads, checked against the bound dims and found on the device:
  // data set there is read where it lies; host data is uploaded where it is new (weights
  // go over once, not every run), new data of an input's size where the old was.
  // Returns whether an input now lives at another address than in the last run (a
  // captured graph would read the old one).
  bool upload_inputs(const Graph& user) {
    check_uploads_fit(user);
    bool moved = false;
    for (NodeId r : inputs_read_) {
      const NodeId source = program_.source_of[r.value];
      const Node& n = program_.graph->node(r);
      const void* address = nullptr;
      if (const DeviceData* d = user.device_data(source)) {
        check_input_data(n, r, *d, user.dims());
        LUM_CHECK(d->device() == device_->ordinal())
            << "input '" << n.name << "' lives on GPU " << d->device()
            << ", and this program runs on GPU " << device_->ordinal();
        address = d->data();
        if (const auto* s = dynamic_cast<const cudagen::CudaStorage*>(d->storage().get()))
          s->order_before(device_->stream());  // (another executable's queued run may write it)
        uploaded_.erase(r.value);
      } else {
        address = upload(user, r);
      }
      auto [it, fresh] = input_address_.try_emplace(r.value, address);
      moved |= fresh || it->second != address;
      it->second = address;
    }
    return moved;
  }

  // Where each value an output written into the caller's memory names is computed: in
  // that memory, unless another output naming it is handed over (then it is copied there,
  // as for an output that names an input, copy_to_destinations). Returns whether any
  // value's place differs from the last run's (a captured graph would write the old one).
  bool find_destinations(const Graph& user) {
    const std::vector<void*> before = destination_;
    std::fill(destination_.begin(), destination_.end(), nullptr);
    for (const auto& [user_out, node] : program_.outputs) {
      if (!user.is_written_into(user_out)) continue;
      const DeviceData& dest = *user.device_data(user_out);
      const Node& n = user.node(user_out);
      size_t numel = 1;
      for (Expr d : n.shape) numel *= static_cast<size_t>(d.eval(user.dims()));
      LUM_CHECK(dest.dtype() == n.dtype && dest.numel() == numel &&
                dest.device() == device_->ordinal())
          << "write_into: output %" << user_out.value << " is " << numel << " "
          << dtype_name(n.dtype) << " elements on GPU " << device_->ordinal()
          << ", and the memory given holds " << dest.numel() << " " << dtype_name(dest.dtype())
          << " on GPU " << dest.device();
      const int32_t slot = liveness_.slot_of[plan_.canon(node).value];
      if (slot < 0 || destination_[static_cast<size_t>(slot)]) continue;
      const bool also_handed =
          std::any_of(program_.outputs.begin(), program_.outputs.end(), [&](const auto& o) {
            return liveness_.slot_of[plan_.canon(o.second).value] == slot &&
                   user.is_kept_on_device(o.first) && !user.is_written_into(o.first);
          });
      if (!also_handed) destination_[static_cast<size_t>(slot)] = dest.data();
    }
    return destination_ != before;
  }

  // Outputs written into the caller's memory whose values lie elsewhere (an input, a
  // value another output names): copied there, as part of the run.
  void copy_to_destinations(const Graph& user) {
    for (const auto& [user_out, node] : program_.outputs) {
      if (!user.is_written_into(user_out)) continue;
      const DeviceData& dest = *user.device_data(user_out);
      if (dest.bytes() == 0) continue;  // (an empty tensor's memory may be no address at all)
      const NodeId c = plan_.canon(node);
      const int32_t slot = liveness_.slot_of[c.value];
      if (slot >= 0) {
        const void* at = value_ptr_[static_cast<size_t>(slot)];
        if (at != dest.data())
          check(cudaMemcpyAsync(dest.data(), at, dest.bytes(), cudaMemcpyDeviceToDevice,
                                device_->stream()),
                "copying an output into the memory given for it");
        continue;
      }
      const NodeId source = program_.source_of[c.value];
      if (const DeviceData* d = user.device_data(source)) {
        check(cudaMemcpyAsync(dest.data(), d->data(), dest.bytes(), cudaMemcpyDeviceToDevice,
                              device_->stream()),
              "copying an input into the memory given for an output");
      } else {
        const Buffer* host = checked_input(user, c);
        check(cudaMemcpyAsync(dest.data(), host->data(), dest.bytes(), cudaMemcpyHostToDevice,
                              device_->stream()),
              "copying an input into the memory given for an output");
        device_->synchronize();  // (pageable memory the caller may change next)
      }
    }
  }

  // The host data about to be uploaded for the first time (or at a new size) must fit
  // the device's free memory: checked before any of it is allocated, so a model too
  // large for the GPU stops naming the bytes it needs and those free, with nothing
  // uploaded. Small uploads (a decode step's new rows) are left to the allocation's own
  // error, which costs them no query of the device.
  void check_uploads_fit(const Graph& user) {
    size_t needed = 0;
    for (NodeId r : inputs_read_) {
      const NodeId source = program_.source_of[r.value];
      const Buffer* host = user.data(source);
      if (user.device_data(source) || !host) continue;  // a missing input is named later
      const auto it = uploaded_.find(r.value);
      if (it == uploaded_.end() || it->second.second.bytes() != host->bytes())
        needed += host->bytes();
    }
    if (needed < kCheckedUploadBytes) return;
    const size_t free = device_->free_bytes();
    auto mib = [](size_t b) { return std::to_string((b + (1 << 20) - 1) >> 20); };
    LUM_CHECK(needed <= free) << "the inputs (a model's weights) need " << mib(needed)
                              << " MiB on GPU " << device_->ordinal() << " (" << device_->name()
                              << "), and " << mib(free) << " MiB of its "
                              << mib(device_->total_bytes()) << " MiB are free";
  }

  // Input r's host data on the device, uploaded if its data version is new.
  const void* upload(const Graph& user, NodeId r) {
    const uint64_t version = user.data_version(program_.source_of[r.value]);
    auto it = uploaded_.find(r.value);
    if (it != uploaded_.end() && it->second.first == version) {
      // The same data under new dims must still fit them, as on the CPU.
      const Node& n = program_.graph->node(r);
      if (!std::all_of(n.shape.begin(), n.shape.end(),
                       [](Expr d) { return d.as_const().has_value(); }))
        checked_input(user, r);
      return it->second.second.data();
    }
    const Buffer* host = checked_input(user, r);
    if (it == uploaded_.end() || it->second.second.bytes() != host->bytes())
      it = uploaded_.insert_or_assign(r.value, std::pair{version, DeviceBuffer(host->bytes())})
               .first;
    it->second.first = version;
    check(cudaMemcpyAsync(it->second.second.data(), host->data(), host->bytes(),
                          cudaMemcpyHostToDevice, device_->stream()),
          "copying an input to the GPU");
    // The copy reads the host buffer asynchronously; the caller may change it next.
    device_->synchronize();
    return it->second.second.data();
  }

  // Generated kernel k (with the kernels of a group it launches) for the kernel trace:
  // "lum_kernel_12: Cast f16[seq, 2, 8] + Add f32[2, 2, seq, 8]".
  std::string describe(size_t k) const {
    std::string out = source_.launches[k].function + ":";
    for (size_t m = group_begin(k); m <= k; ++m) {
      const Node& n = program_.graph->node(plan_.kernels[m].root);
      out += (m == group_begin(k) ? " " : " + ") +
             (n.op == Op::Custom ? n.custom->name() : std::string(op_name(n.op))) + " " +
             std::string(dtype_name(n.dtype)) + to_string(n.shape);
    }
    return out;
  }

  // The first kernel of the group that kernel k launches (k itself where it is alone).
  size_t group_begin(size_t k) const {
    const cudagen::KernelLaunch& l = source_.launches[k];
    return l.shape == KernelShape::Rows || l.shape == KernelShape::Maps ? l.group_begin : k;
  }

  // Launches generated kernel k (and a Scatter's ordered second kernel, or the whole of
  // a row group or map group that k closes).
  void launch(const Graph& user, size_t k) {
    const cudagen::KernelLaunch& l = source_.launches[k];
    // A map group: its members' threads, and the blocks the kernel deals out to them.
    int64_t threads = 0, member_blocks = 0;
    if (l.shape == KernelShape::Maps) {
      for (const Expr& e : l.member_threads) {
        const int64_t member = e.eval(user.dims());
        threads += member;
        member_blocks += cudagen::map_member_blocks(member);
      }
    } else {
      threads = l.threads.eval(user.dims());
    }
    if (threads <= 0) return;
    const size_t first = group_begin(k);
    // cudaLaunchKernel takes the address of each parameter's value.
    std::vector<void*>& ptrs = launch_pointers_;
    ptrs.clear();
    for (size_t m = first; m <= k; ++m) {
      ptrs.push_back(value_ptr_[m]);
      for (NodeId r : plan_.kernels[m].reads) ptrs.push_back(const_cast<void*>(operand(r)));
    }
    int64_t* err = static_cast<int64_t*>(errors_.data()) + 3 * first;
    std::vector<void*>& args = launch_args_;
    args.clear();
    for (void*& p : ptrs) args.push_back(&p);
    args.push_back(&err);
    args.push_back(&dims_arg_);
    if (l.parted) args.push_back(&part_scratch_arg_);
    int64_t block = cudagen::kMaxBlock, blocks = (threads + block - 1) / block;
    // Rows: a block per row, with as many threads as the row keeps busy (up to the most).
    // Spread, a cluster of blocks a row.
    const int64_t spread = l.spread ? cudagen::row_spread(device_->compute_capability()) : 1;
    if (l.shape == KernelShape::Rows) {
      block = cudagen::row_block(l.row_threads.eval(user.dims()));
      blocks = threads * spread;
    }
    // Parted: each row dealt out to as many blocks as fill the GPU once, each thread with
    // 16 elements or more, all within the scratch memory's slots; the grid a whole number
    // of parts a row.
    if (l.parted) {
      const int64_t len = l.row_length.eval(user.dims());
      const int64_t fill = int64_t{device_->multiprocessors()} * (2048 / block) / threads;
      const int64_t parts =
          std::clamp<int64_t>(std::min({fill, len / (16 * block), cudagen::kPartSlots / threads}),
                              1, cudagen::kMaxParts);
      blocks = threads * parts;
    }
    // A map takes its elements in one pass (codegen's kMapVectors); other kernels loop
    // over what a grid of 16 blocks of 256 an SM leaves.
    const int64_t most = l.shape == KernelShape::Map
                             ? int64_t{0x7fffffff}
                             : int64_t{device_->multiprocessors()} * (4096 / block);
    int64_t grid = l.shape == KernelShape::Maps ? member_blocks
                   : l.parted                   ? blocks
                                                : std::clamp<int64_t>(blocks, 1, most);
    grid -= grid % spread;  // whole clusters (the rows loop over what they leave)
    if (const cudaError_t e = device_->launch(
            functions_[k].first, dim3(static_cast<unsigned>(grid)),
            dim3(static_cast<unsigned>(block)), args, static_cast<size_t>(l.shared_bytes));
        e != cudaSuccess) {
      LUM_FAIL() << "launching generated kernel " << k << " (" << grid << " blocks of " << block
                 << " threads, " << l.shared_bytes
                 << " bytes of shared memory): " << cudaGetErrorString(e) << " ("
                 << cudaGetErrorName(e) << ")";
    }
    if (functions_[k].second)
      check(device_->launch(functions_[k].second, dim3(1), dim3(32), args),
            "launching a scatter kernel");
  }

  // Kernels k.. (a run of shared_runs_[k] QMatMuls of the same activations and weight
  // format) as one launch of the one-row kernel (or, over Q8_0, Q4_K, Q5_K and Q6_K, one
  // quantisation of the activations for their integer kernels), writing each one's value
  // in its place in the arena. False, with nothing run, where that kernel cannot take
  // them (several rows of activations, a value kept apart from the arena, views it does
  // not read).
  bool run_shared_products(const Graph& user, size_t k) {
    const Graph& g = *program_.graph;
    const Node& first = g.node(plan_.kernels[k].root);
    const ConcreteView& x = views_[k].get(first, user.dims())[0];
    if (source_dtype(first, 0) != DType::F32) return false;
    // (The lists and their views are assigned in place: a step allocates nothing.)
    std::vector<cudagen::GemvMatrix>& weights = shared_weights_;
    weights.resize(shared_runs_[k]);
    const std::optional<cudagen::QuantProduct> first_product = cudagen::quant_product(first);
    const size_t weight = first_product->weight;
    std::optional<cudagen::RowNorm> norm;
    if (first_product->norm) {
      norm = row_norm(first, views_[k].get(first, user.dims()));
      if (!norm) return false;
    }
    for (size_t j = k; j < k + shared_runs_[k]; ++j) {
      const Node& n = g.node(plan_.kernels[j].root);
      const std::vector<ConcreteView>& views = views_[j].get(n, user.dims());
      if (sizes_[j] == 0 || !runtime::same_rows(views[0], x)) return false;
      cudagen::GemvMatrix& w = weights[j - k];
      w.view = views[weight];
      w.data = operand(n.inputs[weight].source);
      w.out = static_cast<char*>(arena_.data()) + arena_plan_.offsets[j];
    }
    if (poison_)  // the later members' values are written now, not in their turn
      for (size_t j = k + 1; j < k + shared_runs_[k]; ++j)
        check(device_->memset(weights[j - k].out, 0xFF, value_bytes_[j]), "cudaMemsetAsync");
    const auto format_of = [&](size_t j) {
      return cudagen::quant_product(g.node(plan_.kernels[j].root))->format;
    };
    if (cudagen::integer_products_support(format_of(k))) {  // the integer kernels' run
      std::vector<cudagen::QuantMatrix>& quantised = shared_quantised_;
      quantised.resize(weights.size());
      for (size_t j = k; j < k + shared_runs_[k]; ++j) {
        const cudagen::GemvMatrix& w = weights[j - k];
        cudagen::QuantMatrix& q = quantised[j - k];
        q.format = format_of(j), q.view = w.view, q.data = w.data, q.out = w.out;
      }
      return quant_.run_shared(x, operand(first.inputs[0].source), quantised,
                               norm ? &*norm : nullptr);
    }
    return !norm &&
           mixed_.qmatmul_shared(format_of(k), x, operand(first.inputs[0].source), weights);
  }

  // A NormQMatMul's norm where its weight (input 1, viewed [batch..., M, K]) is K
  // contiguous f32 values shared by every row; nullopt otherwise.
  std::optional<cudagen::RowNorm> row_norm(const Node& n, const std::vector<ConcreteView>& views) {
    const ConcreteView& g = views[1];
    const size_t r = g.dims.size();
    if (source_dtype(n, 1) != DType::F32 || r == 0 || g.has_mask() || g.strides[r - 1] != 1)
      return std::nullopt;
    for (size_t d = 0; d + 1 < r; ++d)
      if (g.dims[d] > 1 && g.strides[d] != 0) return std::nullopt;
    const auto* op = static_cast<const compiler::NormQMatMulOp*>(n.custom.get());
    return cudagen::RowNorm{static_cast<const float*>(operand(n.inputs[1].source)) + g.offset,
                            static_cast<float>(op->eps)};
  }

  // Kernel k's computed mask with the dims it reads bound for this run, or nullptr.
  const cudagen::ComputedMask* bound_computed_mask(const Graph& user, size_t k) {
    std::optional<cudagen::ComputedMask>& computed = computed_masks_[k];
    if (!computed) return nullptr;
    computed->values.clear();
    for (const std::string& d : computed->dims)
      computed->values.push_back(runtime::bound_dim(user.dims(), d));
    return &*computed;
  }

  // Library kernels: MatMul through the one-row kernel or cuBLASLt (MixedProducts where
  // one operand is f32 and the other half; MatMulAdd through the same two with its
  // addends), WindowMatMul through WindowProducts, QMatMul over half weights through the same two
  // and over block formats through QuantProducts (QMatMulAdd, with its residual, the same;
  // NormQMatMul through QuantProducts with its norm), Attention through its kernel; anything else
  // (and one of those its kernels cannot read) by its reference semantics on the host, its operands
  // copied over and back.
  void run_library(const Graph& user, size_t k, void* out, size_t out_bytes) {
    const Node& n = program_.graph->node(plan_.kernels[k].root);
    const std::vector<ConcreteView>& views = views_[k].get(n, user.dims());
    if (dynamic_cast<const compiler::MatMulOp*>(n.custom.get())) {
      const DType a = source_dtype(n, 0), b = source_dtype(n, 1);
      if (a == b && a == n.dtype && (a == DType::F32 || a == DType::F16 || a == DType::BF16)) {
        const void* a_data = operand(n.inputs[0].source);
        const void* b_data = operand(n.inputs[1].source);
        if (gemv_.run(views[0], a_data, a, views[1], b_data, a, out) ||
            gemm_.run(views[0], a_data, views[1], b_data, a, out, a))
          return;
      }
      if (a == DType::F32 && n.dtype == a &&
          mixed_.matmul(views[0], operand(n.inputs[0].source), views[1],
                        operand(n.inputs[1].source), b, out))
        return;
    } else if (dynamic_cast<const compiler::MatMulAddOp*>(n.custom.get())) {
      if (product_with_addends(n, views, out)) return;
    } else if (const auto* w = dynamic_cast<const compiler::WindowMatMulOp*>(n.custom.get())) {
      const DType t = source_dtype(n, 0);
      if (source_dtype(n, 1) == t && n.dtype == t &&
          windows_.run(views[0], operand(n.inputs[0].source), views[1], operand(n.inputs[1].source),
                       t, w->row_dims, w->transposed, out))
        return;
    } else if (const auto* q = dynamic_cast<const compiler::QMatMulOp*>(n.custom.get())) {
      if (source_dtype(n, 0) == DType::F32 &&
          (mixed_.qmatmul(q->format, views[0], operand(n.inputs[0].source), views[1],
                          operand(n.inputs[1].source), out) ||
           quant_.run(q->format, views[0], operand(n.inputs[0].source), views[1],
                      operand(n.inputs[1].source), out)))
        return;
      // Block formats are decoded on the device or not at all: streaming a model's
      // weights through the host every step would be a silent fall off a cliff.
      const auto type = static_cast<GgmlType>(q->format);
      if (type != GgmlType::F32 && type != GgmlType::F16 && type != GgmlType::BF16 &&
          !cudagen::quant_products_support(q->format))
        throw Error("cuda: no GPU kernel decodes " + ggml_type_name(q->format) + " (weight '" +
                    program_.graph->node(plan_.canon(n.inputs[1].source)).name +
                    "'); convert the model to a supported type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                    "Q4_K, Q5_K, Q6_K, F16, BF16) or run it with --device cpu");
    } else if (const auto* qa = dynamic_cast<const compiler::QMatMulAddOp*>(n.custom.get())) {
      // The residual as it lies, y's shape: added as the product stores y.
      const ConcreteView& r = views[2];
      if (source_dtype(n, 0) == DType::F32 && source_dtype(n, 2) == DType::F32 && r.is_dense() &&
          !r.has_mask()) {
        const float* residual = static_cast<const float*>(operand(n.inputs[2].source)) + r.offset;
        if (mixed_.qmatmul(qa->format, views[0], operand(n.inputs[0].source), views[1],
                           operand(n.inputs[1].source), out, residual) ||
            quant_.run(qa->format, views[0], operand(n.inputs[0].source), views[1],
                       operand(n.inputs[1].source), out, nullptr, residual))
          return;
      }
    } else if (const auto* q = dynamic_cast<const compiler::NormQMatMulOp*>(n.custom.get())) {
      const std::optional<cudagen::RowNorm> norm = row_norm(n, views);
      if (norm && source_dtype(n, 0) == DType::F32 &&
          quant_.run(q->format, views[0], operand(n.inputs[0].source), views[2],
                     operand(n.inputs[2].source), out, &*norm))
        return;
    } else if (const auto* at = dynamic_cast<const compiler::AttentionOp*>(n.custom.get());
               at && source_dtype(n, 3) == DType::Bool) {
      const cudagen::ComputedMask* computed = bound_computed_mask(user, k);
      const std::vector<int64_t> rows(views[0].dims.begin(), views[0].dims.end() - 2);
      if (attention_.run(views[0], operand(n.inputs[0].source), source_dtype(n, 0), views[1],
                         operand(n.inputs[1].source), source_dtype(n, 1), views[2],
                         operand(n.inputs[2].source), source_dtype(n, 2), views[3],
                         computed ? nullptr : operand(n.inputs[3].source), computed, at->scale, out,
                         n.dtype, at->row_strides(rows),
                         {settled_bytes(n.inputs[1].source), settled_bytes(n.inputs[2].source)}))
        return;
    } else if (const auto* ag = dynamic_cast<const compiler::AttentionGradOp*>(n.custom.get());
               ag && source_dtype(n, 3) == DType::Bool) {
      // q, k, v and the output's gradient of one type, the stats f32.
      const DType t = source_dtype(n, 0);
      const cudagen::ComputedMask* computed = bound_computed_mask(user, k);
      std::vector<const void*> data;
      bool typed = n.dtype == (ag->part == compiler::AttentionGradPart::Stats ? DType::F32 : t);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        data.push_back(i == 3 && computed ? nullptr : operand(n.inputs[i].source));
        if (i != 3) typed = typed && source_dtype(n, i) == (i == 5 ? DType::F32 : t);
      }
      if (typed && attention_grad_.run(ag->part, views, data, t, computed, ag->scale, out)) return;
    } else if (dynamic_cast<const ExpertMatMulOp*>(n.custom.get())) {
      if (run_experts(n, views, out)) return;
    } else if (dynamic_cast<const AppendRowsOp*>(n.custom.get())) {
      if (append_rows(n, views, out, out_bytes)) return;
    } else if (const auto* t = dynamic_cast<const TopKOp*>(n.custom.get())) {
      if (top_k_.run(views[0], operand(n.inputs[0].source), source_dtype(n, 0), t->k(), out))
        return;
    } else if (const auto* c = dynamic_cast<const CollectiveOp*>(n.custom.get())) {
      if (collective(*c, k, views, out, out_bytes)) return;
    }
    ++stats_.host_fallbacks;
    // Said once a kernel: a host fallback is correct but copies its operands over and back
    // every run, a cliff in a step's time nothing else would show.
    warned_host_.resize(plan_.kernels.size(), false);
    if (!warned_host_[k]) {
      warned_host_[k] = true;
      std::string shape;
      for (const Expr& d : n.shape)
        shape += (shape.empty() ? "" : ", ") + std::to_string(d.eval(user.dims()));
      std::fprintf(stderr,
                   "luminal: warning: cuda: %s [%s] runs on the host (no GPU kernel takes its "
                   "operands as they are laid out); its operands are copied over and back every "
                   "run\n",
                   n.custom->name().c_str(), shape.c_str());
    }
    std::vector<Buffer> in;
    std::vector<std::vector<int64_t>> shapes;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      // A user input is read where it is set (a block-stored one decoded, as the reference
      // semantics read it); a computed value is copied back first; an iota left to the
      // kernel (a computed mask) is computed here.
      const NodeId r = plan_.canon(n.inputs[i].source);
      const int32_t slot = liveness_.slot_of[r.value];
      const Node& source = program_.graph->node(r);
      Buffer data = slot >= 0               ? download(user, static_cast<size_t>(slot))
                    : source.op == Op::Iota ? source_values(source, user.dims())
                                            : host_input(user, r);
      if (slot < 0 && source.quant != kPlainStorage) data = dequantized(source, data);
      in.push_back(read_view(data, views[i]));
      shapes.push_back(views[i].dims);
    }
    std::vector<int64_t> out_shape;
    for (Expr d : n.shape) out_shape.push_back(d.eval(user.dims()));
    const Buffer result = n.custom->run(in, shapes, out_shape, n.dtype);
    LUM_CHECK(result.bytes() == out_bytes) << "internal: " << n.custom->name() << " produced "
                                           << result.bytes() << " bytes, not " << out_bytes;
    check(cudaMemcpyAsync(out, result.data(), result.bytes(), cudaMemcpyHostToDevice,
                          device_->stream()),
          "copying a host-computed value to the GPU");
    device_->synchronize();  // `result` is freed on return
  }

  // MatMulAdd: the product of two operands of its own type with its addends (of that
  // type too: at most one bias row and one matrix) added as it stores its output. One
  // row with one addend goes through the one-row kernel; the rest through cuBLASLt's
  // bias epilogue and beta = 1, a matrix it cannot read where it lies copied into the
  // output first and added there. False where neither can run it.
  bool product_with_addends(const Node& n, const std::vector<ConcreteView>& views, void* out) {
    const DType t = n.dtype;
    if ((t != DType::F32 && t != DType::F16 && t != DType::BF16) || source_dtype(n, 0) != t ||
        source_dtype(n, 1) != t)
      return false;
    const auto esize = static_cast<int64_t>(dtype_size(t));
    const auto is_row = [](const ConcreteView& v) {  // compiler::is_bias_row, bound
      const size_t r = v.dims.size();
      if (r < 2 || v.has_mask() || (v.dims[r - 1] > 1 && v.strides[r - 1] != 1)) return false;
      for (size_t d = 0; d + 1 < r; ++d)
        if (v.dims[d] > 1 && v.strides[d] != 0) return false;
      return true;
    };
    cudagen::GemmAddends add;
    const ConcreteView* matrix = nullptr;
    const char* matrix_data = nullptr;
    for (size_t i = 2; i < n.inputs.size(); ++i) {
      if (source_dtype(n, i) != t) return false;
      const auto* data = static_cast<const char*>(operand(n.inputs[i].source));
      if (!add.bias && is_row(views[i])) {
        add.bias = data + views[i].offset * esize;
      } else if (!matrix) {
        matrix = &views[i];
        matrix_data = data;
      } else {
        return false;
      }
    }
    const void* a_data = operand(n.inputs[0].source);
    const void* b_data = operand(n.inputs[1].source);
    if (n.inputs.size() == 3) {  // one addend: where M is 1, N values in a row
      const void* row = add.bias;
      const size_t r = views[2].dims.size();
      if (!row && !matrix->has_mask() && (matrix->dims[r - 1] == 1 || matrix->strides[r - 1] == 1))
        row = matrix_data + matrix->offset * esize;
      if (row && gemv_.run(views[0], a_data, t, views[1], b_data, t, out, row)) return true;
    }
    ConcreteView in_out;  // the output as the matrix addend, where it is copied there
    if (matrix && !cudagen::Gemm::reads_addend(*matrix)) {
      if (!copy_view_.run(*matrix, matrix_data, static_cast<size_t>(esize), out)) return false;
      in_out.dims = in_out.mask_hi = matrix->dims;
      in_out.mask_lo.assign(in_out.dims.size(), 0);
      in_out.strides.assign(in_out.dims.size(), 1);
      for (size_t d = in_out.dims.size() - 1; d-- > 0;)
        in_out.strides[d] = in_out.strides[d + 1] * in_out.dims[d + 1];
      add.c = &in_out;
      add.c_data = out;
    } else if (matrix) {
      add.c = matrix;
      add.c_data = matrix_data;
    }
    return gemm_.run(views[0], a_data, views[1], b_data, t, out, t, add);
  }

  // ExpertMatMul: each stack of experts in its storage format (block-stored or plain),
  // the ids read on the device. Block formats without a GPU kernel are an error (never
  // decoded on the host every step); false where the kernels cannot read the operands.
  bool run_experts(const Node& n, const std::vector<ConcreteView>& views, void* out) {
    const size_t stacks = n.inputs.size() - 2;
    formats_.resize(stacks);
    stack_data_.resize(stacks);
    bool plain = true;  // every stack in a storage the kernels read
    for (size_t i = 0; i < stacks; ++i) {
      const Node& w = program_.graph->node(plan_.canon(n.inputs[i + 2].source));
      if (w.quant != kPlainStorage && !cudagen::expert_products_support(w.quant))
        throw Error("cuda: no GPU kernel decodes " + ggml_type_name(w.quant) + " (experts '" +
                    w.name +
                    "'); convert the model to a supported type or run it with --device cpu");
      const std::optional<uint32_t> format =
          w.quant != kPlainStorage ? std::optional(w.quant) : ggml_type_of(w.dtype);
      plain &= format.has_value();
      formats_[i] = format.value_or(0);
      stack_data_[i] = operand(n.inputs[i + 2].source);
    }
    return plain && source_dtype(n, 0) == DType::F32 && n.dtype == DType::F32 &&
           experts_.run(views[0], operand(n.inputs[0].source), views[1],
                        operand(n.inputs[1].source), source_dtype(n, 1),
                        std::span<const ConcreteView>(views).subspan(2), stack_data_, formats_,
                        out);
  }

  // The sum over the ranks (or every rank's operand, for an all-gather) by the
  // communicator on the device (NCCL), out of place: the operands are read where they lie
  // (a bucket's, each into its part of the output, in one exchange).
  bool collective(const CollectiveOp& op, size_t k, const std::vector<ConcreteView>& views,
                  void* out, size_t out_bytes) {
    const Node& n = program_.graph->node(plan_.kernels[k].root);
    Communicator& comm = op.communicator();
    const bool gather = dynamic_cast<const AllGatherOp*>(&op) != nullptr;
    if (!comm.on_device(n.dtype)) return false;
    const size_t esize = dtype_size(n.dtype);
    std::vector<Communicator::DevicePart> parts;
    std::vector<const void*> sources;
    size_t at = 0;
    for (size_t i = 0; i < views.size(); ++i) {
      if (source_dtype(n, i) != n.dtype || !views[i].is_dense()) return false;
      const size_t count = static_cast<size_t>(views[i].numel());
      const void* src = static_cast<const char*>(operand(n.inputs[i].source)) +
                        static_cast<size_t>(views[i].offset) * esize;
      parts.push_back({src, static_cast<char*>(out) + at, count});
      sources.push_back(src);
      at += count * esize * (gather ? static_cast<size_t>(comm.size()) : 1);
    }
    LUM_CHECK(at == out_bytes) << "internal: a collective's operands and output do not fit";
    const bool beside = collective_beside_[k];
    if (!beside && !beside_.empty()) join_collectives();  // a communicator's run in one order
    const DType dtype = n.dtype;
    auto enqueue = [&comm, gather, parts, dtype](cudaStream_t s) {
      if (gather)
        comm.all_gather_on_device(parts[0].src, parts[0].dst, parts[0].count, dtype, s);
      else if (parts.size() == 1)
        comm.all_reduce_on_device(parts[0].src, parts[0].dst, parts[0].count, dtype, s);
      else
        comm.all_reduce_parts_on_device(parts, dtype, s);
    };
    if (!beside) {
      device_->collective(n.custom.get(), sources, out, out_bytes, std::move(enqueue));
      return true;
    }
    // It runs beside the kernels after it until one needs it (waits_for_collectives).
    Beside& b = beside_.emplace_back();
    b.node = plan_.kernels[k].root;
    b.ranges.push_back({static_cast<const char*>(out), out_bytes});
    for (const Communicator::DevicePart& p : parts)
      b.ranges.push_back({static_cast<const char*>(p.src), p.count * esize});
    device_->collective_beside(std::move(enqueue));
    return true;
  }

  void join_collectives() {
    device_->recorder().join_collectives();
    beside_.clear();
  }

  // The collectives whose value no kernel reads within the next few: run beside the
  // kernels after them (StreamRecorder::collective_beside), whose work overlaps their
  // exchange. One read at once (a tensor-parallel block's sum) stays in the graphs, where
  // it costs no launch of its own.
  void find_collectives_beside() {
    constexpr size_t kNear = 4;  // kernels
    const Graph& g = *program_.graph;
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const Node& n = g.node(plan_.kernels[k].root);
      if (n.op != Op::Custom || !dynamic_cast<const CollectiveOp*>(n.custom.get())) continue;
      collective_beside_[k] = true;
      for (size_t j = k + 1; j < plan_.kernels.size() && j <= k + kNear; ++j)
        for (NodeId r : plan_.kernels[j].reads)
          if (r == plan_.kernels[k].root) collective_beside_[k] = false;
    }
  }

  // Whether kernel k (with the kernels of a shared run it starts) reads the value of a
  // collective still running beside the kernels, or writes where one reads or writes.
  bool waits_for_collectives(size_t k) const {
    const size_t last = k + std::max<size_t>(1, shared_runs_[k]);
    for (size_t j = k; j < last && j < plan_.kernels.size(); ++j) {
      // (A shared run's later members write into the arena: place_values put them there.)
      const char* out = j == k ? static_cast<const char*>(value_ptr_[k])
                               : static_cast<const char*>(arena_.data()) + arena_plan_.offsets[j];
      const size_t bytes = j == k ? value_bytes_[k] : sizes_[j];
      for (const Beside& b : beside_) {
        for (NodeId r : plan_.kernels[j].reads)
          if (r == b.node) return true;
        for (const auto& [at, length] : b.ranges)
          if (out < at + length && at < out + bytes) return true;
      }
    }
    return false;
  }

  // concat({base, rows}, 0): each operand copied into its part of the output. (A donated
  // base on the device is grown in place instead: grown_in_place.)
  bool append_rows(const Node& n, const std::vector<ConcreteView>& views, void* out,
                   size_t out_bytes) {
    if (source_dtype(n, 0) != n.dtype || source_dtype(n, 1) != n.dtype) return false;
    const size_t esize = dtype_size(n.dtype);
    const size_t base_bytes = static_cast<size_t>(views[0].numel()) * esize;
    LUM_CHECK(base_bytes + static_cast<size_t>(views[1].numel()) * esize == out_bytes)
        << "internal: AppendRows operands do not add up to its output";
    auto* dst = static_cast<char*>(out);
    // Should the second copy be refused, the caller's fallback overwrites the whole output.
    return !views[0].has_mask() && !views[1].has_mask() &&
           copy_view_.run(views[0], operand(n.inputs[0].source), esize, dst) &&
           copy_view_.run(views[1], operand(n.inputs[1].source), esize, dst + base_bytes);
  }

  // Whether kernel k is a generated elementwise kernel, alone or in a map group.
  bool writes_elements(size_t k) const {
    const cudagen::KernelLaunch& l = source_.launches[k];
    if (l.shape == KernelShape::InGroup)
      return source_.launches[l.launched_at].shape == KernelShape::Maps;
    return l.shape == KernelShape::Map || l.shape == KernelShape::Maps;
  }

  // Per node: how many kernels read it.
  std::vector<size_t> kernel_readers() const {
    std::vector<size_t> readers(program_.graph->num_nodes(), 0);
    for (const compiler::Kernel& kn : plan_.kernels)
      for (NodeId r : kn.reads) ++readers[plan_.canon(r).value];
    return readers;
  }

  // Per kernel, the input an AppendRows kernel may grow in place: a whole input that no
  // other kernel reads. Whether the caller donated it, and left it on the device, is
  // asked per run.
  void find_appendable_bases() {
    const Graph& g = *program_.graph;
    appendable_base_.assign(plan_.kernels.size(), std::nullopt);
    const std::vector<size_t> readers = kernel_readers();
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const Node& n = g.node(plan_.kernels[k].root);
      if (n.op != Op::Custom || !dynamic_cast<const AppendRowsOp*>(n.custom.get())) continue;
      const NodeId base = plan_.canon(n.inputs[0].source);
      const Node& b = g.node(base);
      if (b.op == Op::Input && b.dtype == n.dtype &&
          n.inputs[0].view == View::contiguous(b.shape) && readers[base.value] == 1)
        appendable_base_[k] = base;
    }
  }

  // Per kernel, the AppendRows kernel whose appended rows it computes where it may write
  // them straight into the grown cache (find_rows_written_in_place): a generated
  // elementwise kernel whose value only that AppendRows reads, as stored (contiguous, in
  // the cache's type), onto a base it may grow in place. The append then copies nothing:
  // a launch fewer for each cache a decoding step appends to.
  void find_rows_written_in_place() {
    const Graph& g = *program_.graph;
    std::vector<size_t> readers = kernel_readers();
    for (const auto& [user_out, node] : program_.outputs) ++readers[plan_.canon(node).value];
    for (size_t j = 0; j < plan_.kernels.size(); ++j) {
      if (!appendable_base_[j]) continue;
      const Node& n = g.node(plan_.kernels[j].root);
      const NodeId rows = plan_.canon(n.inputs[1].source);
      const int32_t p = liveness_.slot_of[rows.value];
      if (p < 0 || !writes_elements(static_cast<size_t>(p))) continue;
      const Node& r = g.node(rows);
      if (readers[rows.value] == 1 && r.dtype == n.dtype &&
          n.inputs[1].view == View::contiguous(r.shape))
        append_of_rows_[static_cast<size_t>(p)] = j;
    }
  }

  // AppendRows onto a donated input on the device: the run takes the input (it holds no
  // data after) and the new rows go after the old ones, in the input's own memory where
  // luminal owns it with room to spare, else in new memory with room for as many again
  // (so a cache grown every step moves O(log n) times). nullopt where kernel k is
  // something else or its base cannot be taken.
  struct GrownCache {
    DeviceBuffer buffer;  // holding the old rows, with room for the new after them
    size_t old_bytes;
  };
  std::optional<GrownCache> take_cache(Graph& user, size_t k, size_t bytes) {
    if (!appendable_base_[k]) return std::nullopt;
    const NodeId base = *appendable_base_[k];
    const NodeId source = program_.source_of[base.value];
    const DeviceData* d = user.device_data(source);
    if (!user.is_donated(source) || !d) return std::nullopt;
    auto* storage = dynamic_cast<cudagen::CudaStorage*>(d->storage().get());
    const Node& n = program_.graph->node(plan_.kernels[k].root);
    const std::vector<ConcreteView>& views = views_[k].get(n, user.dims());
    if (!storage || views[1].has_mask()) return std::nullopt;
    const size_t old_bytes = d->bytes();
    LUM_CHECK(old_bytes + static_cast<size_t>(views[1].numel()) * dtype_size(n.dtype) == bytes)
        << "internal: AppendRows operands do not add up to its output";
    const DeviceData taken = *user.take_device_data(source);
    const void* old = taken.data();
    // Memory someone else still holds (a copy of the DeviceData, a lender's) is only read.
    DeviceBuffer out;
    if (storage->owned() && taken.storage().use_count() == 1) out = storage->release();
    if (out.bytes() < bytes) {
      DeviceBuffer bigger(std::max(bytes, 2 * std::max(out.bytes(), old_bytes)));
      if (old_bytes)
        check(cudaMemcpyAsync(bigger.data(), old, old_bytes, cudaMemcpyDeviceToDevice,
                              device_->stream()),
              "growing a cache");
      device_->synchronize();  // the old memory is let go on return
      out = std::move(bigger);
    }
    grew_ = true;
    settled_[k] = old_bytes;
    return GrownCache{std::move(out), old_bytes};
  }

  // AppendRows kernel k's value grown in place: the cache its rows' kernel already wrote
  // them into, or the cache taken now with the rows copied in.
  std::optional<DeviceBuffer> grown_in_place(Graph& user, size_t k, size_t bytes) {
    if (prepared_cache_[k].data()) return std::exchange(prepared_cache_[k], DeviceBuffer{});
    std::optional<GrownCache> cache = take_cache(user, k, bytes);
    if (!cache) return std::nullopt;
    const Node& n = program_.graph->node(plan_.kernels[k].root);
    const std::vector<ConcreteView>& views = views_[k].get(n, user.dims());
    LUM_CHECK(copy_view_.run(views[1], operand(n.inputs[1].source), dtype_size(n.dtype),
                             static_cast<char*>(cache->buffer.data()) + cache->old_bytes))
        << "internal: rows of more than eight dims to append";
    return std::move(cache->buffer);
  }

  DType source_dtype(const Node& n, size_t i) const {
    return program_.graph->node(plan_.canon(n.inputs[i].source)).dtype;
  }

  // Computed value `slot` (kernel `slot`'s output) copied to the host. (Its buffer may be
  // larger: a cache grown in place keeps room for more rows.)
  Buffer download(const Graph& user, size_t slot) {
    const DType t = program_.graph->node(plan_.kernels[slot].root).dtype;
    Buffer host(t, static_cast<size_t>(numel_[slot].eval(user.dims())), Buffer::Uninitialized{});
    check(cudaMemcpyAsync(host.data(), value_ptr_[slot], host.bytes(), cudaMemcpyDeviceToHost,
                          device_->stream()),
          "copying a value from the GPU");
    device_->synchronize();
    return host;
  }

  // LUMINAL_CUDA_CHECK=1 (see checking_): the values of kernels [checked_, until), all
  // complete now, against the reference interpreter's values of their nodes.
  void check_values(const Graph& user, size_t until) {
    if (reference_.empty()) {
      std::vector<NodeId> roots;
      for (const compiler::Kernel& kn : plan_.kernels) roots.push_back(kn.root);
      std::deque<Buffer> downloaded;  // inputs set on the device, copied back
      reference_ =
          reference_values(*program_.graph, roots, user.dims(), [&](NodeId r) -> const Buffer& {
            if (user.device_data(program_.source_of[r.value]))
              return downloaded.emplace_back(host_input(user, r));
            return *checked_input(user, r);
          });
    }
    for (; checked_ < until; ++checked_) {
      const size_t k = checked_;
      if (!value_ptr_[k] || value_bytes_[k] == 0) continue;
      const Buffer got = download(user, k);
      const Buffer& want = reference_[k];
      const DType t = want.dtype();
      const double tolerance = t == DType::F32 ? 2e-3 : is_float(t) ? 2e-2 : 0;
      const std::string wrong =
          runtime::output_mismatch(got.to_f32().data(), want.to_f32(), tolerance);
      if (!wrong.empty())
        std::fprintf(stderr,
                     "luminal cuda check: kernel %zu (%s, %%%u) differs from the reference: %s\n",
                     k, describe(k).c_str(), plan_.kernels[k].root.value, wrong.c_str());
      checks_failed_ += !wrong.empty();
    }
    if (checked_ == plan_.kernels.size()) {
      std::fprintf(stderr, "luminal cuda check: %zu of %zu kernels differ from the reference\n",
                   checks_failed_, plan_.kernels.size());
      reference_ = {};
    }
  }

  // The device address of a kernel operand: a computed value, or a user input (uploaded
  // at the start of the run).
  const void* operand(NodeId r) {
    r = plan_.canon(r);
    const int32_t slot = liveness_.slot_of[r.value];
    if (slot < 0) return input_address_.at(r.value);
    LUM_ASSERT(value_ptr_[static_cast<size_t>(slot)]) << "%" << r.value << " has no value";
    return value_ptr_[static_cast<size_t>(slot)];
  }

  // Bytes at the start of value r's memory that no kernel of this run writes, for the
  // kernel being launched: all of an input's, and of a cache grown in place its old rows.
  // None for the run's first kernel, which may start before the caller's work ahead of it
  // on the stream has finished; every later one starts after that.
  size_t settled_bytes(NodeId r) const {
    if (!early_reads_ || launches_ <= 1) return 0;
    const int32_t slot = liveness_.slot_of[plan_.canon(r).value];
    return slot < 0 ? std::numeric_limits<size_t>::max() : settled_[static_cast<size_t>(slot)];
  }

  // A user input's data on the host, copied back where it was set on the device.
  Buffer host_input(const Graph& user, NodeId r) const {
    const NodeId source = program_.source_of[r.value];
    if (const DeviceData* d = user.device_data(source)) return d->to_host();
    return *checked_input(user, r);
  }

  const Buffer* checked_input(const Graph& user, NodeId r) const {
    const Node& n = program_.graph->node(r);
    LUM_ASSERT(n.op == Op::Input) << "%" << r.value << " has no value";
    const Buffer* b = user.data(program_.source_of[r.value]);
    check_input_data(n, r, b, user.dims());
    return b;
  }

  // Outputs into the user's graph: copied to the host, or, for those kept on the device,
  // handed over (the buffer becomes theirs; outputs naming one value share it), with the
  // event that marks the run's end, which host reads of them wait for. Memory given to
  // write outputs into is let go: the caller reads it.
  void store_outputs(Graph& user, const std::shared_ptr<cudagen::Event>& written) {
    const Graph& g = *program_.graph;
    std::unordered_map<int32_t, DeviceData> handed;  // by slot
    for (const auto& [user_out, node] : program_.outputs) {
      if (user.take_destination(user_out)) continue;
      const NodeId c = plan_.canon(node);
      const int32_t slot = liveness_.slot_of[c.value];
      const bool on_device = user.is_kept_on_device(user_out);
      if (slot < 0) {
        if (g.node(c).op != Op::Input || program_.source_of[c.value] == user_out) continue;
        const NodeId source = program_.source_of[c.value];
        if (const DeviceData* d = user.device_data(source); d && on_device) {
          user.set_device_data(user_out, *d);
        } else {
          user.set_data(user_out, host_input(user, c));
        }
        continue;
      }
      if (!on_device) {
        user.set_data(user_out, download(user, static_cast<size_t>(slot)));
        continue;
      }
      const auto numel = static_cast<size_t>(numel_[static_cast<size_t>(slot)].eval(user.dims()));
      auto it = handed.find(slot);
      if (it == handed.end()) {
        // Handed-over values have buffers of their own (place_values). One of a size that
        // stays (a step's logits, unlike a cache) comes back for a later run's when let go.
        DeviceBuffer& v = owned_[static_cast<size_t>(slot)];
        const bool same_size = numel_[static_cast<size_t>(slot)].as_const().has_value();
        auto storage = std::make_shared<cudagen::CudaStorage>(std::move(v), device_->ordinal(),
                                                              same_size ? spares_ : nullptr);
        storage->written_by(written, device_->stream());
        value_ptr_[static_cast<size_t>(slot)] = nullptr;
        it = handed.emplace(slot, DeviceData(storage, g.node(c).dtype, numel)).first;
      }
      user.set_device_data(user_out, it->second);
    }
  }

  std::vector<std::future<void>> library_compiles_;  // (first: waited for last)
  std::unique_ptr<cudagen::Device> device_;
  compiler::Optimized program_;
  compiler::KernelPlan plan_;
  cudagen::CudaSource source_;
  std::vector<std::unique_ptr<cudagen::Module>> modules_;  // by source part
  runtime::Searcher searcher_;  // the library's algorithms and the one-row kernel's shapes
  cudagen::Gemm gemm_;
  cudagen::Gemv gemv_;
  cudagen::Attention attention_;
  cudagen::AttentionGrad attention_grad_{*device_};
  cudagen::ViewCopy copy_view_;
  cudagen::TopK top_k_{*device_};
  cudagen::MixedProducts mixed_;
  cudagen::QuantProducts quant_;
  cudagen::ExpertProducts experts_{*device_, quant_, copy_view_};
  cudagen::WindowProducts windows_{*device_, searcher_, gemm_, copy_view_};
  std::vector<uint32_t> formats_;        // run_experts': each stack's format
  std::vector<const void*> stack_data_;  // and data, kept for their capacity
  runtime::Liveness liveness_;
  std::vector<std::pair<const void*, const void*>> functions_;  // by kernel; null: none
  std::vector<Expr> numel_;                                     // by kernel: output elements
  std::vector<void*> launch_pointers_, launch_args_;            // reused by every launch
  std::vector<NodeId> inputs_read_;  // user inputs the kernels read, each once
  std::vector<runtime::ResolvedViews> views_;
  // By kernel: an Attention's mask computed in its kernels (not stored), its dims' values
  // set each run.
  std::vector<std::optional<cudagen::ComputedMask>> computed_masks_;
  std::vector<uint32_t> shared_runs_;                   // per kernel (shared_product_runs, checked)
  std::vector<cudagen::GemvMatrix> shared_weights_;     // run_shared_products', for its capacity
  std::vector<cudagen::QuantMatrix> shared_quantised_;  // the same, over block formats
  std::vector<std::optional<NodeId>> appendable_base_;  // per kernel (find_appendable_bases)
  std::vector<std::optional<size_t>> append_of_rows_;   // per kernel (find_rows_written_in_place)
  std::vector<DeviceBuffer> prepared_cache_;  // per AppendRows kernel: its rows already in
  // Per kernel, this run: bytes at the start of its value that no kernel writes (those of
  // a cache grown in place from earlier steps).
  std::vector<size_t> settled_;
  std::unordered_map<uint32_t, const void*> input_address_;  // by input node, this run
  // Each kernel's value: its address this run, its bytes, and its own buffer where it is
  // not in the arena (place_values).
  std::vector<void*> value_ptr_;
  std::vector<void*> destination_;  // by kernel: the caller's memory it is written into, this run
  // The collectives queued this run that later work has not waited for yet: each one's
  // node, and the memory it reads and writes.
  struct Beside {
    NodeId node;
    std::vector<std::pair<const char*, size_t>> ranges;
  };
  std::vector<Beside> beside_;
  std::vector<bool> collective_beside_;      // by kernel (find_collectives_beside)
  std::vector<bool> warned_host_;            // by kernel: its host fallback was reported
  std::vector<size_t> value_bytes_, sizes_;  // sizes_: bytes in the arena, 0 for own buffers
  std::vector<DeviceBuffer> owned_;
  std::shared_ptr<cudagen::SpareBuffers> spares_;        // handed-over values' buffers, come back
  std::vector<std::pair<uint32_t, uint32_t>> releases_;  // by kernel, into liveness_.frees
  DeviceBuffer arena_;
  cudagen::ArenaPlan arena_plan_;
  std::vector<size_t> room_;           // by kernel: the bytes arena_plan_ gives its value
  std::vector<size_t> sized_by_dims_;  // the kernels whose values' sizes follow the dims
  std::vector<int64_t> placed_dims_;  // the dims and handed-over values arena_plan_ is for
  std::vector<bool> placed_handed_;
  std::unordered_map<uint32_t, std::pair<uint64_t, DeviceBuffer>> uploaded_;  // by input node
  static constexpr size_t kCheckedUploadBytes = size_t{16} << 20;             // check_uploads_fit
  // Three int64 per kernel (runtime/kernel_errors.hpp).
  static size_t error_bytes(const compiler::KernelPlan& plan) {
    return 3 * sizeof(int64_t) * std::max<size_t>(plan.kernels.size(), 1);
  }
  DeviceBuffer errors_;  // (cleared once and after each report: clear_errors)
  // Parted reductions' slots and counts (codegen.hpp's kPartScratchBytes, the counts at 0
  // between launches), where the program has any, and the address passed to them.
  DeviceBuffer part_scratch_;
  void* part_scratch_arg_ = nullptr;
  // The bound dims, which generated kernels read from device memory (codegen.hpp), as
  // last copied there, and the address passed to them.
  DeviceBuffer dims_;
  std::vector<int64_t> uploaded_dims_;
  void* dims_arg_ = nullptr;
  std::array<RunRecord, 2> records_;
  size_t record_ = 0;  // the last run's
  cudagen::Event theirs_reached_, ours_reached_;  // (queue_on)
  const bool poison_ = runtime::env_has("LUMINAL_CPU_POISON", "1");
  RunStats stats_;
  // LUMINAL_PROFILE=1: each kernel's time between events recorded around it (a row
  // group's members before its last show none), summed over runs and printed on
  // destruction. The first run (which loads modules and runs the searches) is kept apart
  // and printed only where no other run followed. Runs are not captured while profiling.
  const bool profiling_ = runtime::env_has("LUMINAL_PROFILE", "1");
  std::vector<cudagen::Event> marks_;  // before each kernel, and after the last
  runtime::KernelProfile profile_, first_run_;
  // LUMINAL_CUDA_CHECK=1: the first run's kernels, each once complete, against the
  // reference interpreter's values of their nodes from the same inputs; those that differ
  // are named on stderr (the first is where to look: its readers inherit its error). To
  // find a wrong kernel; slow (each value copied back, the graph interpreted on the host,
  // every kernel's reference value held in host memory until the run ends).
  const bool checking_ = runtime::env_has("LUMINAL_CUDA_CHECK", "1");
  std::vector<Buffer> reference_;  // each kernel's root's value
  size_t checked_ = 0, checks_failed_ = 0;
  // Runs recorded as CUDA graphs (see run); LUMINAL_CUDA_GRAPHS=0 turns it off.
  const bool graphs_ = !runtime::env_has("LUMINAL_CUDA_GRAPHS", "0") && !profiling_;
  // Kernels read memory no kernel of the run writes before the kernel ahead has finished
  // (settled_bytes); LUMINAL_CUDA_EARLY_READS=0 turns it off, to measure what it is worth.
  const bool early_reads_ = !runtime::env_has("LUMINAL_CUDA_EARLY_READS", "0");
  bool ran_ = false;         // a run has loaded the modules (the first is not recorded)
  bool grew_ = false;        // this run grew a donated input in place
  bool alone_ = false;       // runs held back until queued (time_device_alone)
  bool repeatable_ = false;  // the graphs may be launched again as they are (see run)
  std::vector<int64_t> graph_dims_;
  RunStats graph_stats_;
  // For LUMINAL_LOG=info, printed on destruction: runs, those run as graphs, and what the
  // recorded ones did, summed.
  size_t runs_ = 0, graph_runs_ = 0;
  cudagen::StreamRecorder::Replay graph_totals_;
  // The host's time in each part of the runs that went through the kernels.
  struct HostPhases {
    double inputs = 0, place = 0, dims = 0, record = 0, replay = 0, finish = 0;
    size_t runs = 0;
  } host_phases_;
  size_t launches_ = 0;  // by the last run: kernels and library calls
};

}  // namespace

bool cuda_available(std::string* why, int device) {
  const std::string reason = cudagen::why_unavailable(device);
  if (why) *why = reason;
  return reason.empty();
}

size_t cuda_peak_memory_bytes() {
  return cudagen::peak_device_bytes();
}

namespace cudagen {

std::vector<std::string> library_sources(const Graph& g, const compiler::KernelPlan& plan) {
  std::vector<std::string> sources;
  std::vector<uint32_t> formats;
  bool products = false, custom = false, top_k = false, float_experts = false, windows = false;
  for (const compiler::Kernel& k : plan.kernels) {
    const Node& n = g.node(k.root);
    if (n.op != Op::Custom) continue;
    custom = true;
    top_k |= dynamic_cast<const TopKOp*>(n.custom.get()) != nullptr;
    windows |= dynamic_cast<const compiler::WindowMatMulOp*>(n.custom.get()) != nullptr;
    if (dynamic_cast<const ExpertMatMulOp*>(n.custom.get()))
      for (size_t i = 2; i < n.inputs.size(); ++i) {
        const uint32_t q = g.node(plan.canon(n.inputs[i].source)).quant;
        const bool block = q != kPlainStorage && quant_products_support(q);
        if (block && std::find(formats.begin(), formats.end(), q) == formats.end())
          formats.push_back(q);
        float_experts |= !block;
      }
    if (dynamic_cast<const compiler::MatMulOp*>(n.custom.get()) ||
        dynamic_cast<const compiler::MatMulAddOp*>(n.custom.get()))
      products = true;
    if (const std::optional<QuantProduct> q = quant_product(n)) {
      if (quant_products_support(q->format)) {
        if (std::find(formats.begin(), formats.end(), q->format) == formats.end())
          formats.push_back(q->format);
      } else {
        products = true;  // half weights: the one-row kernel's
      }
    }
  }
  for (uint32_t f : formats) sources.push_back(quant_products_source(f));
  const bool searching = runtime::search_settings_from_env().mode != runtime::SearchMode::Off;
  if (products) {
    sources.push_back(gemv_module_source(false));
    if (searching) sources.push_back(gemv_module_source(true));
  }
  if (custom) sources.push_back(copy_view_source());
  // (A library call's candidates are compared by these, timed for every new shape, and
  // the program search's outputs left on the device.)
  if (searching) sources.push_back(comparison_source());
  if (top_k) sources.push_back(top_k_source());
  if (windows) sources.push_back(window_products_source());
  if (float_experts) sources.push_back(expert_products_source());
  return sources;
}

compiler::OptimizeOptions optimize_options(const std::vector<std::string>& avoid) {
  return {.product_fusions = true,
          .gemm_epilogues = true,
          .window_products = true,
          .storage_orders = true,
          .attention_output_orders = true,
          .attention_gradients = cudagen::attention_grad_supports,
          .avoid = avoid};
}

CompiledProgram compile_program(const Graph& graph, const std::string& arch, bool fuse,
                                bool library_in_background, const std::vector<std::string>& avoid) {
  CompiledProgram c{runtime::optimize_and_plan(
                        graph, fuse ? compiler::Fusion::RecomputeShared : compiler::Fusion::Off,
                        optimize_options(avoid), /*computed_masks=*/true),
                    {},
                    {},
                    {}};
  adjoin_shared_products(*c.planned.program.graph, c.planned.plan);
  // (LUMINAL_CUDA_MAP_GROUPS=0: elementwise kernels launched one by one, to measure.)
  const bool map_groups = !runtime::env_has("LUMINAL_CUDA_MAP_GROUPS", "0");
  if (map_groups) adjoin_independent_maps(*c.planned.program.graph, c.planned.plan);
  if (library_in_background)
    c.library_compiles =
        compile_in_background(library_sources(*c.planned.program.graph, c.planned.plan), arch);
  const auto gen_start = std::chrono::steady_clock::now();
  c.source = generate_cuda_source(*c.planned.program.graph, c.planned.plan, map_groups,
                                  std::max(1u, std::thread::hardware_concurrency()));
  const double gen_s = runtime::seconds_since(gen_start);
  runtime::dump("source", c.source.code);
  // The parts side by side: the first here, the others on threads of their own.
  const auto nvrtc_start = std::chrono::steady_clock::now();
  // (Should one fail, the others are waited for as `others` goes: they read c's parts.)
  std::vector<std::future<Cubin>> others;
  for (size_t i = 1; i < c.source.parts.size(); ++i)
    others.push_back(std::async(std::launch::async,
                                [&c, &arch, i] { return compile_cubin(c.source.parts[i], arch); }));
  c.cubins.push_back(compile_cubin(c.source.parts[0], arch));
  for (std::future<Cubin>& f : others) c.cubins.push_back(f.get());
  const bool hit =
      std::all_of(c.cubins.begin(), c.cubins.end(), [](const Cubin& b) { return b.cache_hit; });
  char stages[200];
  std::snprintf(stages, sizeof stages, "codegen %.3f s, NVRTC %.3f s (%s) for %s in %zu parts",
                gen_s, runtime::seconds_since(nvrtc_start), hit ? "cache hit" : "compiled",
                arch.c_str(), c.cubins.size());
  runtime::log_compile("cuda", graph, c.planned, stages);
  return c;
}

}  // namespace cudagen

std::unique_ptr<Executable> CudaBackend::compile(const Graph& graph) const {
  const auto compile = [options = options_](const Graph& g, const std::vector<std::string>& avoid,
                                            std::vector<std::string>& choices) {
    auto device = std::make_unique<cudagen::Device>(options.device);
    cudagen::CompiledProgram c = cudagen::compile_program(g, device->arch(), options.fuse,
                                                          /*library_in_background=*/true, avoid);
    choices = c.planned.program.choices;
    auto executable = std::make_unique<CudaExecutable>(std::move(device), std::move(c.planned),
                                                       std::move(c.source), c.cubins);
    executable->keep_compiling(std::move(c.library_compiles));
    return executable;
  };
  const cudagen::Device device(options_.device);
  return runtime::compile_searching_extractions(graph, compile, cudagen::search_context(device));
}

}  // namespace luminal
