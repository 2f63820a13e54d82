// Values stored in the order their operands lie in memory (see storage_order.hpp).
//
// Every op may store its value in any order of its dims: its readers' views say where each
// element is. Chosen so, a convolutional network stays channels last from one product to
// the next: the BatchNorm/ReLU after a convolution reads the product's [pixels, channels]
// rows in order and stores NHWC, the next convolution's padded copy reads that in order.
#include "compiler/storage_order.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include "compiler/walks.hpp"

namespace luminal::compiler {
namespace {

bool is_one(const Expr& e) {
  return e == Expr(1);
}

// The order of the dims `dims` of view `v` (a subset, in the value's order) as they lie in
// memory, outermost first, where the innermost run of memory (the smallest stride of a dim
// longer than 1) is not along the last of them; nullopt otherwise, or where a stride is
// symbolic or negative or a dim longer than 1 is broadcast. Dims of size 1 go first.
std::optional<std::vector<int>> memory_order(const View& v, const std::vector<size_t>& dims) {
  std::vector<int> ones, long_dims;
  std::vector<int64_t> stride(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (is_one(v.shape()[dims[i]])) {
      ones.push_back(static_cast<int>(i));
      continue;
    }
    const std::optional<int64_t> s = v.strides()[dims[i]].as_const();
    if (!s || *s <= 0) return std::nullopt;
    stride[i] = *s;
    long_dims.push_back(static_cast<int>(i));
  }
  if (long_dims.size() < 2) return std::nullopt;
  const auto innermost = std::min_element(long_dims.begin(), long_dims.end(), [&](int a, int b) {
    return stride[static_cast<size_t>(a)] < stride[static_cast<size_t>(b)];
  });
  if (*innermost == long_dims.back()) return std::nullopt;
  std::stable_sort(long_dims.begin(), long_dims.end(), [&](int a, int b) {
    return stride[static_cast<size_t>(a)] > stride[static_cast<size_t>(b)];
  });
  ones.insert(ones.end(), long_dims.begin(), long_dims.end());
  return ones;
}

// Whether `v` reads each element at most once (its dims, in memory order, nest: each one's
// stride spans the valid extent of the next inner one): a copy through windows that overlap
// (a convolution's im2col columns) is left as the rules expect it.
bool reads_each_once(const View& v) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, valid extent)
  for (size_t d = 0; d < v.rank(); ++d) {
    if (is_one(v.shape()[d])) continue;
    const std::optional<int64_t> s = v.strides()[d].as_const();
    std::optional<int64_t> extent = v.shape()[d].as_const();
    if (v.is_masked(d)) {
      const std::optional<int64_t> lo = v.mask_lo(d).as_const(), hi = v.mask_hi(d).as_const();
      extent = lo && hi ? std::optional<int64_t>(*hi - *lo) : std::nullopt;
    }
    if (!s || *s <= 0) return false;
    dims.emplace_back(*s, extent.value_or(-1));
  }
  std::sort(dims.begin(), dims.end(), std::greater<>());
  for (size_t i = 0; i + 1 < dims.size(); ++i)
    if (dims[i + 1].second < 0 || dims[i].first < dims[i + 1].first * dims[i + 1].second)
      return false;
  return true;
}

class Reorder {
 public:
  explicit Reorder(const Graph& g) : readers_(g.num_nodes()), kept_(g.num_nodes()) {
    nodes_.reserve(g.num_nodes());
    for (uint32_t i = 0; i < g.num_nodes(); ++i) nodes_.push_back(g.node(NodeId{i}));
    // An output is stored in its own order, so the elementwise ops it reads are best left
    // in it too (a ReLU returned after a convolution: the product, stored transposed,
    // serves both its ops), and so on back along the chain of them.
    for (NodeId o : g.outputs()) kept_[o.value] = true;
    for (uint32_t i = g.num_nodes(); i-- > 0;)
      if (kept_[i] && is_elementwise(nodes_[i].op))
        for (const Edge& e : nodes_[i].inputs) kept_[e.source.value] = true;
    for (uint32_t i = 0; i < g.num_nodes(); ++i) {
      const Node& n = nodes_[i];
      const bool opaque = n.op == Op::Custom || traits(n.op).category == OpCategory::Indexing;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const uint32_t source = n.inputs[k].source.value;
        readers_[source].emplace_back(i, k);
        // (A product is a SumReduce of a Mul, [batch..., M, K, N], which the rules
        // match as it is written.)
        if (opaque || (n.op == Op::SumReduce && nodes_[source].op == Op::Mul)) kept_[source] = true;
      }
    }
  }

  std::vector<Node> run() && {
    for (uint32_t i = 0; i < nodes_.size(); ++i)
      if (!kept_[i]) reorder(i);
    return std::move(nodes_);
  }

 private:
  // The order node i's value is better stored in (its dims, outermost first), if not its own.
  std::optional<std::vector<int>> better_order(const Node& n) const {
    const size_t r = n.shape.size();
    if (r < 2) return std::nullopt;
    const OpCategory c = traits(n.op).category;
    if (c == OpCategory::Reduce) {
      std::vector<size_t> dims;  // the input's dims the output keeps
      for (size_t d = 0; d <= r; ++d)
        if (d != static_cast<size_t>(n.axis)) dims.push_back(d);
      return memory_order(n.inputs[0].view, dims);
    }
    if (!is_elementwise(n.op)) return std::nullopt;
    if (n.op == Op::Contiguous && !reads_each_once(n.inputs[0].view)) return std::nullopt;
    // The operands read whole (no dim broadcast): the first in memory order decides, unless
    // another reads in order already.
    std::vector<size_t> all(r);
    std::iota(all.begin(), all.end(), size_t{0});
    std::optional<std::vector<int>> order;
    for (const Edge& e : n.inputs) {
      bool whole = true;
      for (size_t d = 0; d < r; ++d)
        whole = whole && (is_one(e.view.shape()[d]) || !(e.view.strides()[d] == Expr(0)));
      if (!whole) continue;
      std::optional<std::vector<int>> wanted = memory_order(e.view, all);
      if (!wanted) return std::nullopt;  // read in order (or not a plain stride) already
      if (!order) order = std::move(wanted);
    }
    return order;
  }

  void reorder(uint32_t i) {
    Node& n = nodes_[i];
    const std::optional<std::vector<int>> order = better_order(n);
    if (!order) return;
    const size_t r = n.shape.size();
    bool identity = true;
    for (size_t k = 0; k < r; ++k) identity = identity && (*order)[k] == static_cast<int>(k);
    if (identity) return;
    // Each reader's view over the value stored in the new order.
    std::vector<View> read;
    for (const auto& [reader, input] : readers_[i]) {
      const std::optional<View> v = over_order(nodes_[reader].inputs[input].view, n.shape, *order);
      if (!v) return;
      read.push_back(*v);
    }
    for (size_t k = 0; k < read.size(); ++k) {
      const auto& [reader, input] = readers_[i][k];
      nodes_[reader].inputs[input].view = std::move(read[k]);
    }
    std::vector<Expr> shape;
    for (int d : *order) shape.push_back(n.shape[static_cast<size_t>(d)]);
    n.shape = std::move(shape);
    if (traits(n.op).category == OpCategory::Reduce) {
      // The input's kept dims in the new order, the reduced one last.
      std::vector<int> axes;
      for (int d : *order) axes.push_back(d < n.axis ? d : d + 1);
      axes.push_back(n.axis);
      n.inputs[0].view = n.inputs[0].view.permute(axes);
      n.axis = static_cast<int>(r);
    } else {
      for (Edge& e : n.inputs) e.view = e.view.permute(*order);
    }
  }

  std::vector<Node> nodes_;
  std::vector<std::vector<std::pair<uint32_t, size_t>>> readers_;  // (reader, its input)
  // Left in its order: an output and its chain, a product's Mul, what a custom op reads.
  std::vector<bool> kept_;
};

}  // namespace

std::vector<Node> storage_ordered(const Graph& g) {
  return Reorder(g).run();
}

}  // namespace luminal::compiler
