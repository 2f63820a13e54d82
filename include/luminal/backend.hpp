// The contract between a graph and whatever runs it. A Backend turns a graph into an
// Executable once; the Executable runs it many times with new inputs and dims.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace luminal {

class Graph;
class Bindings;

/// What the last run did (zero where a backend does not track it).
struct RunStats {
  size_t nodes_run = 0;
  size_t launches = 0;        // planned kernels and library calls run (GPU backends): one
                              // each, though some launch several (attention's mask pass)
  size_t peak_bytes = 0;      // intermediate values alive at once, at the peak
  double device_seconds = 0;  // the kernels alone, timed by device events (GPU backends);
                              // of the runs this call waited for (see Executable::queue)
  double issue_seconds = 0;   // the host's time queuing the run's work, before waiting for
                              // it (GPU backends): near device_seconds, the GPU waited on it
  bool replayed = false;      // a GPU backend ran the run as one CUDA graph
  // Nodes of that graph given new parameters (0: it ran again as it was).
  size_t graph_nodes_updated = 0;
  size_t host_fallbacks = 0;  // kernels a GPU backend ran on the host, by their reference
                              // semantics, for want of a device kernel (slow)
};

class Executable {
 public:
  virtual ~Executable() = default;
  /// Runs with the graph's current inputs and bound dims, storing outputs in it.
  virtual void run(Graph& graph) = 0;
  /// Like run, but a GPU backend may return once the work is queued, where every output
  /// stays on the device (Graph::keep_on_device): reading one on the host
  /// (DeviceData::to_host) waits for the work that writes it, the next run queued on the
  /// device follows it there, and the host meanwhile prepares that next run. Such a run is
  /// settled (its device time counted, any error a kernel recorded raised) by the next
  /// call of run or queue, after that call has queued its own work. Others run.
  virtual void queue(Graph& graph) { run(graph); }
  /// Like queue, in order with a GPU stream of the caller's (a cudaStream_t of the
  /// executable's device, such as PyTorch's current stream): the run starts after the work
  /// queued there so far, and the work queued there afterwards starts after the run,
  /// without the host waiting for either. Others run (their work is done on return).
  virtual void queue_on(Graph& graph, void* stream) {
    (void)stream;
    run(graph);
  }
  /// Waits for a queued run and settles it (last_run() then gives its device time; an
  /// error a kernel recorded is raised). Nothing where none is queued.
  virtual void wait() {}
  virtual RunStats last_run() const { return {}; }
  /// While on, a GPU backend's device starts a run only once the host has queued all of
  /// it, so last_run().device_seconds is the device's time alone, without its waits for
  /// the host between kernels (what a search comparing programs wants; a run that is not
  /// compared is better started as soon as its first kernels are queued).
  virtual void time_device_alone(bool on) { (void)on; }
  /// Does ahead of time whatever a run of `graph` with these dim values would first have
  /// to do (compile kernels specialised for them, re-lay out weights). Optional.
  virtual void prepare(const Graph& graph, const Bindings& dims) { (void)graph, (void)dims; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Executable> compile(const Graph& graph) const = 0;
  /// Whether values live in memory of their own (a GPU's), where outputs marked
  /// keep_on_device stay: reading one on the host is then a copy, and work that stays
  /// there (picking the next token) is worth doing there.
  virtual bool device_memory() const { return false; }
};

}  // namespace luminal
