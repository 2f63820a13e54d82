// Recording a run's stream work and running it as CUDA graphs (see stream_recorder.hpp).
#include "backends/cuda/stream_recorder.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backends/cuda/device.hpp"
#include "luminal/error.hpp"

namespace luminal::cudagen {

cudaError_t launch_kernel(const void* function, dim3 grid, dim3 block, void** args,
                          size_t shared_bytes, cudaStream_t stream, bool programmatic) {
  if (!programmatic) return cudaLaunchKernel(function, grid, block, args, shared_bytes, stream);
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelExC(&config, function, args);
}

StreamRecorder::~StreamRecorder() {
  now_.clear();
  drop();
  if (ready_) cudaEventDestroy(ready_);
  if (side_done_) cudaEventDestroy(side_done_);
  if (side_) cudaStreamDestroy(side_);
}

void StreamRecorder::drop() {
  for (Segment& g : segments_) g.drop();
  segments_.clear();
  for (cudaGraphExec_t e : flushed_libraries_) cudaGraphExecDestroy(e);
  flushed_libraries_.clear();
  last_launched_ = 0;
  last_steps_.clear();
}

void StreamRecorder::Segment::drop() {
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  exec = nullptr, graph = nullptr;
  nodes.clear();
  graphed.clear();
}

void StreamRecorder::Recording::clear() {
  for (const Op& op : ops)
    if (op.library) cudaGraphDestroy(op.library);
  ops.clear();
  params.clear();
  sizes.clear();
}

void StreamRecorder::begin(cudaStream_t stream) {
  // The last run has been waited for: what its flush instantiated is done.
  for (cudaGraphExec_t e : flushed_libraries_) cudaGraphExecDestroy(e);
  flushed_libraries_.clear();
  now_.clear();
  stream_ = stream;
  recording_ = true;
  launched_ = 0;
  steps_.clear();
  stats_ = Replay{};
}

const std::vector<size_t>& StreamRecorder::parameter_sizes(const void* function, size_t count) {
  std::vector<size_t>& sizes = parameter_sizes_[function];
  while (sizes.size() < count) {
    size_t offset = 0, size = 0;
    check(cudaFuncGetParamInfo(function, sizes.size(), &offset, &size),
          "reading a kernel's parameters");
    sizes.push_back(size);
  }
  return sizes;
}

void StreamRecorder::kernel(const void* function, dim3 grid, dim3 block,
                            std::span<void* const> args, size_t shared_bytes) {
  const std::vector<size_t>& sizes = parameter_sizes(function, args.size());
  Op op;
  op.kind = Kind::Kernel;
  op.function = function, op.grid = grid, op.block = block, op.shared_bytes = shared_bytes;
  op.params_begin = now_.params.size();
  op.sizes_begin = now_.sizes.size();
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* value = static_cast<const unsigned char*>(args[i]);
    now_.params.insert(now_.params.end(), value, value + sizes[i]);
    now_.sizes.push_back(sizes[i]);
  }
  op.params_end = now_.params.size();
  add(op);
}

void StreamRecorder::memset(void* dst, int value, size_t bytes) {
  if (bytes == 0) return;  // (a graph has no empty memset or copy nodes)
  Op op;
  op.kind = Kind::Memset;
  op.dst = dst, op.value = value, op.bytes = bytes;
  add(op);
}

void StreamRecorder::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  Op op;
  op.kind = Kind::Copy;
  op.dst = dst, op.src = src, op.bytes = bytes;
  add(op);
}

void StreamRecorder::collective(const void* which, std::span<const void* const> sources, void* dst,
                                size_t bytes, std::function<void(cudaStream_t)> enqueue) {
  Op op;
  op.kind = Kind::Collective;
  op.function = which, op.dst = dst, op.bytes = bytes;
  op.sources.assign(sources.begin(), sources.end());
  op.enqueue = std::move(enqueue);
  add(op);
}

void StreamRecorder::collective_beside(std::function<void(cudaStream_t)> enqueue) {
  if (!now_.ops.empty()) launch_segment();
  queue_beside(enqueue);
  steps_.push_back({Step::What::Beside, 0, std::move(enqueue)});
}

void StreamRecorder::join_collectives() {
  if (!outstanding_) return;
  if (recording_) {
    if (!now_.ops.empty()) launch_segment();
    steps_.push_back({Step::What::Join, 0, {}});
  }
  wait_beside();
}

void StreamRecorder::queue_beside(const std::function<void(cudaStream_t)>& enqueue) {
  if (!side_) {
    check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "creating a stream");
    check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming), "cudaEventCreate");
  }
  check(cudaEventRecord(ready_, stream_), "cudaEventRecord");
  check(cudaStreamWaitEvent(side_, ready_, 0), "cudaStreamWaitEvent");
  enqueue(side_);
  check(cudaEventRecord(side_done_, side_), "cudaEventRecord");
  outstanding_ = true;
}

void StreamRecorder::wait_beside() {
  check(cudaStreamWaitEvent(stream_, side_done_, 0), "cudaStreamWaitEvent");
  outstanding_ = false;
}

void StreamRecorder::add(const Op& op) {
  now_.ops.push_back(op);
  // A full segment is launched now, so the GPU starts on it.
  const size_t most = size_t{16} << std::min<size_t>(launched_, 3);
  if (now_.ops.size() >= most) launch_segment();
}

void StreamRecorder::library_call(std::string key, std::function<void(cudaStream_t)> enqueue) {
  // (The segment this op goes into, where one was launched here before.)
  const Segment* segment = launched_ < segments_.size() ? &segments_[launched_] : nullptr;
  const size_t at = now_.ops.size();
  Op op;
  op.kind = Kind::Library;
  op.key = std::move(key);
  op.enqueue = std::move(enqueue);
  // Captured now only where the segment's graph holds a call here with other arguments
  // (its node takes the new capture); a call like the graph's keeps its node (see update
  // and launch_segment), and one the graph lacks is captured if its segment is
  // instantiated, or called as the segment is queued.
  if (segment && segment->exec && at < segment->graphed.ops.size() &&
      segment->graphed.ops[at].kind == Kind::Library && segment->graphed.ops[at].key != op.key)
    capture(op);
  add(op);
}

void StreamRecorder::capture(Op& op) {
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  try {
    op.enqueue(stream_);
  } catch (...) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream_, &partial);
    if (partial) cudaGraphDestroy(partial);
    throw;
  }
  check(cudaStreamEndCapture(stream_, &op.library), "capturing a library's kernels");
}

void StreamRecorder::enqueue(const Op& op) {
  if (!op.library) return op.enqueue(stream_);
  cudaGraphExec_t e = nullptr;
  check(cudaGraphInstantiate(&e, op.library, 0), "instantiating a library's kernels");
  flushed_libraries_.push_back(e);
  check(cudaGraphLaunch(e, stream_), "launching a library's kernels");
}

void** StreamRecorder::arguments(const Recording& r, const Op& op) {
  scratch_.clear();
  auto* p = const_cast<unsigned char*>(r.params.data()) + op.params_begin;
  for (size_t i = op.sizes_begin; p < r.params.data() + op.params_end; p += r.sizes[i++])
    scratch_.push_back(p);
  return scratch_.data();
}

void StreamRecorder::flush() {
  if (!recording_) return;
  recording_ = false;
  queue();
  if (outstanding_) wait_beside();  // (what is queued directly from now on comes after)
}

void StreamRecorder::queue() {
  stats_.queued += now_.ops.size();
  for (const Op& op : now_.ops) switch (op.kind) {
      case Kind::Kernel:
        check(launch_kernel(op.function, op.grid, op.block, arguments(now_, op), op.shared_bytes,
                            stream_, programmatic_),
              "launching a recorded kernel");
        break;
      case Kind::Memset:
        check(cudaMemsetAsync(op.dst, op.value, op.bytes, stream_), "cudaMemsetAsync");
        break;
      case Kind::Copy:
        check(cudaMemcpyAsync(op.dst, op.src, op.bytes, cudaMemcpyDeviceToDevice, stream_),
              "cudaMemcpyAsync");
        break;
      case Kind::Library:
      case Kind::Collective:
        enqueue(op);
        break;
    }
  now_.clear();
}

std::vector<StreamRecorder::Work> StreamRecorder::work() const {
  std::vector<Work> work;
  for (const Op& op : now_.ops) work.push_back(work_of(op));
  return work;
}

namespace {

bool same_dims(dim3 a, dim3 b) {
  return a.x == b.x && a.y == b.y && a.z == b.z;
}

cudaMemsetParams memset_params(void* dst, int value, size_t bytes) {
  cudaMemsetParams p{};
  p.dst = dst;
  p.value = static_cast<unsigned>(value) & 0xFF;
  p.elementSize = 1;
  p.width = bytes;
  p.height = 1;
  return p;
}

}  // namespace

// The segment's nodes given this recording's parameters where they differ. False where
// its work is other than this recording's, or the driver refuses a change (the segment,
// part updated, is dropped).
bool StreamRecorder::update(Segment& segment) {
  if (!segment.exec || segment.graphed.ops.size() != now_.ops.size()) return false;
  for (size_t i = 0; i < now_.ops.size(); ++i)
    if (work_of(now_.ops[i]) != work_of(segment.graphed.ops[i])) return false;
  const auto start = std::chrono::steady_clock::now();
  const Recording& graphed = segment.graphed;
  cudaGraphExec_t exec = segment.exec;
  for (size_t i = 0; i < now_.ops.size(); ++i) {
    const Op &op = now_.ops[i], &was = graphed.ops[i];
    cudaError_t e = cudaSuccess;
    switch (op.kind) {
      case Kind::Kernel: {
        const size_t bytes = op.params_end - op.params_begin;
        if (same_dims(op.grid, was.grid) && same_dims(op.block, was.block) &&
            op.shared_bytes == was.shared_bytes && bytes == was.params_end - was.params_begin &&
            std::memcmp(now_.params.data() + op.params_begin,
                        graphed.params.data() + was.params_begin, bytes) == 0)
          continue;
        cudaKernelNodeParams p{};
        p.func = const_cast<void*>(op.function);
        p.gridDim = op.grid, p.blockDim = op.block;
        p.sharedMemBytes = static_cast<unsigned>(op.shared_bytes);
        p.kernelParams = arguments(now_, op);
        e = cudaGraphExecKernelNodeSetParams(exec, segment.nodes[i], &p);
        break;
      }
      case Kind::Memset: {
        if (op.dst == was.dst && op.value == was.value && op.bytes == was.bytes) continue;
        const cudaMemsetParams p = memset_params(op.dst, op.value, op.bytes);
        e = cudaGraphExecMemsetNodeSetParams(exec, segment.nodes[i], &p);
        break;
      }
      case Kind::Copy:
        if (op.dst == was.dst && op.src == was.src && op.bytes == was.bytes) continue;
        e = cudaGraphExecMemcpyNodeSetParams1D(exec, segment.nodes[i], op.dst, op.src, op.bytes,
                                               cudaMemcpyDeviceToDevice);
        break;
      case Kind::Library:  // the same call as the graph's where none was captured
        if (!op.library) continue;
        e = cudaGraphExecChildGraphNodeSetParams(exec, segment.nodes[i], op.library);
        break;
      case Kind::Collective:  // kept as captured, or captured anew with the segment
        if (op.dst == was.dst && op.sources == was.sources && op.bytes == was.bytes) continue;
        e = cudaErrorInvalidValue;
        break;
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      segment.drop();
      return false;
    }
    ++stats_.updated;
  }
  stats_.update_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return true;
}

void StreamRecorder::instantiate(Segment& segment) {
  const auto start = std::chrono::steady_clock::now();
  segment.drop();
  check(cudaGraphCreate(&segment.graph, 0), "cudaGraphCreate");
  std::vector<cudaGraphNode_t>& nodes = segment.nodes;
  nodes.assign(now_.ops.size(), nullptr);
  for (size_t i = 0; i < now_.ops.size(); ++i) {
    Op& op = now_.ops[i];
    const cudaGraphNode_t* after = i ? &nodes[i - 1] : nullptr;
    const size_t n = i ? 1 : 0;
    switch (op.kind) {
      case Kind::Kernel: {
        cudaKernelNodeParams p{};
        p.func = const_cast<void*>(op.function);
        p.gridDim = op.grid, p.blockDim = op.block;
        p.sharedMemBytes = static_cast<unsigned>(op.shared_bytes);
        p.kernelParams = arguments(now_, op);
        // After a kernel: launched as that one runs out (see launch_kernel), so the node
        // hangs on it by a programmatic edge instead of an ordinary one.
        const bool programmatic = programmatic_ && i > 0 && now_.ops[i - 1].kind == Kind::Kernel;
        check(cudaGraphAddKernelNode(&nodes[i], segment.graph, programmatic ? nullptr : after,
                                     programmatic ? 0 : n, &p),
              "adding a kernel node");
        if (programmatic) {
          cudaGraphEdgeData edge{};
          edge.from_port = cudaGraphKernelNodePortProgrammatic;
          edge.type = cudaGraphDependencyTypeProgrammatic;
          check(cudaGraphAddDependencies(segment.graph, after, &nodes[i], &edge, 1),
                "adding a programmatic dependency");
        }
        break;
      }
      case Kind::Memset: {
        const cudaMemsetParams p = memset_params(op.dst, op.value, op.bytes);
        check(cudaGraphAddMemsetNode(&nodes[i], segment.graph, after, n, &p),
              "adding a memset node");
        break;
      }
      case Kind::Copy:
        check(cudaGraphAddMemcpyNode1D(&nodes[i], segment.graph, after, n, op.dst, op.src, op.bytes,
                                       cudaMemcpyDeviceToDevice),
              "adding a copy node");
        break;
      case Kind::Library:
      case Kind::Collective:  // (a collective, or a call kept as the graph had it: captured now)
        if (!op.library) capture(op);
        check(cudaGraphAddChildGraphNode(&nodes[i], segment.graph, after, n, op.library),
              "adding a library's kernels");
        break;
    }
  }
  check(cudaGraphInstantiate(&segment.exec, segment.graph, 0), "cudaGraphInstantiate");
  ++stats_.instantiated;
  stats_.updated += now_.ops.size();
  stats_.instantiate_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void StreamRecorder::launch_segment() {
  if (launched_ == segments_.size()) segments_.emplace_back();
  Segment& segment = segments_[launched_++];
  if (!update(segment)) {
    std::vector<Work> work = this->work();
    if (work != segment.last_work) {  // new work: a graph pays off only where it comes again
      segment.last_work = std::move(work);
      queue();
      return;
    }
    instantiate(segment);
  }
  stats_.nodes += now_.ops.size();
  // An updated segment's collectives, and its library calls made again as they were, are
  // its captures still: they stay with it.
  for (size_t i = 0; i < now_.ops.size(); ++i)
    if (!now_.ops[i].library &&
        (now_.ops[i].kind == Kind::Collective || now_.ops[i].kind == Kind::Library))
      std::swap(now_.ops[i].library, segment.graphed.ops[i].library);
  std::swap(now_, segment.graphed);
  now_.clear();
  check(cudaGraphLaunch(segment.exec, stream_), "launching a recorded CUDA graph");
  steps_.push_back({Step::What::Segment, launched_ - 1, {}});
}

StreamRecorder::Replay StreamRecorder::replay() {
  LUM_ASSERT(recording_) << "replaying a run that was not recorded";
  if (!now_.ops.empty() || launched_ == 0) launch_segment();
  if (outstanding_) {
    wait_beside();
    steps_.push_back({Step::What::Join, 0, {}});
  }
  recording_ = false;
  last_launched_ = launched_;
  std::swap(last_steps_, steps_);
  return stats_;
}

void StreamRecorder::launch_again() {
  LUM_ASSERT(last_launched_ > 0) << "no recorded graph to launch";
  for (const Step& s : last_steps_) switch (s.what) {
      case Step::What::Segment:
        check(cudaGraphLaunch(segments_[s.segment].exec, stream_),
              "launching a recorded CUDA graph");
        break;
      case Step::What::Beside:
        queue_beside(s.enqueue);
        break;
      case Step::What::Join:
        wait_beside();
        break;
    }
}

}  // namespace luminal::cudagen
