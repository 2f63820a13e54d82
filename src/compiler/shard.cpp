// The sharding pass (see luminal/shard.hpp): each node of the whole graph rebuilt for
// one rank, with where its value lies (whole, cut along a dim, a partial sum) worked out
// from its inputs', and collectives inserted where an op cannot take a value as it lies.
#include "luminal/shard.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "core/expr_probe.hpp"
#include "luminal/append_rows_op.hpp"
#include "luminal/error.hpp"

namespace luminal {
namespace {

using Kind = Placement::Kind;

class Sharder {
 public:
  Sharder(const Graph& whole, std::shared_ptr<Communicator> comm)
      : whole_(whole),
        comm_(std::move(comm)),
        ranks_(comm_->size()),
        g_(std::make_unique<Graph>()),
        local_(whole.num_nodes()),
        replicated_(whole.num_nodes()) {}

  // Where a node's value lies here: `id` holds it row-major over its local shape (the
  // whole shape, cut along a split axis), whatever `id`'s own factoring of that shape.
  using Local = ShardedGraph::Local;

  ShardedGraph run(const std::vector<std::pair<Tensor, Placement>>& inputs,
                   const std::vector<Tensor>& parts) {
    std::vector<std::optional<Placement>> given(whole_.num_nodes());
    for (const auto& [t, p] : inputs) {
      LUM_CHECK(&t.graph() == &whole_) << "shard: an annotated tensor is not of the graph";
      const Node& n = whole_.node(t.id());
      LUM_CHECK(n.op == Op::Input && t.view() == View::contiguous(n.shape))
          << "shard: '" << n.name << "' is not a whole input; only inputs are placed";
      LUM_CHECK(p.kind != Kind::Partial)
          << "shard: input '" << n.name << "' placed as a partial sum";
      given[t.id().value] = p;
    }
    copy_dims();
    for (uint32_t i = 0; i < whole_.num_nodes(); ++i) {
      const NodeId id{i};
      const Node& n = whole_.node(id);
      if (n.op == Op::Input)
        local_[i] = input(id, given[i].value_or(Placement::replicated()));
      else
        local_[i] = computed(n);
    }
    std::vector<bool> in_parts(whole_.num_nodes(), false);
    for (const Tensor& t : parts) {
      LUM_CHECK(&t.graph() == &whole_ && whole_.is_output(t.id()))
          << "shard: a tensor to keep in parts is not an output of the graph";
      in_parts[t.id().value] = true;
    }
    for (NodeId o : whole_.outputs()) {
      if (!(in_parts[o.value] && local_[o.value].placement.kind == Kind::Split)) {
        const NodeId whole_here = replicated(o);
        local_[o.value] = {whole_here, Placement::replicated()};
      }
      g_->mark_retrieve(local_[o.value].id);
      if (whole_.is_kept_on_device(o)) g_->keep_on_device(local_[o.value].id);
    }
    return ShardedGraph(std::move(g_), std::move(local_), collectives_);
  }

 private:
  const Graph& whole_;
  std::shared_ptr<Communicator> comm_;
  const int ranks_;
  std::unique_ptr<Graph> g_;
  std::vector<Local> local_;
  std::vector<std::optional<NodeId>> replicated_;  // a split or partial value made whole
  size_t collectives_ = 0;

  std::vector<Expr> local_shape(std::vector<Expr> shape, Placement p) const {
    if (p.kind == Kind::Split)
      shape[static_cast<size_t>(p.axis)] = shape[static_cast<size_t>(p.axis)] / ranks_;
    return shape;
  }

  // The whole graph's bound dims, bound here too.
  void copy_dims() {
    std::set<std::string> names;
    for (uint32_t i = 0; i < whole_.num_nodes(); ++i)
      for (Expr d : whole_.node(NodeId{i}).shape)
        for (const std::string& v : d.variables()) names.insert(v);
    for (const std::string& name : names)
      if (std::optional<int64_t> v = whole_.dims().get(name)) g_->set_dim(name, *v);
  }

  Local input(NodeId id, Placement p) {
    const Node& n = whole_.node(id);
    if (p.kind == Kind::Split) {
      const size_t a = normalize_axis(p.axis, n.shape.size(), "shard");
      p.axis = static_cast<int>(a);
      const std::optional<int64_t> size = n.shape[a].as_const();
      LUM_CHECK(size && *size % ranks_ == 0)
          << "shard: input '" << n.name << "' is split along dim " << a << " of size " << n.shape[a]
          << ", which does not divide into " << ranks_ << " ranks";
      LUM_CHECK(n.quant == kPlainStorage)
          << "shard: input '" << n.name
          << "' is stored in a block format; cut it when loading (nn::shard_source)";
      LUM_CHECK(!whole_.device_data(id))
          << "shard: input '" << n.name << "' is on a GPU; set its data after sharding";
    }
    Node copy;
    copy.op = Op::Input;
    copy.dtype = n.dtype;
    copy.name = n.name;
    copy.shape = local_shape(n.shape, p);
    const NodeId here = g_->add_node(std::move(copy));
    if (whole_.is_donated(id)) g_->donate(here);
    if (n.quant != kPlainStorage) g_->set_storage(here, n.quant);
    if (const Buffer* data = whole_.data(id)) {
      if (p.kind == Kind::Split) {
        std::vector<int64_t> shape;
        for (Expr d : n.shape) shape.push_back(d.eval(whole_.dims()));
        g_->set_data(here, take_part(*data, shape, p.axis, comm_->rank(), ranks_));
      } else if (n.quant != kPlainStorage) {
        g_->set_quantized_data(here, n.quant, *data);
      } else {
        g_->set_data(here, *data);
      }
    } else if (const DeviceData* d = whole_.device_data(id)) {
      g_->set_device_data(here, *d);
    }
    return {here, p};
  }

  // Node `i`'s value whole here, made once (an all-reduce of a partial sum, an all-gather
  // of a split value).
  NodeId replicated(NodeId i) {
    const Local& l = local_[i.value];
    if (l.placement.kind == Kind::Replicated) return l.id;
    if (replicated_[i.value]) return *replicated_[i.value];
    const std::vector<Expr> shape = local_shape(whole_.node(i).shape, l.placement);
    Tensor t = g_->tensor_of(l.id).reshape(shape);
    if (l.placement.kind == Kind::Partial) {
      t = all_reduce(t, comm_);
    } else {
      // [ranks, part...]: the ranks' dim moved in front of the split one, then merged
      // with it (a copy, unless the split dim is the first).
      t = all_gather(t, comm_);
      std::vector<int> order;
      for (int d = 1; d <= l.placement.axis; ++d) order.push_back(d);
      order.push_back(0);
      for (int d = l.placement.axis + 1; d <= static_cast<int>(shape.size()); ++d)
        order.push_back(d);
      t = t.permute(order).contiguous();
    }
    ++collectives_;
    replicated_[i.value] = t.id();
    return t.id();
  }

  // How consumer view `v` of node `src`'s whole value reads it here: the view over the
  // local value, and where what it reads lies in the view's own dims. nullopt where the
  // view does not read whole parts of a split value (it must be made whole first).
  std::optional<std::pair<View, Placement>> read(NodeId src, const View& v) const {
    const Local& l = local_[src.value];
    if (l.placement.kind != Kind::Split) return std::pair{v, l.placement};
    // The split dim is one digit of the value's row-major offsets: place value `unit`,
    // radix `size`. The view reads it through the dim whose stride times extent reaches
    // the digit's top, and which the ranks' parts divide.
    const std::vector<Expr>& shape = whole_.node(src).shape;
    const size_t a = static_cast<size_t>(l.placement.axis);
    Expr unit = 1;
    for (size_t d = a + 1; d < shape.size(); ++d) unit = unit * shape[d];
    const Expr top = unit * shape[a], part_top = unit * (shape[a] / ranks_);
    std::vector<Expr> exprs = {top, v.offset()};
    for (size_t d = 0; d < v.rank(); ++d) {
      exprs.push_back(v.shape()[d]);
      exprs.push_back(v.strides()[d]);
    }
    const ExprProbe probe(exprs, "shard");
    std::optional<size_t> carrier;
    for (size_t d = 0; d < v.rank() && !carrier; ++d) {
      const Expr s = v.strides()[d], n = v.shape()[d];
      if (probe.compare(s, 0) > 0 && probe.compare(s * n, top) == 0 && !v.is_masked(d) &&
          probe.divides(s, part_top) && n.as_const() && *n.as_const() % ranks_ == 0)
        carrier = d;
    }
    if (!carrier) return std::nullopt;
    const Expr carrier_stride = v.strides()[*carrier];
    std::vector<Expr> dims = v.shape(), strides = v.strides(), lo, hi;
    for (size_t d = 0; d < v.rank(); ++d) {
      lo.push_back(v.mask_lo(d));
      hi.push_back(v.mask_hi(d));
      if (d == *carrier) {
        dims[d] = dims[d] / ranks_;
        hi[d] = dims[d];
        continue;
      }
      const Expr s = strides[d];
      if (probe.compare(s, 0) == 0 || probe.compare(s, carrier_stride) < 0) continue;  // inner
      if (!probe.divides(top, s)) return std::nullopt;  // reads across the split digit
      strides[d] = s / ranks_;                          // outer: the part is 1/ranks of it
    }
    // An offset into the split digit reads a shifted window of it: not a part. (A padded
    // inner dim starts at a negative offset, inside the inner digits.)
    const Expr offset = v.offset();
    const bool inner =
        probe.compare(offset, 0) < 0 && probe.compare(offset + carrier_stride, 0) > 0;
    const Expr within = inner ? offset : offset % top;
    if (probe.compare(within, carrier_stride) >= 0) return std::nullopt;
    const Expr local_offset = (offset - within) / ranks_ + within;
    return std::pair{View::from_parts(dims, strides, local_offset, lo, hi),
                     Placement::split(static_cast<int>(*carrier))};
  }

  // Edge `e` read here: through its view mapped onto the local value, or whole (also
  // where the whole value was made already: what follows from it needs no exchange).
  std::pair<Edge, Placement> edge(const Edge& e, bool whole_only) {
    if (!whole_only && !replicated_[e.source.value])
      if (std::optional<std::pair<View, Placement>> r = read(e.source, e.view))
        return {Edge{local_[e.source.value].id, r->first}, r->second};
    return {Edge{replicated(e.source), e.view}, Placement::replicated()};
  }

  Local computed(const Node& n) {
    const OpCategory category = traits(n.op).category;
    std::vector<Edge> edges;
    std::vector<Placement> at;
    const auto read_all = [&](bool whole_only) {
      edges.clear(), at.clear();
      for (const Edge& e : n.inputs) {
        auto [edge_here, p] = edge(e, whole_only);
        edges.push_back(edge_here);
        at.push_back(p);
      }
    };
    Placement out = Placement::replicated();
    switch (category) {
      case OpCategory::Source:  // constants and iotas are the same everywhere
        break;
      case OpCategory::Unary:
        read_all(false);
        // A partial sum through anything but a copy is not a partial sum of the results.
        if (at[0].kind == Kind::Partial && n.op != Op::Contiguous) read_all(true);
        out = at[0];
        break;
      case OpCategory::Binary:
      case OpCategory::Ternary:
        read_all(false);
        out = elementwise(n.op, edges, at, n);
        break;
      case OpCategory::Reduce: {
        read_all(false);
        const int axis = n.axis;
        if (at[0].kind == Kind::Split && at[0].axis == axis) {
          if (n.op == Op::MaxReduce) return max_of_parts(n, edges[0]);
          out = Placement::partial();  // each rank sums its part
        } else if (at[0].kind == Kind::Split) {
          out = Placement::split(at[0].axis - (at[0].axis > axis ? 1 : 0));
        } else if (at[0].kind == Kind::Partial && n.op != Op::SumReduce) {
          read_all(true);
        } else {
          out = at[0];
        }
        break;
      }
      case OpCategory::Indexing:
      case OpCategory::Custom:
        LUM_CHECK(n.op != Op::Custom || !dynamic_cast<const CollectiveOp*>(n.custom.get()))
            << "shard: the graph already exchanges values between ranks (" << n.custom->name()
            << ")";
        // Rows appended to a cache (both split along the same dim, not the rows'): each
        // rank appends its part of them to its part of the cache.
        if (n.op == Op::Custom && dynamic_cast<const AppendRowsOp*>(n.custom.get())) {
          read_all(false);
          if (at[0].kind == Kind::Split && at[0] == at[1] && at[0].axis != 0) {
            out = at[0];
            break;
          }
        }
        read_all(true);
        break;
    }
    Node copy = n;
    copy.inputs = edges;
    copy.shape = local_shape(n.shape, out);
    return {g_->add_node(std::move(copy)), out};
  }

  // A max over the split dim: each rank's max of its part, gathered (the reduced shape,
  // not the value) and reduced over the ranks. A softmax or an argmax over a vocabulary
  // split by ranks so exchanges a value a row, not the row.
  Local max_of_parts(const Node& n, const Edge& part) {
    Node mine = n;
    mine.inputs = {part};
    const NodeId local_max = g_->add_node(std::move(mine));
    const Tensor whole = all_gather(g_->tensor_of(local_max), comm_).max_reduce(0);
    ++collectives_;
    return {whole.id(), Placement::replicated()};
  }

  // Where an elementwise op's value lies, its operands made to agree: partial sums stay
  // partial through a sum of partial sums and a product with whole values (both linear),
  // and are made whole elsewhere; parts split along different dims, all but the first
  // made whole; whole operands next to parts read just this rank's part of them.
  Placement elementwise(Op op, std::vector<Edge>& edges, std::vector<Placement>& at,
                        const Node& n) {
    const auto count = [&](Kind k) {
      return std::count_if(at.begin(), at.end(), [&](Placement p) { return p.kind == k; });
    };
    const auto make_whole = [&](size_t i) {
      edges[i] = edge(n.inputs[i], true).first;
      at[i] = Placement::replicated();
    };
    const size_t partials = static_cast<size_t>(count(Kind::Partial));
    if (partials > 0) {
      const bool linear = (op == Op::Add && partials == at.size()) ||
                          (op == Op::Mul && partials == 1 && count(Kind::Split) == 0);
      if (linear) return Placement::partial();
      for (size_t i = 0; i < at.size(); ++i)
        if (at[i].kind == Kind::Partial) make_whole(i);
    }
    std::optional<int> axis;
    for (size_t i = 0; i < at.size(); ++i) {
      if (at[i].kind != Kind::Split) continue;
      if (!axis) axis = at[i].axis;
      if (at[i].axis != *axis) make_whole(i);
    }
    if (!axis) return Placement::replicated();
    const Expr size = n.shape[static_cast<size_t>(*axis)] / ranks_;
    for (size_t i = 0; i < at.size(); ++i)
      if (at[i].kind == Kind::Replicated)
        edges[i].view =
            edges[i].view.slice(*axis, size * comm_->rank(), size * (comm_->rank() + 1));
    return Placement::split(*axis);
  }
};

}  // namespace

const ShardedGraph::Local& ShardedGraph::local(const Tensor& whole) const {
  LUM_CHECK(whole.id().value < local_.size() && local_[whole.id().value].id.valid())
      << "ShardedGraph: not a node of the graph that was sharded";
  return local_[whole.id().value];
}

Tensor ShardedGraph::tensor(const Tensor& whole) const {
  const Local& l = local(whole);
  const Tensor t = graph_->tensor_of(l.id);
  // A cut value as its node has it (an input's part); a whole one in the whole shape.
  if (l.placement.kind == Placement::Kind::Split) return t;
  return Tensor(graph_.get(), l.id, *t.view().reshape(whole.shape()), whole.dtype());
}

Placement ShardedGraph::placement(const Tensor& whole) const {
  return local(whole).placement;
}

ShardedGraph shard(const Graph& whole, const std::vector<std::pair<Tensor, Placement>>& inputs,
                   const std::shared_ptr<Communicator>& comm, const std::vector<Tensor>& parts) {
  LUM_CHECK(comm) << "shard: no communicator";
  return Sharder(whole, comm).run(inputs, parts);
}

}  // namespace luminal
