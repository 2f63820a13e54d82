// A run's work on the stream recorded instead of queued, then run as CUDA graphs.
//
// Stream capture would make a new graph every run, and instantiating one costs more than
// launching its kernels. A decode step's kernels are the same every step, but their
// arguments move (the cache length, where the new rows go, a buffer handed over), so the
// graphs are built and instantiated from the first recording alone; a later recording of
// the same work (the same kernels, memsets, copies, library calls and collectives, in the
// same order) only updates the nodes whose parameters changed. A segment of work unlike
// its graph's is queued operation by operation, and instantiated only when the next run
// records that work again (a prompt between decode steps costs no instantiation). The run
// is cut into segments (16 operations, then 32, 64, and 128 each after), each launched as
// soon as it is recorded, so the GPU starts on the first while the host records the next
// instead of waiting for the whole run.
//
// A collective whose result is wanted only much later (a data-parallel step's gradient
// exchange, read by the update at the end of the backward pass) is queued beside the
// graphs instead, on a stream of its own behind the work before it, and the graphs after
// it run while it does until the caller says one needs it (join_collectives): the
// recording is cut there, and the stream waits for the side stream before going on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace luminal::cudagen {

/// Kernel `function` queued on `stream`. `programmatic`: it may be launched before the
/// kernel ahead of it on the stream has finished (programmatic dependent launch), which
/// every luminal kernel allows by waiting for it first (lum_after_prior_grids).
cudaError_t launch_kernel(const void* function, dim3 grid, dim3 block, void** args,
                          size_t shared_bytes, cudaStream_t stream, bool programmatic);

class StreamRecorder {
 public:
  /// `programmatic`: kernels are launched programmatically (launch_kernel), and a kernel
  /// node that follows another kernel node hangs on it by a programmatic edge.
  explicit StreamRecorder(bool programmatic) : programmatic_(programmatic) {}
  ~StreamRecorder();
  StreamRecorder(const StreamRecorder&) = delete;
  StreamRecorder& operator=(const StreamRecorder&) = delete;

  /// From now on, work for `stream` goes through the calls below into a list instead of
  /// onto it, until flush() or replay().
  void begin(cudaStream_t stream);
  bool recording() const { return recording_; }

  /// Records a kernel launch: its parameters' values are copied now, as a launch would
  /// (`args`: the address of each, as many as the kernel takes).
  void kernel(const void* function, dim3 grid, dim3 block, std::span<void* const> args,
              size_t shared_bytes);
  void memset(void* dst, int value, size_t bytes);
  void copy(void* dst, const void* src, size_t bytes);  // device to device
  /// A collective (an NCCL all-reduce or all-gather from `sources` into `bytes` at `dst`):
  /// `enqueue` queues it on the stream it is given. Its graph node is captured once and kept
  /// while later runs record it with the same arguments (a library's captures are not to be
  /// re-pointed). `which`: the collective (another is other work).
  void collective(const void* which, std::span<const void* const> sources, void* dst, size_t bytes,
                  std::function<void(cudaStream_t)> enqueue);
  /// A collective run beside the work recorded after it: what is recorded so far is
  /// launched, and `enqueue` queues the collective on the side stream behind it. Such
  /// collectives run one after another, in the order they come.
  void collective_beside(std::function<void(cudaStream_t)> enqueue);
  /// The work from now on waits for the collectives queued beside it (what is recorded
  /// so far is launched first); nothing where none is outstanding. Also outside a
  /// recording, for collectives launch_again() queued.
  void join_collectives();
  /// A library's call (cuBLASLt's, cuDNN's): `enqueue` queues it on the stream it is
  /// given. Recorded like a kernel: captured as a graph of its own where its segment is
  /// instantiated (one node of it), called where the segment is queued op by op. `key`
  /// names the call and every argument it is given (what the library queues follows
  /// from it): where the segment's graph holds a call of the same key here, its captured
  /// kernels stand and the library is not called at all (a cuDNN convolution's host work
  /// outlasts its kernels). `enqueue` is called later in the run, if at all.
  void library_call(std::string key, std::function<void(cudaStream_t)> enqueue);

  /// Someone needs the stream itself (a search's timed runs, a wait, a copy to the host):
  /// what was recorded is queued as ordinary launches, and recording stops for the rest of
  /// the run. Nothing where nothing is being recorded.
  void flush();

  /// What a run's segments did: operations run as graph nodes, the nodes that took new
  /// parameters (and the host's time giving them), graphs instantiated (and their cost),
  /// and operations queued one by one (work unlike the graphs').
  struct Replay {
    size_t nodes = 0, updated = 0, instantiated = 0, queued = 0;
    double update_seconds = 0, instantiate_seconds = 0;
    Replay& operator+=(const Replay& o) {
      nodes += o.nodes, updated += o.updated, instantiated += o.instantiated, queued += o.queued;
      update_seconds += o.update_seconds, instantiate_seconds += o.instantiate_seconds;
      return *this;
    }
  };
  /// Ends the recording and launches what is left of it; what the run's segments did.
  Replay replay();
  /// Launches the graphs again as the last replay() left them (a run like that one), with
  /// the collectives beside them.
  void launch_again();
  /// Drops the graphs: before the modules their kernels come from are unloaded.
  void drop();

 private:
  enum class Kind : uint8_t { Kernel, Memset, Copy, Library, Collective };
  struct Op {
    Kind kind = Kind::Kernel;
    const void* function = nullptr;  // Kernel; Collective: which
    dim3 grid, block;
    size_t shared_bytes = 0;
    size_t params_begin = 0, params_end = 0;  // Kernel: its parameters in params_, packed
    size_t sizes_begin = 0;                   // Kernel: its parameters' sizes, in sizes_
    void* dst = nullptr;                      // Memset, Copy, Collective
    const void* src = nullptr;                // Copy
    size_t bytes = 0;                         // Memset, Copy, Collective
    int value = 0;                            // Memset
    cudaGraph_t library = nullptr;            // Library, Collective (once graphed): owned by
                                              // the recording
    std::function<void(cudaStream_t)> enqueue;  // Library, Collective
    std::vector<const void*> sources;           // Collective
    std::string key;                            // Library (see library_call)
  };
  // What an operation is, apart from its parameters: a graph node is updated only to an
  // operation of the same work (a kernel node keeps its function).
  struct Work {
    Kind kind;
    const void* function;  // Kernel; Collective: which
    bool operator==(const Work&) const = default;
  };
  static Work work_of(const Op& op) { return {op.kind, op.function}; }
  struct Recording {
    std::vector<Op> ops;
    std::vector<unsigned char> params;  // every kernel's parameter values, one after another
    std::vector<size_t> sizes;          // their sizes (a kernel's are in a row)
    void clear();
  };
  // One segment's graph, and the recording its nodes' parameters came from.
  struct Segment {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> nodes;  // by op
    Recording graphed;
    std::vector<Work> last_work;  // what the last run queued here instead (see launch_segment)
    void drop();
  };
  std::vector<Work> work() const;  // of the operations recorded in this segment
  // The sizes of `function`'s first `count` parameters (the driver's, asked once).
  const std::vector<size_t>& parameter_sizes(const void* function, size_t count);
  // Queues op's library call or collective on the stream (a graph of it where captured).
  void enqueue(const Op& op);
  // op's call or collective captured as a graph, into op.library.
  void capture(Op& op);
  // Records `op`; launches the segment once it is full.
  void add(const Op& op);
  // The recorded segment run: as the next segment's graph, updated or instantiated, or
  // queued.
  void launch_segment();
  // The recorded operations queued on the stream one by one.
  void queue();
  // A collective queued on the side stream behind the stream's work so far; the stream
  // waiting for the side stream.
  void queue_beside(const std::function<void(cudaStream_t)>& enqueue);
  void wait_beside();
  // Kernel op's parameters as cudaLaunchKernel and graph nodes take them (pointers into
  // `r.params`, in scratch_).
  void** arguments(const Recording& r, const Op& op);
  bool update(Segment& segment);
  void instantiate(Segment& segment);

  const bool programmatic_;
  bool recording_ = false;
  cudaStream_t stream_ = nullptr;  // the one recorded (begin)
  Recording now_;                  // the segment being recorded
  std::vector<Segment> segments_;  // the graphs, in the order a run launches them
  size_t launched_ = 0;            // segments launched by this run
  size_t last_launched_ = 0;       // by the last run that replay() ended
  Replay stats_;                   // this run's
  std::unordered_map<const void*, std::vector<size_t>> parameter_sizes_;  // by function
  std::vector<void*> scratch_;
  std::vector<cudaGraphExec_t> flushed_libraries_;  // instantiated by flush(), freed by begin()
  // What a run launched, in order, for launch_again: a segment's graph, a collective
  // beside the graphs, the stream waiting for those.
  struct Step {
    enum class What : uint8_t { Segment, Beside, Join } what;
    size_t segment = 0;
    std::function<void(cudaStream_t)> enqueue;
  };
  std::vector<Step> steps_, last_steps_;
  cudaStream_t side_ = nullptr;  // the collectives beside the graphs
  cudaEvent_t ready_ = nullptr, side_done_ = nullptr;
  bool outstanding_ = false;  // a collective beside that the stream has not waited for
};

}  // namespace luminal::cudagen
