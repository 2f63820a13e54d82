// The HLIR graph: primitive-op nodes whose input edges carry the consumer's view of
// the producer, plus the per-run state (bound dims, input data, kept outputs).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "luminal/backend.hpp"
#include "luminal/buffer.hpp"
#include "luminal/custom_op.hpp"
#include "luminal/device_data.hpp"
#include "luminal/dtype.hpp"
#include "luminal/expr.hpp"
#include "luminal/op.hpp"
#include "luminal/quant.hpp"
#include "luminal/view.hpp"

namespace luminal {

class Tensor;

/// A node's index in its graph.
struct NodeId {
  uint32_t value = UINT32_MAX;
  bool valid() const { return value != UINT32_MAX; }
  bool operator==(const NodeId&) const = default;
  auto operator<=>(const NodeId&) const = default;
};

/// A literal that keeps integers exact: `is_int` says which member is meaningful.
struct Scalar {
  double f = 0;
  int64_t i = 0;
  bool is_int = false;
  static Scalar of(double v) { return {v, 0, false}; }
  static Scalar of_int(int64_t v) { return {static_cast<double>(v), v, true}; }
  double as_double() const { return is_int ? static_cast<double>(i) : f; }
};

/// An input edge: the producer and how this consumer reads it.
struct Edge {
  NodeId source;
  View view;
};

struct Node {
  Op op = Op::Input;
  DType dtype = DType::F32;
  std::vector<Expr> shape;                 // output shape; outputs are stored row-major
  std::vector<Edge> inputs;                // arity from traits(op)
  std::string name;                        // Input: the data's name; otherwise an optional label
  Scalar value;                            // Constant
  Expr iota;                               // Iota: value at flat output index `z`
  int axis = -1;                           // SumReduce / MaxReduce
  std::shared_ptr<const CustomOp> custom;  // Custom: semantics; shape and dtype set by the builder
  // Input only: the data are blocks of this ggml format (quant.hpp) that decode to the
  // node's f32 values, e.g. a Q4_K weight kept compressed; kPlainStorage otherwise.
  uint32_t quant = kPlainStorage;
};

/// Checks an input's data against its node (dtype, element or block count under the
/// bound dims); throws luminal::Error naming the input. `on_device`: the input's data
/// where it lies on a GPU instead (named in the error a host backend raises).
void check_input_data(const Node& n, NodeId id, const Buffer* data, const Bindings& dims,
                      const DeviceData* on_device = nullptr);
/// The same checks for data on a GPU.
void check_input_data(const Node& n, NodeId id, const DeviceData& data, const Bindings& dims);
/// The f32 values of a quantized input's block data (n.quant != kPlainStorage).
Buffer dequantized(const Node& n, const Buffer& raw);

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;  // tensors point at their graph
  Graph& operator=(const Graph&) = delete;

  // --- building -------------------------------------------------------------------
  /// A new input of the given shape (dims may be symbolic: {"s", 64}).
  Tensor tensor(const std::vector<Expr>& shape, DType dtype = DType::F32);
  Tensor named_tensor(std::string name, const std::vector<Expr>& shape, DType dtype = DType::F32);
  /// A scalar constant (shape []); broadcast it with Tensor::broadcast_to.
  Tensor constant(double value, DType dtype = DType::F32);
  Tensor constant_int(int64_t value, DType dtype = DType::I32);
  /// out[z] = expr evaluated at the flat output index z, for the given shape.
  Tensor iota(Expr expr, const std::vector<Expr>& shape, DType dtype = DType::I32);
  /// A constant broadcast to `shape`.
  Tensor full(const std::vector<Expr>& shape, double value, DType dtype = DType::F32);
  Tensor zeros(const std::vector<Expr>& shape, DType dtype = DType::F32);
  Tensor ones(const std::vector<Expr>& shape, DType dtype = DType::F32);
  /// start, start+step, ... below end (torch.arange); integral arguments with an integer
  /// dtype stay exact.
  Tensor arange(double start, double end, double step = 1, DType dtype = DType::F32);
  /// n x n identity.
  Tensor eye(Expr n, DType dtype = DType::F32);
  /// Seeded random data for initialisation (uniform in [lo, hi) / normal(mean, std)),
  /// generated on the host when the node is created; shapes must be concrete.
  Tensor rand(const std::vector<Expr>& shape, uint64_t seed, double lo = 0, double hi = 1);
  Tensor randn(const std::vector<Expr>& shape, uint64_t seed, double mean = 0, double std = 1);

  /// Validates and appends a node (inputs must already exist); returns its id.
  NodeId add_node(Node node);
  const Node& node(NodeId id) const;
  size_t num_nodes() const { return nodes_.size(); }
  /// A tensor handle reading a node's whole output.
  Tensor tensor_of(NodeId id);

  // --- per-run state --------------------------------------------------------------
  /// Binds a symbolic dimension for the following runs.
  void set_dim(std::string_view name, int64_t value);
  const Bindings& dims() const { return dims_; }

  void set_data(NodeId id, Buffer data);
  /// Stores an f32 input as blocks of a ggml format (`raw` is u8, whole rows of blocks
  /// along the last dim); backends decode on the fly or select kernels that compute on
  /// the blocks. The format is part of what is compiled: changing it needs a recompile.
  void set_quantized_data(NodeId id, uint32_t ggml_type, Buffer raw);
  /// Declares an input's block format without data (what set_quantized_data checks and
  /// records; used when rebuilding a graph).
  void set_storage(NodeId id, uint32_t ggml_type);
  /// The stored data of a node (inputs, and outputs after execute), or nullptr.
  const Buffer* data(NodeId id) const;
  /// A number that changes whenever the node's data is set: backends that keep a derived
  /// copy of an input (weights re-laid out for their kernels) know when to redo it.
  uint64_t data_version(NodeId id) const;
  void drop_data(NodeId id);
  /// Moves a node's data out (nullopt if none), e.g. to reuse an output buffer.
  std::optional<Buffer> take_data(NodeId id);

  /// Sets an input's data where it lies in a GPU's memory (replacing any host data, as
  /// set_data replaces device data: a node holds one or the other); a GPU backend reads
  /// it there without a copy.
  void set_device_data(NodeId id, DeviceData data);
  /// A node's data on a GPU (an input so set, an output kept there), or nullptr.
  const DeviceData* device_data(NodeId id) const;
  std::optional<DeviceData> take_device_data(NodeId id);
  /// Marks an output to be left in the GPU's memory after execute (device_data()),
  /// rather than copied back, by backends that run on one; host backends store it on
  /// the host as usual.
  void keep_on_device(NodeId id);
  bool is_kept_on_device(NodeId id) const { return flag(on_device_, id); }
  /// Has the next run write output `id` (one when the graph was compiled) into `dest`,
  /// memory of the caller's on the GPU the program runs on, of the output's dtype and
  /// element count, rather than memory of the program's: the kernel computing it stores
  /// there, so the caller has the result with no copy (the torch.compile backend writes
  /// each output into a tensor of torch's). For one run: the run lets go of `dest` (the
  /// caller reads its memory itself), and a later run not given memory again hands the
  /// output over as keep_on_device does. Runs that write the same memory as the last
  /// launch a GPU backend's recorded work again as it was. Host backends refuse it.
  void write_into(NodeId id, DeviceData dest);
  bool is_written_into(NodeId id) const { return flag(written_into_, id); }
  /// The memory write_into gave, taken at the end of the run that wrote it (by backends).
  std::optional<DeviceData> take_destination(NodeId id);

  /// Lets runs consume an input's buffer: an op that can update it in place
  /// (append_rows) takes it for its output, and the input holds no data after the run.
  /// For state the caller replaces with an output after every run, such as a KV cache.
  void donate(NodeId input);
  bool is_donated(NodeId id) const { return flag(donated_, id); }

  /// Marks a node as a constant to train::gradients: no gradient flows through it to
  /// what it reads. For a value whose gradient is zero by construction, such as the
  /// maximum a softmax subtracts (its result does not depend on it), so that no nodes
  /// compute that zero.
  void stop_gradient(NodeId id);
  bool stops_gradient(NodeId id) const { return flag(gradient_stops_, id); }

  /// Marks a node whose value is read back after execute.
  void mark_retrieve(NodeId id);
  /// Marks a node that must survive optimisation and keep its value after execute.
  void mark_keep(NodeId id);
  bool is_output(NodeId id) const { return flag(outputs_, id); }
  std::vector<NodeId> outputs() const;

  // --- running --------------------------------------------------------------------
  /// Prepares the graph for a backend (e.g. luminal::reference()).
  void compile(const Backend& backend);
  /// Runs the compiled graph with the current inputs and dims.
  void execute();
  /// Runs as execute does, but a GPU backend may return as soon as the work is queued
  /// (Executable::queue): a decoding loop queues its next step while the GPU runs this one.
  void execute_queued();
  /// Runs as execute_queued does, in order with a GPU stream of the caller's
  /// (Executable::queue_on): the run follows the work queued there and precedes the work
  /// queued there afterwards, so a caller such as PyTorch need not synchronise its stream
  /// before the run nor wait for it after.
  void execute_on(void* stream);
  /// Waits for a run execute_queued left running (Executable::wait).
  void wait();
  /// Lets the backend prepare for runs with these dims and the current inputs
  /// (Executable::prepare), so the first such run is not slowed by compiling.
  void prepare(const Bindings& dims);
  /// Runs `hook` after every execute (debug printing and diffing).
  void add_after_run(std::function<void()> hook) { after_run_.push_back(std::move(hook)); }
  /// Statistics of the last execute (zeros before the first).
  RunStats last_run_stats() const;
  /// While on, a GPU backend starts each run only once the host has queued all of it
  /// (Executable::time_device_alone), so last_run_stats().device_seconds holds the device's
  /// work alone, not the host's launch: how PyTorch's kernels are timed with the GPU kept
  /// busy while the host queues them. For benchmarks; a run otherwise starts sooner.
  void time_device_alone(bool on);

  // --- printing -------------------------------------------------------------------
  /// One line per node: `%3 = Add(%1, %2{view}) : f32[2, 3]`.
  std::string to_text() const;
  /// Graphviz DOT.
  std::string to_dot() const;

 private:
  void validate(const Node& n) const;
  static bool flag(const std::vector<bool>& flags, NodeId id) {
    return id.value < flags.size() && flags[id.value];
  }
  // Room for per-node state up to `id`.
  void grow_state(NodeId id);
  // Raises, naming `what`, unless the graph is compiled as it stands.
  void check_executable(const char* what) const;

  std::vector<Node> nodes_;
  Bindings dims_;
  // Per-node state, indexed by node id (grown on demand): a backend looks these up for
  // every kernel of every run, where a hash map's scattered nodes cost a cache miss each
  // once a decode step's weight traffic has evicted them. A deque, so that growing it
  // keeps the Buffers that data() has handed out where they are.
  std::deque<std::optional<Buffer>> data_;
  std::deque<std::optional<DeviceData>> device_data_;
  std::vector<uint64_t> data_versions_;  // 0: never set
  std::vector<bool> outputs_, donated_, on_device_, written_into_, gradient_stops_;
  std::unique_ptr<Executable> executable_;
  bool device_memory_ = false;  // the backend compiled for keeps values in a GPU's memory
  std::vector<std::function<void()>> after_run_;
  size_t compiled_nodes_ = 0;  // nodes present when compiled; later additions need a recompile
};

}  // namespace luminal

template <>
struct std::hash<luminal::NodeId> {
  size_t operator()(luminal::NodeId id) const noexcept { return id.value; }
};
