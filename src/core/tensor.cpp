// Tensor: builders for primitive nodes and view edits.
#include "luminal/tensor.hpp"

#include <algorithm>

#include "luminal/error.hpp"

namespace luminal {
namespace {

Graph& same_graph(const Tensor& a, const Tensor& b, Op op) {
  LUM_CHECK(&a.graph() == &b.graph()) << op_name(op) << ": operands belong to different graphs";
  return a.graph();
}

}  // namespace

Graph& Tensor::graph() const {
  LUM_CHECK(graph_) << "use of an empty Tensor handle";
  return *graph_;
}

Expr Tensor::dim(int axis) const {
  return shape()[normalize_axis(axis, rank(), "dim")];
}

Tensor Tensor::unary(Op op, DType out) const {
  Node n;
  n.op = op;
  n.dtype = out;
  n.inputs = {Edge{id_, view_}};
  return graph().tensor_of(graph().add_node(std::move(n)));
}

Tensor Tensor::log2() const {
  return unary(Op::Log2, dtype_);
}
Tensor Tensor::exp2() const {
  return unary(Op::Exp2, dtype_);
}
Tensor Tensor::sin() const {
  return unary(Op::Sin, dtype_);
}
Tensor Tensor::sqrt() const {
  return unary(Op::Sqrt, dtype_);
}
Tensor Tensor::recip() const {
  return unary(Op::Recip, dtype_);
}
Tensor Tensor::cast(DType to) const {
  return to == dtype_ ? *this : unary(Op::Cast, to);
}

Tensor Tensor::contiguous() const {
  if (view_ == View::contiguous(graph().node(id_).shape)) return *this;
  return unary(Op::Contiguous, dtype_);
}

Tensor Tensor::reduce(Op op, int axis) const {
  Node n;
  n.op = op;
  n.axis = axis;
  n.inputs = {Edge{id_, view_}};
  return graph().tensor_of(graph().add_node(std::move(n)));
}

Tensor Tensor::sum_reduce(int axis) const {
  return reduce(Op::SumReduce, axis);
}
Tensor Tensor::max_reduce(int axis) const {
  return reduce(Op::MaxReduce, axis);
}

Tensor Tensor::gather(const Tensor& indices) const {
  Graph& g = same_graph(*this, indices, Op::Gather);
  Node n;
  n.op = Op::Gather;
  n.inputs = {Edge{id_, view_}, Edge{indices.id_, indices.view_}};
  return g.tensor_of(g.add_node(std::move(n)));
}

Tensor Tensor::scatter(const Tensor& indices, const Tensor& src) const {
  Graph& g = same_graph(*this, indices, Op::Scatter);
  same_graph(*this, src, Op::Scatter);
  Node n;
  n.op = Op::Scatter;
  n.inputs = {Edge{id_, view_}, Edge{indices.id_, indices.view_}, Edge{src.id_, src.view_}};
  return g.tensor_of(g.add_node(std::move(n)));
}

Tensor binary(Op op, const Tensor& a, const Tensor& b) {
  Graph& g = same_graph(a, b, op);
  const auto shape = broadcast_shapes(a.shape(), b.shape(), op_name(op).data());
  Node n;
  n.op = op;
  n.inputs = {Edge{a.id_, a.view_.broadcast_to(shape)}, Edge{b.id_, b.view_.broadcast_to(shape)}};
  return g.tensor_of(g.add_node(std::move(n)));
}

Tensor scalar_like(const Tensor& like, double value) {
  if (is_float(like.dtype())) return like.graph().constant(value, like.dtype());
  return like.graph().constant_int(static_cast<int64_t>(value), like.dtype());
}

// --- movement ----------------------------------------------------------------------

Tensor Tensor::permute(const std::vector<int>& axes) const {
  return Tensor(graph_, id_, view_.permute(axes), dtype_);
}

Tensor Tensor::expand(int axis, Expr size) const {
  return Tensor(graph_, id_, view_.expand_dim(axis, size), dtype_);
}

Tensor Tensor::broadcast_to(const std::vector<Expr>& shape) const {
  return Tensor(graph_, id_, view_.broadcast_to(shape), dtype_);
}

Tensor Tensor::reshape(const std::vector<Expr>& requested) const {
  std::vector<Expr> shape = requested;
  auto inferred = std::find(shape.begin(), shape.end(), Expr(-1));
  if (inferred != shape.end()) {
    LUM_CHECK(std::count(shape.begin(), shape.end(), Expr(-1)) == 1)
        << "reshape: more than one -1 in " << to_string(requested);
    *inferred = 1;
    const Expr known = product(shape);
    LUM_CHECK((numel() % known) == Expr(0))
        << "reshape: cannot infer -1 in " << to_string(requested) << " for " << numel()
        << " elements";
    *inferred = numel() / known;
  }
  if (auto v = view_.reshape(shape)) return Tensor(graph_, id_, *v, dtype_);
  Tensor copy = unary(Op::Contiguous, dtype_);
  auto v = copy.view_.reshape(shape);
  LUM_ASSERT(v) << "a contiguous view must reshape to a shape of equal size";
  return Tensor(graph_, copy.id_, *v, dtype_);
}

Tensor Tensor::slice(int axis, Expr start, Expr end) const {
  return Tensor(graph_, id_, view_.slice(axis, start, end), dtype_);
}

Tensor Tensor::pad(int axis, Expr before, Expr after, double value) const {
  Tensor zero_padded(graph_, id_, view_.pad(axis, before, after), dtype_);
  if (value == 0.0) return zero_padded;
  // Padding reads zero; the fill value goes where a padded ones-mask reads zero.
  Tensor valid = graph().constant(1.0, DType::Bool).broadcast_to(shape()).pad(axis, before, after);
  return where(valid, zero_padded, scalar_like(*this, value));
}

Tensor Tensor::unfold(int axis, Expr size, Expr step, Expr dilation) const {
  if (auto v = view_.unfold(axis, size, step, dilation)) return Tensor(graph_, id_, *v, dtype_);
  Tensor copy = unary(Op::Contiguous, dtype_);
  return Tensor(graph_, copy.id_, copy.view_.unfold(axis, size, step, dilation).value(), dtype_);
}

Tensor Tensor::flip(int axis) const {
  return Tensor(graph_, id_, view_.flip(axis), dtype_);
}

// --- data --------------------------------------------------------------------------

const Node& Tensor::settable_input(const char* what) const {
  const Node& n = graph().node(id_);
  LUM_CHECK(n.op == Op::Input) << what << ": node %" << id_.value << " is a " << op_name(n.op)
                               << ", not an input";
  LUM_CHECK(view_ == View::contiguous(n.shape))
      << what << ": input '" << n.name << "' is seen through a view " << view_.to_string()
      << "; set the original input tensor";
  return n;
}

Tensor& Tensor::set_buffer(Buffer data) {
  const Node& n = settable_input("set");
  LUM_CHECK(n.quant == kPlainStorage) << "set: input '" << n.name << "' is stored as "
                                      << ggml_type_name(n.quant) << " blocks; use set_quantized";
  if (data.dtype() != n.dtype) {
    Buffer converted(n.dtype, data.numel());
    for (size_t i = 0; i < data.numel(); ++i) {
      if (is_float(data.dtype())) {
        converted.set_f64(i, data.get_f64(i));
      } else {
        converted.set_i64(i, data.get_i64(i));
      }
    }
    data = std::move(converted);
  }
  graph().set_data(id_, std::move(data));
  return *this;
}

Tensor& Tensor::set_device(DeviceData data) {
  settable_input("set_device");
  graph().set_device_data(id_, std::move(data));
  return *this;
}

Tensor& Tensor::keep_on_device() {
  graph().keep_on_device(id_);
  return *this;
}

Tensor& Tensor::write_into(DeviceData dest) {
  // The run writes the node's elements in order: this tensor must read them so.
  LUM_CHECK(view_.is_contiguous() && view_.numel() == product(graph().node(id_).shape))
      << "write_into: the tensor is a view of another order or extent than its value's "
         "(a transpose, a slice); write contiguous() of it instead";
  graph().write_into(id_, std::move(dest));
  return *this;
}

const DeviceData* Tensor::device_data() const {
  return graph().device_data(id_);
}

Tensor& Tensor::set_quantized(uint32_t ggml_type, Buffer raw) {
  LUM_CHECK(view_ == View::contiguous(graph().node(id_).shape))
      << "set_quantized: the tensor is seen through a view; set the original input tensor";
  graph().set_quantized_data(id_, ggml_type, std::move(raw));
  return *this;
}

Tensor& Tensor::retrieve() {
  graph().mark_retrieve(id_);
  return *this;
}

Tensor& Tensor::keep() {
  graph().mark_keep(id_);
  return *this;
}

Buffer Tensor::data() const {
  const Node& n = graph().node(id_);
  if (const DeviceData* d = graph().device_data(id_))
    return read_view(d->to_host(), view_.resolve(graph().dims()));
  const Buffer* b = graph().data(id_);
  LUM_CHECK(b) << "data: node %" << id_.value << " (" << op_name(n.op)
               << ") has no value; mark it with retrieve() and execute() first";
  if (n.quant != kPlainStorage) return read_view(dequantized(n, *b), view_.resolve(graph().dims()));
  return read_view(*b, view_.resolve(graph().dims()));
}

}  // namespace luminal
