// The reference interpreter: evaluates each HLIR node exactly, in graph order.
//
// Every input is first read through its edge's view into a row-major buffer
// (read_view); each op then works on flat arrays. Floating-point ops compute in double
// and round once to the output dtype; integer ops compute in int64 and wrap to the
// output width. An intermediate is freed right after its last consumer.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/reference.hpp"

namespace luminal {
namespace {

int64_t lowest_of(DType t) {
  switch (t) {
    case DType::I32:
      return std::numeric_limits<int32_t>::min();
    case DType::I8:
      return std::numeric_limits<int8_t>::min();
    case DType::U8:
      return 0;
    default:
      return std::numeric_limits<int64_t>::min();
  }
}

// Wrapping int64 arithmetic (signed overflow is undefined in C++).
int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

size_t count(const std::vector<Expr>& shape, const Bindings& dims) {
  int64_t n = 1;
  for (Expr d : shape) n *= d.eval(dims);
  return static_cast<size_t>(n);
}

std::string describe(const Node& n, NodeId id) {
  return "%" + std::to_string(id.value) + " (" + std::string(op_name(n.op)) + ")";
}

void copy_element(Buffer& dst, size_t i, const Buffer& src, size_t j) {
  const size_t size = dtype_size(src.dtype());
  std::memcpy(static_cast<std::byte*>(dst.data()) + i * size,
              static_cast<const std::byte*>(src.data()) + j * size, size);
}

double apply_float_unary(Op op, double x) {
  switch (op) {
    case Op::Log2:
      return std::log2(x);
    case Op::Exp2:
      return std::exp2(x);
    case Op::Sin:
      return std::sin(x);
    case Op::Sqrt:
      return std::sqrt(x);
    case Op::Recip:
      return 1.0 / x;
    default:
      LUM_ASSERT(false) << "not a float unary op: " << op_name(op);
  }
}

Buffer eval_unary(const Node& n, Buffer x) {
  if (n.op == Op::Contiguous) return x;
  Buffer out(n.dtype, x.numel());
  const bool float_in = is_float(x.dtype());
  for (size_t i = 0; i < x.numel(); ++i) {
    if (n.op == Op::Cast) {
      if (float_in) {
        out.set_f64(i, x.get_f64(i));
      } else {
        out.set_i64(i, x.get_i64(i));
      }
    } else {
      out.set_f64(i, apply_float_unary(n.op, x.get_f64(i)));
    }
  }
  return out;
}

Buffer eval_binary(const Node& n, NodeId id, const Buffer& a, const Buffer& b) {
  Buffer out(n.dtype, a.numel());
  if (is_float(a.dtype())) {
    for (size_t i = 0; i < a.numel(); ++i) {
      const double x = a.get_f64(i), y = b.get_f64(i);
      switch (n.op) {
        case Op::Add:
          out.set_f64(i, x + y);
          break;
        case Op::Mul:
          out.set_f64(i, x * y);
          break;
        case Op::Mod:
          out.set_f64(i, std::fmod(x, y));
          break;
        case Op::LessThan:
          out.set_i64(i, x < y);
          break;
        default:
          LUM_ASSERT(false) << "not a binary op";
      }
    }
    return out;
  }
  for (size_t i = 0; i < a.numel(); ++i) {
    const int64_t x = a.get_i64(i), y = b.get_i64(i);
    switch (n.op) {
      case Op::Add:
        out.set_i64(i, wrap_add(x, y));
        break;
      case Op::Mul:
        out.set_i64(i, wrap_mul(x, y));
        break;
      case Op::Mod:
        LUM_CHECK(y != 0) << "Mod " << describe(n, id) << ": integer division by zero at element "
                          << i;
        out.set_i64(i, y == -1 ? 0 : x % y);
        break;
      case Op::LessThan:
        out.set_i64(i, x < y);
        break;
      default:
        LUM_ASSERT(false) << "not a binary op";
    }
  }
  return out;
}

Buffer eval_where(const Buffer& cond, const Buffer& a, const Buffer& b) {
  Buffer out(a.dtype(), a.numel());
  for (size_t i = 0; i < a.numel(); ++i) copy_element(out, i, cond.get_i64(i) ? a : b, i);
  return out;
}

Buffer eval_reduce(const Node& n, const Buffer& x, const std::vector<int64_t>& in_shape) {
  const auto axis = static_cast<size_t>(n.axis);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= in_shape[d];
  for (size_t d = axis + 1; d < in_shape.size(); ++d) inner *= in_shape[d];
  const int64_t len = in_shape[axis];
  Buffer out(n.dtype, static_cast<size_t>(outer * inner));
  const bool floats = is_float(x.dtype());
  const bool is_sum = n.op == Op::SumReduce;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      const auto dst = static_cast<size_t>(o * inner + in);
      double facc = is_sum ? 0.0 : -std::numeric_limits<double>::infinity();
      int64_t iacc = is_sum ? 0 : lowest_of(x.dtype());
      for (int64_t k = 0; k < len; ++k) {
        const auto src = static_cast<size_t>((o * len + k) * inner + in);
        if (floats) {
          const double v = x.get_f64(src);
          if (is_sum) {
            facc += v;
          } else if (std::isnan(v) || v > facc) {
            facc = std::isnan(facc) ? facc : v;  // NaN propagates, as in PyTorch
          }
        } else {
          const int64_t v = x.get_i64(src);
          iacc = is_sum ? wrap_add(iacc, v) : std::max(iacc, v);
        }
      }
      if (floats) {
        out.set_f64(dst, facc);
      } else {
        out.set_i64(dst, iacc);
      }
    }
  }
  return out;
}

size_t checked_index(const Node& n, NodeId id, const Buffer& indices, size_t j, size_t limit) {
  const int64_t k = indices.get_i64(j);
  LUM_CHECK(k >= 0 && static_cast<uint64_t>(k) < limit)
      << op_name(n.op) << " " << describe(n, id) << ": index " << k << " at position " << j
      << " is out of range for " << limit << " elements";
  return static_cast<size_t>(k);
}

Buffer eval_indexing(const Node& n, NodeId id, std::vector<Buffer>& in) {
  if (n.op == Op::Gather) {
    const Buffer& data = in[0];
    const Buffer& idx = in[1];
    Buffer out(n.dtype, idx.numel());
    for (size_t j = 0; j < idx.numel(); ++j)
      copy_element(out, j, data, checked_index(n, id, idx, j, data.numel()));
    return out;
  }
  Buffer out = std::move(in[0]);
  const Buffer& idx = in[1];
  const Buffer& src = in[2];
  for (size_t j = 0; j < idx.numel(); ++j)
    copy_element(out, checked_index(n, id, idx, j, out.numel()), src, j);
  return out;
}

Buffer evaluate(const Node& n, NodeId id, std::vector<Buffer>& in,
                const std::vector<int64_t>& in_shape, const Bindings& dims) {
  switch (traits(n.op).category) {
    case OpCategory::Source:
      return source_values(n, dims);
    case OpCategory::Unary:
      return eval_unary(n, std::move(in[0]));
    case OpCategory::Binary:
      return eval_binary(n, id, in[0], in[1]);
    case OpCategory::Ternary:
      return eval_where(in[0], in[1], in[2]);
    case OpCategory::Reduce:
      return eval_reduce(n, in[0], in_shape);
    case OpCategory::Indexing:
      return eval_indexing(n, id, in);
    case OpCategory::Custom: {
      std::vector<std::vector<int64_t>> shapes;
      for (const Edge& e : n.inputs) shapes.push_back(e.view.resolve(dims).dims);
      std::vector<int64_t> out_shape;
      for (Expr d : n.shape) out_shape.push_back(d.eval(dims));
      return n.custom->run(in, shapes, out_shape, n.dtype);
    }
  }
  LUM_ASSERT(false) << "unknown op category";
}

// Every node `wanted` depends on, in graph order; each intermediate freed after its last
// reader, the wanted ones kept. `input` gives an Input node's data as set (checked).
std::vector<std::optional<Buffer>> evaluate_graph(const Graph& g, const std::vector<NodeId>& wanted,
                                                  const Bindings& dims,
                                                  const std::function<const Buffer&(NodeId)>& input,
                                                  RunStats& stats) {
  const size_t count_nodes = g.num_nodes();
  // Only what the wanted nodes depend on runs; last_use drives freeing.
  std::vector<bool> needed(count_nodes, false), kept(count_nodes, false);
  std::vector<size_t> last_use(count_nodes, 0);
  for (NodeId o : wanted) needed[o.value] = kept[o.value] = true;
  for (size_t i = count_nodes; i-- > 0;) {
    if (!needed[i]) continue;
    for (const Edge& e : g.node(NodeId{static_cast<uint32_t>(i)}).inputs) {
      needed[e.source.value] = true;
      last_use[e.source.value] = std::max(last_use[e.source.value], i);
    }
  }
  std::vector<std::optional<Buffer>> values(count_nodes);
  std::vector<const Buffer*> inputs(count_nodes, nullptr);  // plain inputs, where set
  auto value_of = [&](NodeId id) -> const Buffer& {
    if (values[id.value]) return *values[id.value];
    LUM_ASSERT(inputs[id.value]) << "value of %" << id.value << " missing";
    return *inputs[id.value];
  };
  size_t live = 0;
  for (size_t i = 0; i < count_nodes; ++i) {
    if (!needed[i]) continue;
    const NodeId id{static_cast<uint32_t>(i)};
    const Node& n = g.node(id);
    if (n.op == Op::Input) {
      inputs[i] = &input(id);
      // Block-stored inputs are read as their decoded values.
      if (n.quant != kPlainStorage) {
        values[i] = dequantized(n, *inputs[i]);
        live += values[i]->bytes();
      }
      continue;
    }
    std::vector<Buffer> in;
    std::vector<int64_t> in_shape;
    for (const Edge& e : n.inputs) {
      const ConcreteView v = e.view.resolve(dims);
      try {
        in.push_back(read_view(value_of(e.source), v));
      } catch (const Error& err) {
        LUM_FAIL() << describe(n, id) << " reading %" << e.source.value << ": " << err.what();
      }
      if (in_shape.empty()) in_shape = v.dims;
    }
    values[i] = evaluate(n, id, in, in_shape, dims);
    live += values[i]->bytes();
    stats.peak_bytes = std::max(stats.peak_bytes, live);
    ++stats.nodes_run;
    for (const Edge& e : n.inputs) {
      auto& v = values[e.source.value];
      if (last_use[e.source.value] == i && !kept[e.source.value] && v) {
        live -= v->bytes();
        v.reset();
      }
    }
  }
  return values;
}

class ReferenceExecutable final : public Executable {
 public:
  void run(Graph& g) override {
    stats_ = RunStats{};
    const std::vector<NodeId> outputs = g.outputs();
    std::vector<std::optional<Buffer>> values = evaluate_graph(
        g, outputs, g.dims(),
        [&](NodeId id) -> const Buffer& {
          const Buffer* data = g.data(id);
          check_input_data(g.node(id), id, data, g.dims(), g.device_data(id));
          LUM_ASSERT(data) << "value of %" << id.value << " missing";
          return *data;
        },
        stats_);
    for (NodeId o : outputs)
      if (values[o.value]) g.set_data(o, std::move(*values[o.value]));
  }

  RunStats last_run() const override { return stats_; }

 private:
  RunStats stats_;
};

}  // namespace

Buffer source_values(const Node& n, const Bindings& dims) {
  if (n.op == Op::Constant) {
    Buffer out(n.dtype, 1);
    if (n.value.is_int) {
      out.set_i64(0, n.value.i);
    } else {
      out.set_f64(0, n.value.f);
    }
    return out;
  }
  LUM_ASSERT(n.op == Op::Iota) << "source_values on " << op_name(n.op);
  Buffer out(n.dtype, count(n.shape, dims));
  Bindings b = dims;
  for (size_t z = 0; z < out.numel(); ++z) {
    b.set("z", static_cast<int64_t>(z));
    out.set_i64(z, n.iota.eval(b));
  }
  return out;
}

std::vector<Buffer> reference_values(const Graph& g, const std::vector<NodeId>& nodes,
                                     const Bindings& dims,
                                     const std::function<const Buffer&(NodeId)>& input) {
  RunStats stats;
  std::vector<std::optional<Buffer>> values = evaluate_graph(g, nodes, dims, input, stats);
  // A node listed more than once is copied for all but its last place, moved there.
  std::vector<size_t> last(g.num_nodes(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) last[nodes[i].value] = i;
  std::vector<Buffer> out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::optional<Buffer>& v = values[nodes[i].value];
    out.push_back(!v ? input(nodes[i]) : last[nodes[i].value] == i ? std::move(*v) : *v);
  }
  return out;
}

std::unique_ptr<Executable> ReferenceBackend::compile(const Graph&) const {
  return std::make_unique<ReferenceExecutable>();
}

}  // namespace luminal
