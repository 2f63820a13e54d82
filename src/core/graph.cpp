// Graph construction, validation and per-run state.
#include "luminal/graph.hpp"

#include <algorithm>
#include <atomic>

#include "luminal/backend.hpp"
#include "luminal/error.hpp"
#include "luminal/tensor.hpp"

namespace luminal {
namespace {

// Process-wide, so a version is never reused, even by another graph.
uint64_t next_data_version() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

bool is_index_dtype(DType t) {
  return t == DType::I32 || t == DType::I64;
}

void check_shapes_equal(const Node& n, const View& a, const View& b) {
  LUM_CHECK(a.shape() == b.shape()) << op_name(n.op) << ": shape mismatch " << to_string(a.shape())
                                    << " vs " << to_string(b.shape());
}

}  // namespace

Graph::Graph() = default;
Graph::~Graph() = default;

Tensor Graph::tensor(const std::vector<Expr>& shape, DType dtype) {
  return named_tensor("", shape, dtype);
}

Tensor Graph::named_tensor(std::string name, const std::vector<Expr>& shape, DType dtype) {
  Node n;
  n.op = Op::Input;
  n.dtype = dtype;
  n.shape = shape;
  n.name = name.empty() ? "input" + std::to_string(nodes_.size()) : std::move(name);
  return tensor_of(add_node(std::move(n)));
}

Tensor Graph::constant(double value, DType dtype) {
  Node n;
  n.op = Op::Constant;
  n.dtype = dtype;
  n.value = Scalar::of(value);
  return tensor_of(add_node(std::move(n)));
}

Tensor Graph::constant_int(int64_t value, DType dtype) {
  Node n;
  n.op = Op::Constant;
  n.dtype = dtype;
  n.value = Scalar::of_int(value);
  return tensor_of(add_node(std::move(n)));
}

Tensor Graph::iota(Expr expr, const std::vector<Expr>& shape, DType dtype) {
  Node n;
  n.op = Op::Iota;
  n.dtype = dtype;
  n.shape = shape;
  n.iota = expr;
  return tensor_of(add_node(std::move(n)));
}

Tensor Graph::tensor_of(NodeId id) {
  const Node& n = node(id);
  return Tensor(this, id, View::contiguous(n.shape), n.dtype);
}

const Node& Graph::node(NodeId id) const {
  LUM_CHECK(id.value < nodes_.size())
      << "node %" << id.value << " does not exist (graph has " << nodes_.size() << " nodes)";
  return nodes_[id.value];
}

NodeId Graph::add_node(Node n) {
  const OpTraits& t = traits(n.op);
  LUM_CHECK(t.arity < 0 || n.inputs.size() == static_cast<size_t>(t.arity))
      << t.name << ": expects " << t.arity << " inputs, got " << n.inputs.size();
  for (const Edge& e : n.inputs)
    LUM_CHECK(e.source.value < nodes_.size())
        << t.name << ": input %" << e.source.value << " does not exist";
  auto in_dtype = [&](size_t i) { return nodes_[n.inputs[i].source.value].dtype; };
  auto in_view = [&](size_t i) -> const View& { return n.inputs[i].view; };

  switch (t.category) {
    case OpCategory::Source:
      if (n.op == Op::Constant) n.shape.clear();
      break;
    case OpCategory::Unary:
      LUM_CHECK(!t.float_only || is_float(in_dtype(0)))
          << t.name << ": needs a floating-point input, got " << dtype_name(in_dtype(0));
      if (n.op != Op::Cast) n.dtype = in_dtype(0);
      n.shape = in_view(0).shape();
      break;
    case OpCategory::Binary:
      check_shapes_equal(n, in_view(0), in_view(1));
      LUM_CHECK(in_dtype(0) == in_dtype(1))
          << t.name << ": dtype mismatch " << dtype_name(in_dtype(0)) << " vs "
          << dtype_name(in_dtype(1));
      LUM_CHECK(n.op != Op::Mod || in_dtype(0) != DType::Bool) << "Mod: bool inputs";
      n.dtype = n.op == Op::LessThan ? DType::Bool : in_dtype(0);
      n.shape = in_view(0).shape();
      break;
    case OpCategory::Ternary:
      check_shapes_equal(n, in_view(0), in_view(1));
      check_shapes_equal(n, in_view(1), in_view(2));
      LUM_CHECK(in_dtype(0) == DType::Bool)
          << t.name << ": condition must be bool, got " << dtype_name(in_dtype(0));
      LUM_CHECK(in_dtype(1) == in_dtype(2))
          << t.name << ": dtype mismatch " << dtype_name(in_dtype(1)) << " vs "
          << dtype_name(in_dtype(2));
      n.dtype = in_dtype(1);
      n.shape = in_view(1).shape();
      break;
    case OpCategory::Reduce: {
      const auto& s = in_view(0).shape();
      const size_t axis = normalize_axis(n.axis, s.size(), t.name.data());
      LUM_CHECK(in_dtype(0) != DType::Bool)
          << t.name << ": bool input; cast it to an integer type first";
      n.axis = static_cast<int>(axis);
      n.dtype = in_dtype(0);
      n.shape = s;
      n.shape.erase(n.shape.begin() + static_cast<std::ptrdiff_t>(axis));
      break;
    }
    case OpCategory::Custom:
      LUM_CHECK(n.custom) << "Custom: node has no CustomOp";
      break;
    case OpCategory::Indexing:
      LUM_CHECK(is_index_dtype(in_dtype(1)))
          << t.name << ": indices must be i32 or i64, got " << dtype_name(in_dtype(1));
      n.dtype = in_dtype(0);
      if (n.op == Op::Gather) {
        n.shape = in_view(1).shape();
      } else {
        check_shapes_equal(n, in_view(1), in_view(2));
        LUM_CHECK(in_dtype(2) == in_dtype(0))
            << "Scatter: source dtype " << dtype_name(in_dtype(2)) << " differs from destination "
            << dtype_name(in_dtype(0));
        n.shape = in_view(0).shape();
      }
      break;
  }
  nodes_.push_back(std::move(n));
  return NodeId{static_cast<uint32_t>(nodes_.size() - 1)};
}

void Graph::set_dim(std::string_view name, int64_t value) {
  LUM_CHECK(value >= 0) << "set_dim: dimension '" << name << "' must be non-negative, got "
                        << value;
  dims_.set(name, value);
}

void Graph::grow_state(NodeId id) {
  node(id);  // validates the id
  if (id.value < data_.size()) return;
  const size_t n = nodes_.size();
  data_.resize(n);
  device_data_.resize(n);
  data_versions_.resize(n, 0);
  outputs_.resize(n, false);
  donated_.resize(n, false);
  on_device_.resize(n, false);
  written_into_.resize(n, false);
  gradient_stops_.resize(n, false);
}

void Graph::set_data(NodeId id, Buffer data) {
  grow_state(id);
  data_[id.value] = std::move(data);
  device_data_[id.value].reset();
  data_versions_[id.value] = next_data_version();
}

void Graph::set_device_data(NodeId id, DeviceData data) {
  grow_state(id);
  device_data_[id.value] = std::move(data);
  data_[id.value].reset();
  data_versions_[id.value] = next_data_version();
}

const DeviceData* Graph::device_data(NodeId id) const {
  if (id.value >= device_data_.size() || !device_data_[id.value]) return nullptr;
  return &*device_data_[id.value];
}

std::optional<DeviceData> Graph::take_device_data(NodeId id) {
  if (id.value >= device_data_.size() || !device_data_[id.value]) return std::nullopt;
  DeviceData d = std::move(*device_data_[id.value]);
  device_data_[id.value].reset();
  return d;
}

void Graph::keep_on_device(NodeId id) {
  mark_retrieve(id);
  on_device_[id.value] = true;
}

void Graph::write_into(NodeId id, DeviceData dest) {
  const Node& n = node(id);
  LUM_CHECK(n.op != Op::Input) << "write_into: '" << n.name
                               << "' is an input; give it GPU memory with set_device";
  LUM_CHECK(!executable_ || is_output(id))
      << "write_into: %" << id.value
      << " was not an output when the graph was compiled; mark it (retrieve, keep_on_device) "
         "before compiling";
  keep_on_device(id);
  set_device_data(id, std::move(dest));
  written_into_[id.value] = true;
}

std::optional<DeviceData> Graph::take_destination(NodeId id) {
  if (!is_written_into(id)) return std::nullopt;
  written_into_[id.value] = false;
  return take_device_data(id);
}

uint64_t Graph::data_version(NodeId id) const {
  return id.value < data_versions_.size() ? data_versions_[id.value] : 0;
}

void Graph::set_storage(NodeId id, uint32_t ggml_type) {
  LUM_CHECK(node(id).op == Op::Input) << "set_storage: node %" << id.value << " is not an input";
  Node& n = nodes_[id.value];
  LUM_CHECK(n.dtype == DType::F32 && !n.shape.empty())
      << "set_storage: input '" << n.name << "' must be f32 with at least one dim";
  size_t elems = 0, bytes = 0;
  LUM_CHECK(ggml_block_layout(ggml_type, elems, bytes))
      << "set_storage: unsupported format " << ggml_type_name(ggml_type) << " for '" << n.name
      << "'";
  const auto row = n.shape.back().as_const();
  LUM_CHECK(row && *row % static_cast<int64_t>(elems) == 0)
      << "set_storage: the last dim of '" << n.name << "' (" << n.shape.back()
      << ") is not a whole number of " << elems << "-element " << ggml_type_name(ggml_type)
      << " blocks";
  LUM_CHECK(!executable_ || n.quant == ggml_type)
      << "set_storage: '" << n.name << "' changes storage format after compile; "
      << "set the data before compiling";
  n.quant = ggml_type;
}

void Graph::set_quantized_data(NodeId id, uint32_t ggml_type, Buffer raw) {
  LUM_CHECK(raw.dtype() == DType::U8)
      << "set_quantized_data: '" << node(id).name << "' needs raw u8 block data, got "
      << dtype_name(raw.dtype());
  set_storage(id, ggml_type);
  set_data(id, std::move(raw));
}

Buffer dequantized(const Node& n, const Buffer& raw) {
  size_t elems = 0, bytes = 0;
  LUM_CHECK(ggml_block_layout(n.quant, elems, bytes) && raw.dtype() == DType::U8 &&
            raw.numel() % bytes == 0)
      << "input '" << n.name << "': data is not whole " << ggml_type_name(n.quant) << " blocks";
  Buffer out(DType::F32, raw.numel() / bytes * elems, Buffer::Uninitialized{});
  dequantize(n.quant, static_cast<const std::byte*>(raw.data()), out.numel(),
             out.span<float>().data());
  return out;
}

namespace {
size_t numel_under(const Node& n, const Bindings& dims) {
  size_t numel = 1;
  for (Expr d : n.shape) numel *= static_cast<size_t>(d.eval(dims));
  return numel;
}
}  // namespace

void check_input_data(const Node& n, NodeId id, const DeviceData& d, const Bindings& dims) {
  LUM_CHECK(n.quant == kPlainStorage)
      << "input '" << n.name << "' is stored as " << ggml_type_name(n.quant)
      << " blocks, which are read from host data only";
  const size_t numel = numel_under(n, dims);
  LUM_CHECK(d.dtype() == n.dtype) << "input '" << n.name << "' (%" << id.value << ") is "
                                  << dtype_name(n.dtype) << " but its data on the GPU is "
                                  << dtype_name(d.dtype());
  LUM_CHECK(d.numel() == numel) << "input '" << n.name << "' of shape " << to_string(n.shape)
                                << " needs " << numel << " elements, got " << d.numel()
                                << " on the GPU";
}

void check_input_data(const Node& n, NodeId id, const Buffer* b, const Bindings& dims,
                      const DeviceData* on_device) {
  LUM_CHECK(b || !on_device) << "input '" << n.name << "' (%" << id.value << ") lives on GPU "
                             << on_device->device()
                             << ", and this backend reads host data: set it from the host, or "
                                "copy it there with DeviceData::to_host()";
  LUM_CHECK(b) << "input '" << n.name << "' (%" << id.value
               << ") has no data: call set() before execute()";
  const size_t numel = numel_under(n, dims);
  if (n.quant != kPlainStorage) {
    const size_t bytes = quantized_bytes(n.quant, numel);
    LUM_CHECK(b->dtype() == DType::U8 && b->numel() == bytes)
        << "input '" << n.name << "' of shape " << to_string(n.shape) << " stored as "
        << ggml_type_name(n.quant) << " needs " << bytes << " bytes of u8 blocks, got "
        << b->numel() << " " << dtype_name(b->dtype()) << " elements";
    return;
  }
  LUM_CHECK(b->dtype() == n.dtype) << "input '" << n.name << "' is " << dtype_name(n.dtype)
                                   << " but its data is " << dtype_name(b->dtype());
  LUM_CHECK(b->numel() == numel) << "input '" << n.name << "' of shape " << to_string(n.shape)
                                 << " needs " << numel << " elements, got " << b->numel();
}

const Buffer* Graph::data(NodeId id) const {
  if (id.value >= data_.size() || !data_[id.value]) return nullptr;
  return &*data_[id.value];
}

void Graph::donate(NodeId input) {
  LUM_CHECK(node(input).op == Op::Input) << "donate: %" << input.value << " is not an input";
  grow_state(input);
  donated_[input.value] = true;
}

void Graph::stop_gradient(NodeId id) {
  grow_state(id);
  gradient_stops_[id.value] = true;
}

void Graph::drop_data(NodeId id) {
  if (id.value < data_.size()) data_[id.value].reset(), device_data_[id.value].reset();
}

std::optional<Buffer> Graph::take_data(NodeId id) {
  if (id.value >= data_.size()) return std::nullopt;
  std::optional<Buffer> b = std::move(data_[id.value]);
  data_[id.value].reset();
  return b;
}

void Graph::mark_retrieve(NodeId id) {
  grow_state(id);
  outputs_[id.value] = true;
}

void Graph::mark_keep(NodeId id) {
  mark_retrieve(id);
}

std::vector<NodeId> Graph::outputs() const {
  std::vector<NodeId> out;
  for (uint32_t v = 0; v < outputs_.size(); ++v)
    if (outputs_[v]) out.push_back(NodeId{v});
  return out;
}

void Graph::compile(const Backend& backend) {
  executable_ = backend.compile(*this);
  device_memory_ = backend.device_memory();
  compiled_nodes_ = nodes_.size();
}

void Graph::execute() {
  check_executable("execute");
  executable_->run(*this);
  for (const auto& hook : after_run_) hook();
}

void Graph::execute_queued() {
  check_executable("execute_queued");
  executable_->queue(*this);
  for (const auto& hook : after_run_) hook();
}

void Graph::execute_on(void* stream) {
  check_executable("execute_on");
  executable_->queue_on(*this, stream);
  for (const auto& hook : after_run_) hook();
}

void Graph::wait() {
  if (executable_) executable_->wait();
}

void Graph::check_executable(const char* what) const {
  LUM_CHECK(executable_) << what
                         << ": the graph is not compiled; call compile(luminal::reference()) "
                            "or another backend first";
  LUM_CHECK(compiled_nodes_ == nodes_.size()) << what << ": " << nodes_.size() - compiled_nodes_
                                              << " nodes were added after compile; compile again";
  if (device_memory_) return;
  const auto given = std::find(written_into_.begin(), written_into_.end(), true);
  LUM_CHECK(given == written_into_.end())
      << what << ": output %" << given - written_into_.begin()
      << " was given GPU memory to be written into (write_into), and the graph is compiled for "
         "a backend that keeps its outputs in host memory";
}

void Graph::prepare(const Bindings& dims) {
  LUM_CHECK(executable_) << "prepare: the graph is not compiled";
  executable_->prepare(*this, dims);
}

RunStats Graph::last_run_stats() const {
  return executable_ ? executable_->last_run() : RunStats{};
}

void Graph::time_device_alone(bool on) {
  check_executable("time_device_alone");
  executable_->time_device_alone(on);
}

}  // namespace luminal
