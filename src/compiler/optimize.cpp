// HLIR -> e-graph -> saturate -> extract -> HLIR.
#include "luminal/compiler/optimize.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numbers>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>

#include "compiler/index_folding.hpp"
#include "compiler/storage_order.hpp"
#include "luminal/collective.hpp"
#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/matmul_op.hpp"
#include "luminal/egraph/extract.hpp"
#include "luminal/egraph/rules.hpp"
#include "luminal/error.hpp"
#include "luminal/quant.hpp"
#include "luminal/tensor.hpp"

namespace luminal::compiler {
namespace {

using eg::Attr;
using eg::AttrList;
using eg::ClassId;
using eg::Symbol;

Symbol sym(Op op) {
  return Symbol::of(op_name(op));
}

// Whether views `a` and `b` read the same elements in the same order: unmasked, one
// shape, offset and strides (but along dims of size 1, where strides do not matter).
bool same_reads(const View& a, const View& b) {
  if (a.has_mask() || b.has_mask() || a.rank() != b.rank() || !(a.offset() == b.offset()))
    return false;
  for (size_t d = 0; d < a.rank(); ++d)
    if (!(a.shape()[d] == b.shape()[d]) ||
        (!(a.shape()[d] == Expr(1)) && !(a.strides()[d] == b.strides()[d])))
      return false;
  return true;
}

class Lowering {
 public:
  // `relaid`: g's nodes as storage_ordered and folded_index_values give them.
  Lowering(const Graph& g, std::vector<Node> relaid)
      : g_(g), relaid_(std::move(relaid)), cls_(g.num_nodes()) {}

  eg::EGraph egraph;
  std::vector<View> views;
  std::vector<std::vector<Expr>> shapes;
  std::unordered_map<uint32_t, DType> dtype_of;         // class id -> dtype (lowered classes)
  std::unordered_map<uint32_t, const Node*> quantized;  // class id -> block-stored input
  std::vector<std::shared_ptr<Communicator>> groups;    // an AllReduce's $group: an index here

  ClassId lower(NodeId id) {
    if (cls_[id.value].valid()) return cls_[id.value];
    const Node& n = node(id.value);
    std::vector<Attr> attrs;
    switch (n.op) {
      case Op::Input:
        attrs = {Attr::of_int(id.value), Attr::of_str(n.name), Attr::of_dtype(n.dtype),
                 Attr::of_int(shape_id(n.shape)), Attr::of_int(n.quant)};
        break;
      case Op::Constant:
        attrs = {n.value.is_int ? Attr::of_int(n.value.i) : Attr::of_float(n.value.f),
                 Attr::of_dtype(n.dtype)};
        break;
      case Op::Iota:
        attrs = {Attr::of_expr(n.iota), Attr::of_dtype(n.dtype), Attr::of_int(shape_id(n.shape))};
        break;
      case Op::Cast:
        attrs = {Attr::of_dtype(n.dtype)};
        break;
      case Op::SumReduce:
      case Op::MaxReduce:
        attrs = {Attr::of_int(n.axis)};
        break;
      case Op::Custom:
        if (const auto* reduce = dynamic_cast<const AllReduceOp*>(n.custom.get())) {
          attrs = {Attr::of_int(group_id(reduce->communicator_ptr()))};
          break;  // (AllReduce $group ?x), which rules may move
        }
        attrs = {Attr::of_int(id.value)};
        break;  // kept as is
      default:
        break;
    }
    std::vector<ClassId> children;
    for (const Edge& e : n.inputs) {
      ClassId c = lower(e.source);
      // (A view that differs from the source's layout only in the strides of dims of
      // size 1, which is_contiguous does not look at, reads it as it lies: rules then see
      // the source itself.)
      if (!e.view.is_contiguous() || e.view.shape() != node(e.source.value).shape)
        c = view_node(egraph, e.view, c);
      children.push_back(c);
    }
    const bool reduce = n.op == Op::Custom && dynamic_cast<const AllReduceOp*>(n.custom.get());
    const ClassId c =
        egraph.add(reduce ? Symbol::of("AllReduce") : sym(n.op), AttrList::of(attrs), children);
    cls_[id.value] = c;
    dtype_of[c.v] = n.dtype;
    if (n.op == Op::Input && n.quant != kPlainStorage) quantized[c.v] = &n;
    return c;
  }

  ClassId class_of(NodeId id) const { return cls_[id.value]; }

  // Rule predicate arguments: a $view attribute's View; a ?class's dtype (nullopt for a
  // class the rules made) and its block-stored input (nullptr if it is none).
  const View& view(const eg::Value& v) const { return views[static_cast<size_t>(v.a.bits)]; }
  std::optional<DType> dtype(const eg::EGraph& e, ClassId c) const {
    auto it = dtype_of.find(e.find(c).v);
    return it == dtype_of.end() ? std::nullopt : std::optional{it->second};
  }
  std::optional<DType> dtype(const eg::EGraph& e, const eg::Value& v) const {
    return dtype(e, v.c);
  }
  const Node* quantized_input(const eg::EGraph& e, ClassId c) const {
    auto it = quantized.find(e.find(c).v);
    return it == quantized.end() ? nullptr : it->second;
  }
  const Node* quantized_input(const eg::EGraph& e, const eg::Value& v) const {
    return quantized_input(e, v.c);
  }
  // The class a class's value is read from: a View node's source, else the class itself.
  // (Views were lowered as classes of their own, with no dtype.)
  ClassId read_source(const eg::EGraph& e, ClassId c) const {
    for (uint32_t n : e.node_ids(e.find(c)))
      if (e.node_op(n).name() == "View") return e.find(e.node_children(n)[0]);
    return e.find(c);
  }
  // The view a class reads its source through: its View node's, nullptr where it has
  // none (the source read as it lies).
  const View* read_view(const eg::EGraph& e, ClassId c) const {
    for (uint32_t n : e.node_ids(e.find(c)))
      if (e.node_op(n).name() == "View")
        return &views[static_cast<size_t>(e.node_attrs(n).get()[0].bits)];
    return nullptr;
  }
  // How many of the user graph's edges (and outputs) read a value of class `c`.
  int readers(const eg::EGraph& e, ClassId c) const {
    return reads(e, c, [](const Edge*) { return true; });
  }
  // Whether every edge that reads class `c` reads it through view `v` (and no output is
  // it): as one reader would.
  bool read_only_through(const eg::EGraph& e, ClassId c, const View& v) const {
    return reads(e, c, [&](const Edge* in) { return !in || !(in->view == v); }) == 0;
  }
  // How many of the user graph's reads of class `c` `counted` takes: its edges, and its
  // outputs (as nullptr).
  template <class Counted>
  int reads(const eg::EGraph& e, ClassId c, Counted counted) const {
    c = e.find(c);
    auto is_c = [&](NodeId n) { return cls_[n.value].valid() && e.find(cls_[n.value]) == c; };
    int count = 0;
    for (uint32_t i = 0; i < g_.num_nodes(); ++i)
      if (cls_[i].valid())
        for (const Edge& in : node(i).inputs) count += is_c(in.source) && counted(&in);
    for (NodeId o : g_.outputs()) count += is_c(o) && counted(nullptr);
    return count;
  }
  // The class of (View $v x) in `e`, added where it is new.
  ClassId view_node(eg::EGraph& e, const View& v, ClassId x) {
    return e.add(Symbol::of("View"), AttrList::of({Attr::of_int(view_id(v))}),
                 std::vector<ClassId>{e.find(x)});
  }
  // The class of an Iota of `expr` over `shape`, added where it is new.
  ClassId iota_node(eg::EGraph& e, Expr expr, DType t, const std::vector<Expr>& shape) {
    const ClassId c = e.add(
        Symbol::of("Iota"),
        AttrList::of({Attr::of_expr(expr), Attr::of_dtype(t), Attr::of_int(shape_id(shape))}), {});
    dtype_of[e.find(c).v] = t;
    return c;
  }
  // A $view attribute's value for `v` (views are numbered as they are first seen).
  int64_t view_id(const View& v) {
    const std::string key = v.to_string();
    auto [it, fresh] = view_ids_.emplace(key, static_cast<int64_t>(views.size()));
    if (fresh) views.push_back(v);
    return it->second;
  }

 private:
  int64_t group_id(const std::shared_ptr<Communicator>& comm) {
    const auto it = std::find(groups.begin(), groups.end(), comm);
    if (it != groups.end()) return it - groups.begin();
    groups.push_back(comm);
    return static_cast<int64_t>(groups.size() - 1);
  }
  int64_t shape_id(const std::vector<Expr>& s) {
    const std::string key = to_string(s);
    auto [it, fresh] = shape_ids_.emplace(key, static_cast<int64_t>(shapes.size()));
    if (fresh) shapes.push_back(s);
    return it->second;
  }

  const Node& node(uint32_t i) const { return relaid_.empty() ? g_.node(NodeId{i}) : relaid_[i]; }

  const Graph& g_;
  std::vector<Node> relaid_;
  std::vector<ClassId> cls_;
  std::map<std::string, int64_t> view_ids_, shape_ids_;
};

bool is_all_reduce(const eg::EGraph& g, ClassId c) {
  for (uint32_t n : g.node_ids(g.find(c)))
    if (g.node_op(n).name() == "AllReduce") return true;
  return false;
}

// Cheapest wins: a MatMul beats the multiply-and-reduce it replaces; views are free.
double kernel_cost(const eg::EGraph& g, uint32_t node) {
  const std::string_view op = g.node_op(node).name();
  // Two all-reduced values added: the second collective is this Add's to pay, since the
  // most expensive path (how costs combine) passes through one of them only.
  if (op == "Add") {
    const auto c = g.node_children(node);
    if (is_all_reduce(g, c[0]) && is_all_reduce(g, c[1])) return 101;
  }
  if (op == "View") return 0.001;
  if (op == "Input" || op == "Constant" || op == "Iota") return 0.01;
  if (op == "MatMul" || op == "QMatMul" || op == "NormQMatMul" || op == "QMatMulAdd" ||
      op == "Attention")
    return 1;
  // Below a MatMulAdd over the im2col columns it would read (0.99 and the copy's 1 on the
  // path, against the Add's 1 and this): a copy of the columns costs more than the add
  // (where a BatchNorm reads the product in order, a per-channel shift is a bias row).
  // Stored transposed, below the form its reader would read across.
  if (op == "WindowMatMul") return g.node_attrs(node).get()[1].bits ? 0.97 : 0.98;
  // Attention's gradients replace products over materialised [M, T] scores that read
  // what they read: with the Stats they read, below the product, which the most
  // expensive path alone does not tell from them.
  if (op == "AttentionStats" || op == "AttentionGradQ" || op == "AttentionGradKV") return 0.4;
  // Below the Add it replaces even where the addend's path is the longest (an equal
  // cost would keep the first node found, the Add).
  if (op == "MatMulAdd") return 0.99;
  // Only steps towards Attention and its gradients, never kernels.
  if (op == "Softmax" || op == "GuardedMul" || op == "SoftmaxGrad" || op == "AttentionScoreGrad")
    return 1e9;
  if (op == "AllReduce") return 100;  // a wait on every rank: fewer of them first
  if (op == "SumReduce" || op == "MaxReduce") return 20;
  return 1;
}

const std::vector<eg::RuleSet>& rule_sets(const eg::Functions& fns) {
  static const std::vector<eg::RuleSet> sets = eg::load_embedded_rules("hlir", fns);
  return sets;
}

// The rule sets less the rules LUMINAL_DISABLE_RULES names (comma-separated): to see what
// a rewrite is worth, or to step around one.
std::vector<eg::RuleSet> without_disabled_rules(const std::vector<eg::RuleSet>& sets) {
  const char* env = std::getenv("LUMINAL_DISABLE_RULES");
  if (!env || !*env) return sets;
  std::set<std::string> off;
  std::stringstream list(env);
  for (std::string name; std::getline(list, name, ',');)
    if (!name.empty()) off.insert(name);
  std::vector<eg::RuleSet> out = sets;
  std::string known;
  for (eg::RuleSet& s : out) {
    for (const eg::Rule& r : s.rules) known += " " + r.name;
    std::erase_if(s.rules, [&](const eg::Rule& r) { return off.erase(r.name) > 0; });
  }
  LUM_CHECK(off.empty()) << "LUMINAL_DISABLE_RULES: no rule named '" << *off.begin()
                         << "'; the rules are:" << known;
  return out;
}

// Attention outputs stored in the order the one copy that reads them writes (an
// attention's [batch, heads, tokens, dv] rows copied to [batch, tokens, heads, dv] for
// the output projection): the kernel writes its rows there itself and the copy goes.
struct AttentionOrders {
  std::unordered_map<uint32_t, std::vector<int64_t>> order;  // Attention class -> out_order
  std::unordered_map<uint32_t, uint32_t> copy_of;            // copy's class -> Attention's
};

// The order in which an attention's output (its own dims `own`, row-major) must be stored
// for the copy through `v` to be the identity: v, its dims of 1 aside, reads every element
// once, row-major over its own shape, where its dims by stride (largest first) are runs
// of adjacent own dims merged (grouped queries' [key heads, group] read as one heads
// dim). The order: own dims of 1 first, then the runs in v's order. nullopt where v is no
// such permutation, its strides are not constant, or the value dim (own's last) would
// not stay last.
std::optional<std::vector<int64_t>> stored_order(const std::vector<Expr>& own, const View& v) {
  if (v.offset() != Expr(0) || v.has_mask()) return std::nullopt;
  std::vector<std::pair<int64_t, size_t>> by_stride;  // v's dims of more than 1
  for (size_t i = 0; i < v.rank(); ++i) {
    if (v.shape()[i] == Expr(1)) continue;
    const std::optional<int64_t> stride = v.strides()[i].as_const();
    if (!stride) return std::nullopt;
    by_stride.emplace_back(*stride, i);
  }
  std::sort(by_stride.begin(), by_stride.end(), std::greater<>());
  // Row-major in that order: each stride the product of the dims after it.
  Expr after = 1;
  for (size_t k = by_stride.size(); k-- > 0;) {
    if (Expr(by_stride[k].first) != after) return std::nullopt;
    after = after * v.shape()[by_stride[k].second];
  }
  // Each of those dims a run of own dims, in order.
  std::vector<std::vector<int64_t>> run_of(v.rank());
  std::vector<int64_t> out;  // the own dims of 1, then the runs
  size_t j = 0;
  for (const auto& [stride, i] : by_stride) {
    Expr merged = 1;
    while (merged != v.shape()[i] && j < own.size()) {
      if (own[j] == Expr(1))
        out.push_back(static_cast<int64_t>(j));
      else
        merged = merged * own[j], run_of[i].push_back(static_cast<int64_t>(j));
      ++j;
    }
    if (merged != v.shape()[i]) return std::nullopt;
  }
  for (; j < own.size(); ++j) {
    if (own[j] != Expr(1)) return std::nullopt;
    out.push_back(static_cast<int64_t>(j));
  }
  for (const std::vector<int64_t>& run : run_of) out.insert(out.end(), run.begin(), run.end());
  if (out.back() != static_cast<int64_t>(own.size() - 1) || std::is_sorted(out.begin(), out.end()))
    return std::nullopt;
  return out;
}

// The extracted program's Contiguous(View(Attention)) chains whose view permutes the
// attention's dims (adjacent ones possibly merged), its value dim staying last, where the
// copy is the view's one reader, the view the attention's, and the attention not an output.
AttentionOrders attention_orders(const eg::EGraph& e, const eg::Extraction& x, const Lowering& low,
                                 const std::vector<ClassId>& roots) {
  std::unordered_map<uint32_t, int> readers;
  for (const auto& [c, node] : x.choice)
    for (ClassId ch : e.node_children(node)) ++readers[e.find(ch).v];
  for (ClassId r : roots) ++readers[e.find(r).v];
  AttentionOrders out;
  for (const auto& [c, node] : x.choice) {
    if (e.node_op(node).name() != "Contiguous") continue;
    const ClassId view_class = e.find(e.node_children(node)[0]);
    const uint32_t view_node = x.node_for(view_class);
    if (e.node_op(view_node).name() != "View" || readers[view_class.v] != 1) continue;
    const ClassId attention = e.find(e.node_children(view_node)[0]);
    if (e.node_op(x.node_for(attention)).name() != "Attention" || readers[attention.v] != 1)
      continue;
    const View& v = low.views[static_cast<size_t>(e.node_attrs(view_node).get()[0].bits)];
    // The attention's own shape: its value operand's [batch..., M, T, Dv] view's without T.
    const uint32_t value_node = x.node_for(e.find(e.node_children(x.node_for(attention))[2]));
    if (e.node_op(value_node).name() != "View") continue;
    std::vector<Expr> own =
        low.views[static_cast<size_t>(e.node_attrs(value_node).get()[0].bits)].shape();
    own.erase(own.end() - 2);
    const std::optional<std::vector<int64_t>> own_order = stored_order(own, v);
    if (!own_order) continue;
    out.order[attention.v] = *own_order;
    out.copy_of[e.find(ClassId{c}).v] = attention.v;
  }
  return out;
}

class Rebuild {
 public:
  Rebuild(const Graph& src, const Lowering& low, const eg::EGraph& eg, const eg::Extraction& x,
          Optimized& out, AttentionOrders orders)
      : src_(src), low_(low), eg_(eg), x_(x), out_(out), orders_(std::move(orders)) {}

  NodeId value(ClassId c) {
    c = eg_.find(c);
    if (auto it = done_.find(c.v); it != done_.end()) return it->second;
    if (auto it = orders_.copy_of.find(c.v); it != orders_.copy_of.end())
      return done_[c.v] = value(ClassId{it->second});
    const uint32_t node = x_.node_for(c);
    const std::string op(eg_.node_op(node).name());
    const auto& attrs = eg_.node_attrs(node).get();
    const auto children = eg_.node_children(node);
    Graph& g = *out_.graph;
    NodeId id;
    if (op == "View") {
      // A view needed as a value of its own: materialise it.
      Node n;
      n.op = Op::Contiguous;
      n.inputs = {edge(c)};
      id = g.add_node(std::move(n));
    } else if (op == "Input") {
      const NodeId user{static_cast<uint32_t>(attrs[0].bits)};
      const Node& un = src_.node(user);
      id = g.named_tensor(un.name, un.shape, un.dtype).id();
      if (un.quant != kPlainStorage) g.set_storage(id, un.quant);
      out_.source_of.resize(id.value + 1);
      out_.source_of[id.value] = user;
    } else if (op == "MatMul" || op == "MatMulAdd" || op == "QMatMul" || op == "NormQMatMul" ||
               op == "QMatMulAdd" || op == "Attention") {
      Node n;
      n.op = Op::Custom;
      for (ClassId ch : children) n.inputs.push_back(edge(ch));
      // (The weights: QMatMul's and QMatMulAdd's input 1, NormQMatMul's input 2.)
      const auto format = [&](size_t i) { return g.node(n.inputs[i].source).quant; };
      // (An Attention stored in its one reader's order: attention_orders.)
      const auto order = orders_.order.find(c.v);
      const bool reordered = order != orders_.order.end();
      if (op == "MatMul")
        n.custom = std::make_shared<MatMulOp>();
      else if (op == "MatMulAdd")
        n.custom = std::make_shared<MatMulAddOp>();
      else if (op == "QMatMul")
        n.custom = std::make_shared<QMatMulOp>(format(1));
      else if (op == "NormQMatMul")
        n.custom = std::make_shared<NormQMatMulOp>(format(2), attrs[0].as_float());
      else if (op == "QMatMulAdd")
        n.custom = std::make_shared<QMatMulAddOp>(format(1));
      else {
        auto attention = std::make_shared<AttentionOp>(attrs[0].as_float());
        if (reordered) attention->out_order = order->second;
        n.custom = std::move(attention);
      }
      // A product has its left operand's type (the reduction it replaces had it), and
      // Attention its queries' (the scores' product's left operand); the products over
      // block-stored weights are f32.
      n.dtype = op == "MatMul" || op == "MatMulAdd" || op == "Attention"
                    ? g.node(n.inputs[0].source).dtype
                    : DType::F32;
      // [batch..., M, N]: the [batch..., M, K, N] product operand's shape without K (the
      // value operand's, without its T, for Attention).
      n.shape = n.inputs[op == "Attention" ? 2 : 0].view.shape();
      n.shape.erase(n.shape.end() - 2);
      if (reordered) {
        std::vector<Expr> stored;
        for (int64_t i : order->second) stored.push_back(n.shape[static_cast<size_t>(i)]);
        n.shape = std::move(stored);
      }
      id = g.add_node(std::move(n));
    } else if (op == "WindowMatMul") {
      Node n;
      n.op = Op::Custom;
      for (ClassId ch : children) n.inputs.push_back(edge(ch));
      const bool transposed = attrs[1].bits != 0;
      n.custom = std::make_shared<WindowMatMulOp>(static_cast<size_t>(attrs[0].bits), transposed);
      n.dtype = g.node(n.inputs[0].source).dtype;
      // [batch..., M, N] (transposed: [batch..., N, M]): the right operand's
      // [batch..., M, K, N] without K.
      n.shape = n.inputs[1].view.shape();
      n.shape.erase(n.shape.end() - 2);
      if (transposed) std::swap(n.shape[n.shape.size() - 2], n.shape.back());
      id = g.add_node(std::move(n));
    } else if (op == "AttentionStats" || op == "AttentionGradQ" || op == "AttentionGradKV") {
      Node n;
      n.op = Op::Custom;
      for (ClassId ch : children) n.inputs.push_back(edge(ch));
      const auto part = op == "AttentionStats"   ? AttentionGradPart::Stats
                        : op == "AttentionGradQ" ? AttentionGradPart::Queries
                                                 : AttentionGradPart::KeysValues;
      n.custom = std::make_shared<AttentionGradOp>(attrs[0].as_float(), part);
      // From q's [batch..., M, D, T] view: [batch..., M, 2], [batch..., M, D] or
      // [batch..., T, D + Dv].
      const std::vector<Expr>& q = n.inputs[0].view.shape();
      const size_t r = q.size();
      n.shape.assign(q.begin(), q.end() - 3);
      if (part == AttentionGradPart::KeysValues)
        n.shape.insert(n.shape.end(), {q[r - 1], q[r - 2] + n.inputs[2].view.shape()[r - 1]});
      else
        n.shape.insert(n.shape.end(),
                       {q[r - 3], part == AttentionGradPart::Stats ? Expr(2) : q[r - 2]});
      n.dtype = part == AttentionGradPart::Stats     ? DType::F32
                : part == AttentionGradPart::Queries ? g.node(n.inputs[0].source).dtype
                                                     : g.node(n.inputs[1].source).dtype;
      id = g.add_node(std::move(n));
    } else if (op == "AllReduce") {
      Node n;
      n.op = Op::Custom;
      n.inputs = {edge(children[0])};
      n.custom = std::make_shared<AllReduceOp>(low_.groups[static_cast<size_t>(attrs[0].bits)]);
      n.dtype = g.node(n.inputs[0].source).dtype;
      n.shape = n.inputs[0].view.shape();
      id = g.add_node(std::move(n));
    } else if (op == "Custom") {
      Node n = src_.node(NodeId{static_cast<uint32_t>(attrs[0].bits)});
      n.inputs.clear();
      for (ClassId ch : children) n.inputs.push_back(edge(ch));
      id = g.add_node(std::move(n));
    } else {
      Node n;
      n.op = op_from_name(op);
      for (ClassId ch : children) n.inputs.push_back(edge(ch));
      switch (n.op) {
        case Op::Constant:
          n.dtype = static_cast<DType>(attrs[1].bits);
          n.value = attrs[0].kind == Attr::Kind::Int ? Scalar::of_int(attrs[0].bits)
                                                     : Scalar::of(attrs[0].as_float());
          break;
        case Op::Iota:
          n.iota = attrs[0].as_expr();
          n.dtype = static_cast<DType>(attrs[1].bits);
          n.shape = low_.shapes[static_cast<size_t>(attrs[2].bits)];
          break;
        case Op::Cast:
          n.dtype = static_cast<DType>(attrs[0].bits);
          break;
        case Op::SumReduce:
        case Op::MaxReduce:
          n.axis = static_cast<int>(attrs[0].bits);
          break;
        default:
          break;
      }
      id = g.add_node(std::move(n));
    }
    done_[c.v] = id;
    return id;
  }

  // A graph output's node. A class extracted as a plain reshape of another value (a
  // product viewed back as [B, T, N], where the gemm-epilogue rules leave an Add), or as
  // a copy of such a reshape (contiguous() of it), is that value: outputs are handed over
  // as flat data, so its bytes need no copy.
  NodeId output(ClassId c) {
    uint32_t node = x_.node_for(eg_.find(c));
    if (eg_.node_op(node).name() == "Contiguous") {
      const uint32_t copied = x_.node_for(eg_.find(eg_.node_children(node)[0]));
      if (eg_.node_op(copied).name() == "View") node = copied;
    }
    if (eg_.node_op(node).name() == "View") {
      const View& v = low_.views[static_cast<size_t>(eg_.node_attrs(node).get()[0].bits)];
      const NodeId source = value(eg_.node_children(node)[0]);
      if (v.is_contiguous() && v.numel() == product(out_.graph->node(source).shape)) return source;
    }
    return value(c);
  }

 private:
  // The edge a consumer reads for class `c`: through the view if `c` is a View node.
  Edge edge(ClassId c) {
    c = eg_.find(c);
    const uint32_t node = x_.node_for(c);
    if (eg_.node_op(node).name() == "View") {
      const View& v = low_.views[static_cast<size_t>(eg_.node_attrs(node).get()[0].bits)];
      return Edge{value(eg_.node_children(node)[0]), v};
    }
    const NodeId id = value(c);
    return Edge{id, View::contiguous(out_.graph->node(id).shape)};
  }

  static Op op_from_name(const std::string& name) {
    for (size_t i = 0; i < kNumOps; ++i)
      if (kOpTraits[i].name == name) return static_cast<Op>(i);
    LUM_FAIL() << "internal: unknown op " << name << " after extraction";
  }

  const Graph& src_;
  const Lowering& low_;
  const eg::EGraph& eg_;
  const eg::Extraction& x_;
  Optimized& out_;
  AttentionOrders orders_;
  std::unordered_map<uint32_t, NodeId> done_;
};

// Whether class `c` holds a Cast of an f16 value (what gemm-f16-b reads directly).
bool widens_f16(const eg::EGraph& e, const Lowering& low, ClassId c) {
  for (uint32_t node : e.node_ids(e.find(c))) {
    if (e.node_op(node).name() != "Cast") continue;
    auto from = low.dtype_of.find(e.find(e.node_children(node)[0]).v);
    if (from != low.dtype_of.end() && from->second == DType::F16) return true;
  }
  return false;
}

// The class of (View $v x), where the e-graph has that node.
std::optional<ClassId> viewed(const eg::EGraph& e, const eg::Value& v, ClassId x) {
  const ClassId of[] = {e.find(x)};
  return e.lookup(Symbol::of("View"), AttrList::of({v.a}), of);
}

// The hlir-gemm-epilogues rules' predicates and appliers.
void add_gemm_epilogue_functions(Lowering& low, eg::Functions& fns) {
  // The class of MatMul((View va a), (View vb b)), or of MatMulAdd of those and `added`,
  // where the graph has it and one edge reads it (others would have the product run
  // twice).
  const auto product_read_once = [&low](const eg::EGraph& e, const eg::Value& va, ClassId a,
                                        const eg::Value& vb, ClassId b,
                                        std::optional<ClassId> added) -> std::optional<ClassId> {
    const std::optional<ClassId> a_view = viewed(e, va, a), b_view = viewed(e, vb, b);
    if (!a_view || !b_view) return std::nullopt;
    std::vector<ClassId> operands = {e.find(*a_view), e.find(*b_view)};
    if (added) operands.push_back(e.find(*added));
    const std::optional<ClassId> product =
        e.lookup(Symbol::of(added ? "MatMulAdd" : "MatMul"), {}, operands);
    if (!product || low.readers(e, *product) != 1) return std::nullopt;
    return product;
  };
  // Whether `r` (read through its view) is a value to add to the product of a and b:
  // both operands and r of one type, r not block-stored.
  const auto addend_fits = [&low](const eg::EGraph& e, ClassId a, ClassId b, ClassId r) {
    const auto t = low.dtype(e, a);
    const ClassId source = low.read_source(e, r);
    return t && low.dtype(e, b) == t && low.dtype(e, source) == t &&
           !low.quantized_input(e, source);
  };
  const auto is_row = [&low](const eg::EGraph& e, ClassId c) {
    const View* v = low.read_view(e, c);
    return v && is_bias_row(*v);
  };
  // (gemm-addend ?r $va ?a $vb ?b)
  fns.predicates["gemm-addend"] = [=](const eg::EGraph& e, std::span<const eg::Value> a) {
    return addend_fits(e, a[2].c, a[4].c, a[0].c) &&
           product_read_once(e, a[1], a[2].c, a[3], a[4].c, std::nullopt);
  };
  // (second-gemm-addend ?s ?r $va ?a $vb ?b): s added to the product that adds r; one of
  // the two a bias row (the epilogue adds one row and one matrix).
  fns.predicates["second-gemm-addend"] = [=](const eg::EGraph& e, std::span<const eg::Value> a) {
    return is_row(e, a[0].c) != is_row(e, a[1].c) && addend_fits(e, a[3].c, a[5].c, a[0].c) &&
           product_read_once(e, a[2], a[3].c, a[4], a[5].c, a[1].c);
  };
  // (call add-to-reshaped-product ?s $vo $va ?a $vb ?b [?r]): s added to the product
  // (of a and b, adding r) read through $vo, a reshape of its rows (x W + b computed
  // over [B*T, K] and viewed as [B, T, N], as torch's linear layers are): the product
  // adding s read through the inverse reshape, for the rule to view as $vo. Declines
  // where $vo is not all of the product in order or s's view has no such reshape.
  fns.appliers["add-to-reshaped-product"] =
      [=, &low](eg::EGraph& e, std::span<const eg::Value> a) -> std::optional<ClassId> {
    const View& vo = low.view(a[1]);
    const std::optional<ClassId> added =
        a.size() > 6 ? std::optional<ClassId>(a[6].c) : std::nullopt;
    std::vector<Expr> product_shape = low.view(a[2]).shape();  // [batch..., M, K, N]
    product_shape.erase(product_shape.end() - 2);
    // (A contiguous view of fewer elements reads a prefix of the product.)
    if (!vo.is_contiguous() || !(vo.numel() == product(product_shape)) ||
        !addend_fits(e, a[3].c, a[5].c, a[0].c) ||
        !product_read_once(e, a[2], a[3].c, a[4], a[5].c, added))
      return std::nullopt;
    const View* s_view = low.read_view(e, a[0].c);
    const std::optional<View> reshaped =
        (s_view ? *s_view : View::contiguous(vo.shape())).reshape(product_shape);
    if (!reshaped || (added && is_row(e, *added) == is_bias_row(*reshaped))) return std::nullopt;
    // (The operands' views exist: product_read_once found them.)
    std::vector<ClassId> children = {*viewed(e, a[2], a[3].c), *viewed(e, a[4], a[5].c)};
    if (added) children.push_back(*added);
    children.push_back(low.view_node(e, *reshaped, low.read_source(e, a[0].c)));
    return e.add(Symbol::of("MatMulAdd"), {}, children);
  };
}

// The first node of kind `op` in class `c`, if any.
std::optional<uint32_t> node_of(const eg::EGraph& e, ClassId c, std::string_view op) {
  for (uint32_t n : e.node_ids(e.find(c)))
    if (e.node_op(n).name() == op) return n;
  return std::nullopt;
}

// The operands of the WindowMatMul computing MatMul((View $va (Contiguous (View $vw ?x))),
// (View $vb ?b)) for `a` = ($va $vw ?x $vb ?b): x read through $vw
// (compiler::window_operand); where x is itself a copy (of a view vp of y: a padded
// image), that copy laid out channels last instead and b's sum reordered to match
// (compiler::channels_last). Both operands f16 or both bf16 (the kernels that take it
// run on tensor cores); nullopt otherwise.
struct WindowProduct {
  std::array<ClassId, 2> children;
  size_t rows;
  AttrList attrs(bool transposed) const {
    return AttrList::of({Attr::of_int(static_cast<int64_t>(rows)), Attr::of_int(transposed)});
  }
};
std::optional<WindowProduct> window_product(Lowering& low, eg::EGraph& e,
                                            std::span<const eg::Value> a) {
  const auto dt = low.dtype(e, a[2]);
  if ((dt != DType::F16 && dt != DType::BF16) || low.dtype(e, a[4]) != dt ||
      low.quantized_input(e, a[2]) || low.quantized_input(e, a[4]))
    return std::nullopt;
  // (Copies: adding views below may move low.views.)
  const View va = low.view(a[0]), vw = low.view(a[1]), vb = low.view(a[3]);
  const std::optional<WindowOperand> w = window_operand(va, vw);
  if (!w) return std::nullopt;
  const auto copy = [&](const View& v, ClassId source) {
    const ClassId c =
        e.add(Symbol::of("Contiguous"), {}, std::vector<ClassId>{low.view_node(e, v, source)});
    low.dtype_of[e.find(c).v] = *dt;
    return c;
  };
  const std::optional<uint32_t> x_copy = node_of(e, a[2].c, "Contiguous");
  const std::optional<uint32_t> vp_node =
      x_copy ? node_of(e, e.node_children(*x_copy)[0], "View") : std::nullopt;
  if (vp_node) {
    const View vp = low.views[static_cast<size_t>(e.node_attrs(*vp_node).get()[0].bits)];
    const ClassId y = e.node_children(*vp_node)[0];
    const size_t batch = vb.rank() - 3;
    if (const std::optional<ChannelsLast> cl = channels_last(*w, vp.shape(), batch)) {
      const std::vector<Expr> sum_dims(
          w->view.shape().begin() + static_cast<std::ptrdiff_t>(batch + w->row_dims),
          w->view.shape().end() - 1);
      if (const std::optional<OperandCopy> bc = reordered_sum_copy(vb, sum_dims, cl->sums))
        return WindowProduct{{low.view_node(e, cl->window, copy(vp.permute(cl->order), y)),
                              low.view_node(e, bc->read, copy(bc->copy, a[4].c))},
                             w->row_dims};
    }
  }
  return WindowProduct{{low.view_node(e, w->view, a[2].c), low.view_node(e, vb, a[4].c)},
                       w->row_dims};
}

// `v` without its last dim, which it reads broadcast (stride 0).
std::optional<View> without_broadcast_last(const View& v) {
  const size_t r = v.rank();
  if (r == 0 || !(v.strides()[r - 1] == Expr(0)) || v.is_masked(r - 1)) return std::nullopt;
  auto cut = [&](const std::vector<Expr>& x) { return std::vector<Expr>(x.begin(), x.end() - 1); };
  std::vector<Expr> lo, hi;
  for (size_t d = 0; d + 1 < r; ++d) lo.push_back(v.mask_lo(d)), hi.push_back(v.mask_hi(d));
  return View::from_parts(cut(v.shape()), cut(v.strides()), v.offset(), lo, hi);
}

// What `outer` reads of the source of a row-major copy of `inner` (the copy laid out in
// inner's shape), where outer reads the copy through a permutation of its dims, some
// broadcast (stride 0): inner's dims taken in that order. None for any other reading.
std::optional<View> through_copy(const View& outer, const View& inner) {
  if (outer.has_mask() || !(outer.offset() == Expr(0))) return std::nullopt;
  // A dim of size 1 masked to [0, min(n, 1)) (a broadcast over a symbolic length) reads
  // its one element wherever the view reads anything: with every dim's variables at
  // least 1 the bound is 1.
  for (size_t j = 0; j < inner.rank(); ++j) {
    if (!inner.is_masked(j)) continue;
    Expr hi = inner.mask_hi(j);
    for (const std::string& v : hi.variables()) hi = hi.substitute(v, Expr::var(v, 1));
    if (!(inner.shape()[j] == Expr(1)) || !(inner.mask_lo(j) == Expr(0)) || !(hi == Expr(1)))
      return std::nullopt;
  }
  const View copy = View::contiguous(inner.shape());
  std::vector<Expr> strides;
  std::vector<bool> used(inner.rank(), false);
  for (size_t d = 0; d < outer.rank(); ++d) {
    if (outer.strides()[d] == Expr(0)) {
      strides.push_back(0);
      continue;
    }
    size_t j = 0;
    while (j < inner.rank() && (used[j] || !(copy.strides()[j] == outer.strides()[d]) ||
                                !(inner.shape()[j] == outer.shape()[d])))
      ++j;
    if (j == inner.rank()) return std::nullopt;
    used[j] = true;
    strides.push_back(inner.strides()[j]);
  }
  for (size_t j = 0; j < inner.rank(); ++j)
    if (!used[j] && !(inner.shape()[j] == Expr(1))) return std::nullopt;
  std::vector<Expr> lo(outer.rank(), Expr(0)), hi = outer.shape();
  return View::from_parts(outer.shape(), strides, inner.offset(), lo, hi);
}

// Axes 0 .. n - 1 in order, then `last` (a permutation of the remaining ones).
std::vector<int> axes_then(size_t n, std::initializer_list<int> last) {
  std::vector<int> axes(n);
  for (size_t i = 0; i < n; ++i) axes[i] = static_cast<int>(i);
  axes.insert(axes.end(), last);
  return axes;
}

// The hlir-attention-gradients rules' predicate and appliers. The marker
// (AttentionScoreGrad $scale q k v mask dout) holds the kernels' operands as View classes
// in Attention's layout: q, k [batch..., M, D, T], v [batch..., M, T, Dv], mask
// [batch..., M, T], dout [batch..., M, Dv]; it is the class of the scores' gradient,
// [batch..., M, T].
void add_attention_gradient_functions(
    Lowering& low, eg::Functions& fns,
    const std::function<bool(DType, int64_t, int64_t)>& supported) {
  // (softmax-gradient $axis $vr $vs $vb $vq $vc $vln $ln2 $vl $log2e): along the last
  // axis, the sums broadcast back along it, the constants unmasked and ln 2 and log2(e).
  fns.predicates["softmax-gradient"] = [&low](const eg::EGraph&, std::span<const eg::Value> a) {
    const View& full = low.view(a[1]);
    if (a[0].a.bits != static_cast<int64_t>(full.rank()) - 1) return false;
    if (std::abs(a[7].a.as_float() - std::numbers::ln2) > 1e-6 ||
        std::abs(a[9].a.as_float() - std::numbers::log2e) > 1e-6)
      return false;
    return is_broadcast_along_last(full) && is_broadcast_along_last(low.view(a[2])) &&
           is_broadcast_along_last(low.view(a[3])) && is_broadcast_along_last(low.view(a[4])) &&
           !low.view(a[5]).has_mask() && !low.view(a[6]).has_mask() && !low.view(a[8]).has_mask();
  };
  // (call attention-score-gradient $scale $axis $vq ?q $vk ?k $vv ?v ?mask $vo ?do $vs $vi):
  // the marker, where q, k, v and the output's gradient are of one type and head dims the
  // backend's kernels take (`supported`), read unmasked, the mask bool, the softmax along
  // the keys and the output gradient read broadcast along them.
  fns.appliers["attention-score-gradient"] =
      [&low, supported](eg::EGraph& e, std::span<const eg::Value> a) -> std::optional<ClassId> {
    const auto t = low.dtype(e, a[3]);
    if (!t) return std::nullopt;
    for (size_t i : {5, 7, 10})
      if (low.dtype(e, a[i]) != t || low.quantized_input(e, a[i])) return std::nullopt;
    if (low.quantized_input(e, a[3]) || low.dtype(e, low.read_source(e, a[8].c)) != DType::Bool)
      return std::nullopt;
    // (Copies: adding views below may move low.views.)
    const View vq = low.view(a[2]), vk = low.view(a[4]), vv = low.view(a[6]), vo = low.view(a[9]);
    const size_t r = vq.rank();
    if (r < 3 || a[1].a.bits != static_cast<int64_t>(r) - 2) return std::nullopt;
    const std::optional<int64_t> d = vq.shape()[r - 2].as_const(),
                                 dv = vv.shape()[r - 2].as_const();
    if (!d || !dv || !supported(*t, *d, *dv)) return std::nullopt;
    const View* vm = low.read_view(e, a[8].c);
    if (vm && (vm->has_mask() || vm->rank() + 1 != r)) return std::nullopt;
    for (const View* v : {&vq, &vk, &vv, &vo, &low.view(a[11]), &low.view(a[12])})
      if (v->has_mask()) return std::nullopt;
    const std::optional<View> dout = without_broadcast_last(vo);
    if (!dout) return std::nullopt;
    const ClassId children[] = {
        low.view_node(e, vq, a[3].c), low.view_node(e, vk, a[5].c),
        low.view_node(e, vv.permute(axes_then(r - 2, {int(r) - 1, int(r) - 2})), a[7].c),
        e.find(a[8].c), low.view_node(e, *dout, a[10].c)};
    return e.add(Symbol::of("AttentionScoreGrad"), AttrList::of({a[0].a}), children);
  };
  // The kernels' nodes for the marker's operands: Stats, then Queries or KeysValues.
  const auto gradient = [&low](eg::EGraph& e, const Attr& scale, std::span<const ClassId> operands,
                               const char* op) {
    const ClassId stats = e.add(Symbol::of("AttentionStats"), AttrList::of({scale}), operands);
    low.dtype_of[e.find(stats).v] = DType::F32;
    std::vector<ClassId> children(operands.begin(), operands.end());
    children.push_back(stats);
    const ClassId c = e.add(Symbol::of(op), AttrList::of({scale}), children);
    low.dtype_of[e.find(c).v] = *low.dtype(e, operands[0]);
    return c;
  };
  // KeysValues' [batch..., T, D + Dv] output: its columns from `from` to `to`.
  const auto columns = [](const View& q, const View& v, Expr from, Expr to) {
    const size_t r = q.rank();
    std::vector<Expr> shape(q.shape().begin(), q.shape().end() - 3);
    shape.insert(shape.end(), {q.shape()[r - 1], q.shape()[r - 2] + v.shape()[r - 1]});
    return View::contiguous(shape).slice(static_cast<int>(r) - 2, from, to);
  };
  // (call attention-input-gradient $axis $va $vb ?x $scale ?q ?k ?v ?mask ?do): the
  // product (summed along $axis) of the scores' gradient [batch..., M, T] with the keys,
  // [batch..., M, D] (the queries' gradient), or read transposed with the queries,
  // [batch..., T, D] (the keys').
  fns.appliers["attention-input-gradient"] =
      [&low, gradient, columns](eg::EGraph& e,
                                std::span<const eg::Value> args) -> std::optional<ClassId> {
    const std::span<const eg::Value> a = args.subspan(1);
    const View *q = low.read_view(e, a[4].c), *k = low.read_view(e, a[5].c),
               *v = low.read_view(e, a[6].c);
    if (!q || !k || !v) return std::nullopt;
    const View vq = *q, vk = *k, vv = *v, va = low.view(a[0]), vb = low.view(a[1]);
    const size_t r = vq.rank();
    const int n = static_cast<int>(r);
    if (args[0].a.bits != n - 2) return std::nullopt;  // the product's inner dim
    std::vector<Expr> scores(vq.shape().begin(), vq.shape().end());
    scores.erase(scores.end() - 2);  // [batch..., M, T]
    const View ds = View::contiguous(scores);
    const Expr d = vq.shape()[r - 2];
    const ClassId operands[] = {a[4].c, a[5].c, a[6].c, a[7].c, a[8].c};
    ClassId x = e.find(a[2].c);
    View read = vb;
    // (Autograd may read the keys through a row-major copy of their transpose.)
    if (x != low.read_source(e, a[5].c))
      if (const std::optional<uint32_t> copy = node_of(e, x, "Contiguous")) {
        const ClassId copied = e.node_children(*copy)[0];
        const View* inner = low.read_view(e, copied);
        if (const std::optional<View> through = inner ? through_copy(vb, *inner) : std::nullopt)
          x = low.read_source(e, copied), read = *through;
      }
    if (x == low.read_source(e, a[5].c) && same_reads(va, ds.expand_dim(n - 1, d)) &&
        same_reads(read, vk.permute(axes_then(r - 2, {n - 1, n - 2}))))
      return gradient(e, a[3].a, operands, "AttentionGradQ");
    if (x == low.read_source(e, a[4].c) &&
        same_reads(va, ds.permute(axes_then(r - 3, {n - 2, n - 3})).expand_dim(n - 1, d)) &&
        same_reads(read, vq.permute(axes_then(r - 3, {n - 1, n - 3, n - 2})))) {
      const ClassId kv = gradient(e, a[3].a, operands, "AttentionGradKV");
      return low.view_node(e, columns(vq, vv, 0, d), kv);
    }
    return std::nullopt;
  };
  // (call attention-value-gradient $axis $va ?do $vb ?w): the product (summed along
  // $axis) of the output's gradient, read transposed, with the weights softmax(w),
  // [batch..., Dv, T]: the values' gradient transposed, where a marker has w's queries,
  // keys, mask and scale and this output gradient.
  fns.appliers["attention-value-gradient"] =
      [&low, gradient, columns](eg::EGraph& e,
                                std::span<const eg::Value> args) -> std::optional<ClassId> {
    const std::span<const eg::Value> a = args.subspan(1);
    if (args[0].a.bits != static_cast<int64_t>(low.view(a[0]).rank()) - 2) return std::nullopt;
    // w = where(mask, (q k) * scale, -inf)
    const auto constant = [&](ClassId c) -> std::optional<double> {
      const std::optional<uint32_t> view = node_of(e, c, "View");
      const std::optional<uint32_t> value =
          view ? node_of(e, e.node_children(*view)[0], "Constant") : std::nullopt;
      if (!value) return std::nullopt;
      return e.node_attrs(*value).get()[0].as_float();
    };
    const std::optional<uint32_t> where = node_of(e, a[3].c, "Where");
    if (!where || constant(e.node_children(*where)[2]) != -HUGE_VAL) return std::nullopt;
    const ClassId mask = e.find(e.node_children(*where)[0]);
    const std::optional<uint32_t> scaled = node_of(e, e.node_children(*where)[1], "Mul");
    if (!scaled) return std::nullopt;
    const std::optional<uint32_t> product = node_of(e, e.node_children(*scaled)[0], "MatMul");
    const std::optional<double> scale = constant(e.node_children(*scaled)[1]);
    if (!product || !scale) return std::nullopt;
    const ClassId q = e.find(e.node_children(*product)[0]),
                  k = e.find(e.node_children(*product)[1]);
    const ClassId dout_source = e.find(a[1].c);
    for (ClassId c : e.classes())
      for (uint32_t node : e.node_ids(c)) {
        if (e.node_op(node).name() != "AttentionScoreGrad") continue;
        const auto ch = e.node_children(node);
        if (e.find(ch[0]) != q || e.find(ch[1]) != k || e.find(ch[3]) != mask ||
            e.node_attrs(node).get()[0].as_float() != *scale ||
            low.read_source(e, ch[4]) != dout_source)
          continue;
        const View vq = *low.read_view(e, ch[0]), vv = *low.read_view(e, ch[2]),
                   vo = *low.read_view(e, ch[4]);
        const size_t r = vq.rank();
        const int n = static_cast<int>(r);
        std::vector<Expr> weights(vq.shape().begin(), vq.shape().end());
        weights.erase(weights.end() - 2);  // [batch..., M, T]
        const Expr t = vq.shape()[r - 1], dv = vv.shape()[r - 1];
        if (!same_reads(low.view(a[0]),
                        vo.permute(axes_then(r - 3, {n - 2, n - 3})).expand_dim(n - 1, t)) ||
            !same_reads(low.view(a[2]), View::contiguous(weights).expand_dim(n - 3, dv)))
          return std::nullopt;
        const ClassId operands[] = {ch[0], ch[1], ch[2], ch[3], ch[4]};
        const ClassId kv = gradient(e, e.node_attrs(node).get()[0], operands, "AttentionGradKV");
        const Expr d = vq.shape()[r - 2];
        return low.view_node(
            e, columns(vq, vv, d, d + dv).permute(axes_then(r - 3, {n - 2, n - 3})), kv);
      }
    return std::nullopt;
  };
}

// The fusion kinds `x` chose in classes that also hold a form of the value of another kind.
std::vector<std::string> extraction_choices(const eg::EGraph& e, const eg::Extraction& x) {
  const std::vector<std::string>& fused = fusion_kinds();
  std::set<std::string, std::less<>> kinds;
  for (const auto& [cls, node] : x.choice) {
    const std::string_view name = e.node_op(node).name();
    if (std::find(fused.begin(), fused.end(), name) == fused.end()) continue;
    const std::span<const uint32_t> forms = e.node_ids(ClassId{cls});
    if (std::any_of(forms.begin(), forms.end(),
                    [&](uint32_t other) { return e.node_op(other).name() != name; }))
      kinds.emplace(name);
  }
  return {kinds.begin(), kinds.end()};
}

}  // namespace

const std::vector<std::string>& fusion_kinds() {
  // (Softmax is no kernel of its own: a step towards Attention. MatMul and QMatMul have
  // no fused form to undo; their alternatives, a library's algorithms or a kernel's
  // shape, are searched per kernel.)
  static const std::vector<std::string> kinds = {"Attention", "MatMulAdd", "NormQMatMul",
                                                 "QMatMulAdd", "WindowMatMul"};
  return kinds;
}

std::string Optimized::summary() const {
  std::ostringstream os;
  os << enodes << " e-nodes, " << eclasses << " e-classes, " << report.iterations.size()
     << " iterations (" << eg::stop_reason_name(report.reason) << ")";
  return os.str();
}

Optimized optimize(const Graph& g, const OptimizeOptions& options) {
  std::vector<Node> nodes;
  if (options.storage_orders) {
    nodes = storage_ordered(g);
  } else {
    for (uint32_t i = 0; i < g.num_nodes(); ++i) nodes.push_back(g.node(NodeId{i}));
  }
  Lowering low(g, folded_index_values(std::move(nodes), g.outputs()));
  for (NodeId o : g.outputs()) low.lower(o);
  eg::Functions fns;
  // (gemm $axis $va $vb ?a ?b): an f32, f16 or bf16 product BLAS can run, both operands
  // of one type; block-stored operands are left to qgemm.
  fns.predicates["gemm"] = [&low](const eg::EGraph& e, std::span<const eg::Value> a) {
    const auto dt = low.dtype(e, a[3]);
    if (!dt || low.dtype(e, a[4]) != dt || low.quantized_input(e, a[3]) ||
        low.quantized_input(e, a[4]) || widens_f16(e, low, a[4].c))
      return false;
    return is_gemm(static_cast<int>(a[0].a.bits), low.view(a[1]), low.view(a[2]), *dt);
  };
  // (gemm-f16-b $axis $va $vb ?a ?b): the same with ?b an f16 value widened by a Cast;
  // the plain rule then declines the widened operand, so the MatMul reading f16 is the
  // only one built (extraction by longest path could not tell the two apart).
  fns.predicates["gemm-f16-b"] = [&low](const eg::EGraph& e, std::span<const eg::Value> a) {
    const auto da = low.dtype(e, a[3]);
    if (!da || low.dtype(e, a[4]) != DType::F16 || low.quantized_input(e, a[4])) return false;
    return is_gemm(static_cast<int>(a[0].a.bits), low.view(a[1]), low.view(a[2]), *da);
  };
  // (call product-of-copies $axis $va ?a $vb ?b): the product `gemm` declines for how an
  // operand is read (zero padding, no unit stride), over a row-major copy of each such
  // operand: a copy costs one pass over the operand, the multiply-and-reduce it replaces
  // re-reads both operands for every output element. Declines where `gemm` or `gemm-f16-b`
  // takes the product or a broadcast dim is masked.
  fns.appliers["product-of-copies"] =
      [&low](eg::EGraph& e, std::span<const eg::Value> a) -> std::optional<ClassId> {
    const auto dt = low.dtype(e, a[2]);
    if (!dt || low.dtype(e, a[4]) != dt || low.quantized_input(e, a[2]) ||
        low.quantized_input(e, a[4]) || widens_f16(e, low, a[4].c))
      return std::nullopt;
    const int axis = static_cast<int>(a[0].a.bits);
    // (Copies: adding views below may move low.views.)
    const View va = low.view(a[1]), vb = low.view(a[3]);
    if (!is_gemm_of_copies(axis, va, vb, *dt) || is_gemm(axis, va, vb, *dt)) return std::nullopt;
    const size_t r = va.rank();
    const std::optional<OperandCopy> ca = gemm_operand_copy(va, r - 1);
    const std::optional<OperandCopy> cb = gemm_operand_copy(vb, r - 3);
    if (!ca || !cb) return std::nullopt;
    // Each operand as it is where BLAS reads it so (paired with the other's copy, which it
    // does), else through its copy.
    const bool copy_a = !is_gemm(axis, va, cb->read, *dt);
    const bool copy_b = !is_gemm(axis, ca->read, vb, *dt);
    const View &ra = copy_a ? ca->read : va, &rb = copy_b ? cb->read : vb;
    if (!is_gemm(axis, ra, rb, *dt)) return std::nullopt;
    const auto operand = [&](bool copy, const OperandCopy& c, const View& v, ClassId x) {
      if (!copy) return low.view_node(e, v, x);
      const ClassId copied =
          e.add(Symbol::of("Contiguous"), {}, std::vector<ClassId>{low.view_node(e, c.copy, x)});
      low.dtype_of[e.find(copied).v] = *dt;
      return low.view_node(e, c.read, copied);
    };
    const ClassId children[] = {operand(copy_a, *ca, va, a[2].c), operand(copy_b, *cb, vb, a[4].c)};
    return e.add(Symbol::of("MatMul"), {}, children);
  };
  // (call product-of-windows $va $vw ?x $vb ?b): the product as a WindowMatMul
  // (window_product).
  fns.appliers["product-of-windows"] =
      [&low](eg::EGraph& e, std::span<const eg::Value> a) -> std::optional<ClassId> {
    const std::optional<WindowProduct> w = window_product(low, e, a);
    if (!w) return std::nullopt;
    return e.add(Symbol::of("WindowMatMul"), w->attrs(false), w->children);
  };
  // (call product-of-windows-transposed $vo $va $vw ?x $vb ?b): the same product read
  // through $vo alone, along its rows (a convolution's output read as NCHW):
  // one that stores its output transposed, read through $vo over that (transposed_read).
  fns.appliers["product-of-windows-transposed"] =
      [&low](eg::EGraph& e, std::span<const eg::Value> a) -> std::optional<ClassId> {
    const std::optional<WindowProduct> w = window_product(low, e, a.subspan(1));
    if (!w) return std::nullopt;
    const View vo = low.view(a[0]), vb = low.view(a[4]);
    const std::optional<ClassId> copy_read = viewed(e, a[2], a[3].c);
    const std::optional<ClassId> copy =
        copy_read ? e.lookup(Symbol::of("Contiguous"), {}, std::span(&*copy_read, 1))
                  : std::nullopt;
    const std::optional<ClassId> a_view = copy ? viewed(e, a[1], *copy) : std::nullopt;
    const std::optional<ClassId> b_view = viewed(e, a[4], a[5].c);
    if (!a_view || !b_view) return std::nullopt;
    const ClassId operands[] = {e.find(*a_view), e.find(*b_view)};
    const std::optional<ClassId> product = e.lookup(Symbol::of("MatMul"), {}, operands);
    if (!product || !low.read_only_through(e, *product, vo)) return std::nullopt;
    std::vector<Expr> out = vb.shape();  // [batch..., M, N]: b's [batch..., M, K, N] less K
    out.erase(out.end() - 2);
    const std::optional<View> read = transposed_read(vo, out);
    if (!read) return std::nullopt;
    return low.view_node(e, *read, e.add(Symbol::of("WindowMatMul"), w->attrs(true), w->children));
  };
  // (qgemm $axis $va $vb ?w): x W^T with W a block-stored input.
  fns.predicates["qgemm"] = [&low](const eg::EGraph& e, std::span<const eg::Value> a) {
    const Node* w = low.quantized_input(e, a[3]);
    return w && is_qgemm(static_cast<int>(a[0].a.bits), low.view(a[1]), low.view(a[2]), w->shape);
  };
  // (softmax $axis $vn $vm $vc $vl $log2e $vr $vs): the matched exp / sum is a softmax
  // along the last axis: the max and the sum are broadcast back along it, the constants
  // read unmasked, and the exp's factor is log2(e).
  fns.predicates["softmax"] = [&low](const eg::EGraph&, std::span<const eg::Value> a) {
    const View& full = low.view(a[1]);
    if (a[0].a.bits != static_cast<int64_t>(full.rank()) - 1) return false;
    if (std::abs(a[5].a.as_float() - std::numbers::log2e) > 1e-12) return false;
    return is_broadcast_along_last(full) && is_broadcast_along_last(low.view(a[6])) &&
           is_broadcast_along_last(low.view(a[2])) && is_broadcast_along_last(low.view(a[7])) &&
           !low.view(a[3]).has_mask() && !low.view(a[4]).has_mask();
  };
  // (attention $vp $vmask $vscale $vinf ?q ?k ?v ?mask): the probabilities are the
  // value product's left operand as they are, the mask is bool, the constants unmasked,
  // and queries, keys and values plain floats.
  const auto plain_float = [&low](const eg::EGraph& e, const eg::Value& v) {
    const auto t = low.dtype(e, v);
    return (t == DType::F32 || t == DType::F16 || t == DType::BF16) && !low.quantized_input(e, v);
  };
  fns.predicates["attention"] = [&low, plain_float](const eg::EGraph& e,
                                                    std::span<const eg::Value> a) {
    return plain_float(e, a[4]) && plain_float(e, a[5]) && plain_float(e, a[6]) &&
           low.dtype(e, a[7]) == DType::Bool && is_broadcast_along_last(low.view(a[0])) &&
           !low.view(a[1]).has_mask() && !low.view(a[2]).has_mask() && !low.view(a[3]).has_mask() &&
           low.view(a[1]).rank() + 1 == low.view(a[0]).rank();
  };
  // (call attention-without-mask $scale $vp $vscale $vq ?q $vk ?k $vv ?v): the same
  // without a mask, as an Attention whose mask keeps every key (one true broadcast, which
  // the kernels compute).
  fns.appliers["attention-without-mask"] =
      [&low, plain_float](eg::EGraph& e, std::span<const eg::Value> a) -> std::optional<ClassId> {
    // (Copies: adding views below may move low.views.)
    const View vp = low.view(a[1]), vscale = low.view(a[2]);
    const View vq = low.view(a[3]), vk = low.view(a[5]), vv = low.view(a[7]);
    if (!plain_float(e, a[4]) || !plain_float(e, a[6]) || !plain_float(e, a[8]) ||
        !is_broadcast_along_last(vp) || vscale.has_mask() || vp.rank() < 3)
      return std::nullopt;
    std::vector<Expr> scores = vp.shape();
    scores.pop_back();
    const ClassId keep = low.iota_node(e, Expr(1), DType::Bool, {});
    const ClassId children[] = {low.view_node(e, vq, a[4].c), low.view_node(e, vk, a[6].c),
                                low.view_node(e, vv, a[8].c),
                                low.view_node(e, View::contiguous({}).broadcast_to(scores), keep)};
    return e.add(Symbol::of("Attention"), AttrList::of({a[0].a}), children);
  };
  // (rmsnorm-qmatmul $axis $len $va $vr $vs $vn $ve $vg ?x ?w): the matched norm is
  // along x's last axis (its length the mean's count), its scale and weight broadcast
  // back along it, x f32, and W in a format whose products quantise the activation row
  // (Q8_0, Q4_K, Q5_K, Q6_K).
  fns.predicates["rmsnorm-qmatmul"] = [&low](const eg::EGraph& e, std::span<const eg::Value> a) {
    const View& va = low.view(a[2]);
    const size_t r = va.rank();
    const Node* w = low.quantized_input(e, a[9]);
    if (!w || low.dtype(e, a[8]) != DType::F32 || r < 3) return false;
    const auto format = static_cast<GgmlType>(w->quant);
    if (format != GgmlType::Q8_0 && format != GgmlType::Q4_K && format != GgmlType::Q5_K &&
        format != GgmlType::Q6_K)
      return false;
    const View& vg = low.view(a[7]);
    if (a[0].a.bits != static_cast<int64_t>(r) - 2 || !(a[1].a.as_expr() == va.shape()[r - 2]) ||
        vg.rank() != r - 1 || vg.has_mask() || !(vg.offset() == Expr(0)) ||
        !(vg.strides()[r - 2] == Expr(1)))
      return false;
    for (size_t d = 0; d + 2 < r; ++d)  // the weight is the same for every row
      if (!(vg.strides()[d] == Expr(0)) && !(vg.shape()[d] == Expr(1))) return false;
    return is_broadcast_along_last(low.view(a[3])) && is_broadcast_along_last(low.view(a[4])) &&
           !low.view(a[5]).has_mask() && !low.view(a[6]).has_mask();
  };
  // (residual ?r $va ?x ?w): an f32 value (not a weight) to add to the output of
  // QMatMul((View $va ?x), ?w), which nothing else reads (else the product would run
  // twice, its weights streamed twice).
  fns.predicates["residual"] = [&low](const eg::EGraph& e, std::span<const eg::Value> a) {
    if (low.dtype(e, a[0]) != DType::F32 || low.quantized_input(e, a[0])) return false;
    const std::optional<ClassId> view = viewed(e, a[1], a[2].c);
    if (!view) return false;
    const ClassId operands[] = {e.find(*view), e.find(a[3].c)};
    const std::optional<ClassId> product = e.lookup(eg::Symbol::of("QMatMul"), {}, operands);
    return product && low.readers(e, *product) == 1;
  };
  add_gemm_epilogue_functions(low, fns);
  add_attention_gradient_functions(low, fns, options.attention_gradients);
  std::vector<eg::RuleSet> sets = without_disabled_rules(rule_sets(fns));
  if (!options.product_fusions)
    std::erase_if(sets, [](const eg::RuleSet& s) { return s.name == "hlir-product-fusions"; });
  if (!options.gemm_epilogues)
    std::erase_if(sets, [](const eg::RuleSet& s) { return s.name == "hlir-gemm-epilogues"; });
  if (!options.window_products)
    std::erase_if(sets, [](const eg::RuleSet& s) { return s.name == "hlir-window-products"; });
  if (!options.attention_gradients)
    std::erase_if(sets, [](const eg::RuleSet& s) { return s.name == "hlir-attention-gradients"; });
  std::vector<const eg::RuleSet*> active;
  for (const auto& s : sets) active.push_back(&s);
  Optimized out;
  out.graph = std::make_unique<Graph>();
  out.report = eg::run_rules(low.egraph, active, fns,
                             {.max_iterations = 20, .max_nodes = 200000, .max_seconds = 5});
  out.enodes = low.egraph.num_nodes();
  out.eclasses = low.egraph.num_classes();
  // One greedy choice table serves every output, so shared values stay shared. Costs
  // combine by the most expensive path: summed tree costs explode in deep residual
  // networks (every layer reuses the stream) until a kernel's saving is below rounding.
  std::vector<ClassId> roots;
  for (NodeId o : g.outputs()) roots.push_back(low.class_of(o));
  // An avoided kind costs more than any path without it, so it stays only where a value
  // has no other form.
  const auto cost = [&options](const eg::EGraph& e, uint32_t node) {
    const std::string_view op = e.node_op(node).name();
    for (const std::string& kind : options.avoid)
      if (op == kind) return 1e15;
    return kernel_cost(e, node);
  };
  eg::Extraction x;
  if (!roots.empty()) x = eg::extract_greedy(low.egraph, roots, cost, eg::CostCombine::Max);
  out.choices = extraction_choices(low.egraph, x);
  Rebuild rebuild(g, low, low.egraph, x, out,
                  options.attention_output_orders ? attention_orders(low.egraph, x, low, roots)
                                                  : AttentionOrders{});
  for (NodeId o : g.outputs()) {
    const NodeId n = rebuild.output(low.class_of(o));
    out.outputs.emplace_back(o, n);
    out.graph->mark_retrieve(n);
  }
  return out;
}

}  // namespace luminal::compiler
