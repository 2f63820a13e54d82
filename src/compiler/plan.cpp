// CSE, DCE and the fusion decision.
#include "luminal/compiler/plan.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "luminal/collective.hpp"
#include "luminal/compiler/attention_op.hpp"

namespace luminal::compiler {
namespace {

// A node's identity for CSE: op, dtype, attributes and (canonical source, view) inputs.
// Inputs (user data) are never merged.
std::string cse_key(const Node& n, const std::vector<NodeId>& canonical) {
  std::ostringstream os;
  os << static_cast<int>(n.op) << '|' << static_cast<int>(n.dtype) << '|' << to_string(n.shape)
     << '|' << n.axis << '|' << n.iota.id() << '|' << n.value.is_int << ':' << n.value.i << ':'
     << n.value.f;
  for (const Edge& e : n.inputs) os << '|' << canonical[e.source.value].value << e.view.to_string();
  return os.str();
}

// Each collective moved up to just after the last kernel it reads (after the collectives
// already there): its exchange starts as soon as its operands are ready, and a backend
// that runs it beside the kernels after it (CUDA) overlaps the two. The collectives then
// come in the order their operands are ready, the same on every rank. A data-parallel
// step's gradient buckets would otherwise all wait for the end of the backward pass,
// where the graph's order put them (its weights' gradients, computed for the update in
// the parameters' order, come last).
void issue_collectives_early(const Graph& g, KernelPlan& p) {
  std::vector<Kernel>& ks = p.kernels;
  std::vector<size_t> index_of(g.num_nodes(), SIZE_MAX);
  for (size_t k = 0; k < ks.size(); ++k) index_of[ks[k].root.value] = k;
  const auto is_collective = [&](const Kernel& kn) {
    const Node& n = g.node(kn.root);
    return n.op == Op::Custom && dynamic_cast<const CollectiveOp*>(n.custom.get()) != nullptr;
  };
  for (size_t k = 0; k < ks.size(); ++k) {
    if (!is_collective(ks[k])) continue;
    size_t to = 0;
    for (NodeId r : ks[k].reads)
      if (index_of[r.value] != SIZE_MAX) to = std::max(to, index_of[r.value] + 1);
    while (to < k && is_collective(ks[to])) ++to;
    if (to >= k) continue;
    std::rotate(ks.begin() + static_cast<std::ptrdiff_t>(to),
                ks.begin() + static_cast<std::ptrdiff_t>(k),
                ks.begin() + static_cast<std::ptrdiff_t>(k) + 1);
    for (size_t j = to; j <= k; ++j) index_of[ks[j].root.value] = j;
  }
}

// A value stored only because several nodes read it, where all of them are computed by
// one kernel and read it at that kernel's own element (through contiguous views, from
// nodes that are themselves read so, up to the kernel's root): that kernel computes it
// once per element and names it at each read (ElementWriter::value), so it needs no
// buffer. GELU's erf reads its pieces up to five times each; stored, they took four
// kernels.
// Consumers come after their producers in the graph, so one pass from the last node
// back decides each node after all its readers: `owner` is the kernel a fused node is
// computed by (kSeveral: more than one), `aligned` whether it is computed at that
// kernel's own element only.
void fuse_shared_within_one_kernel(const Graph& g, KernelPlan& p,
                                   const std::vector<bool>& stored_for_sharing) {
  const size_t count = g.num_nodes();
  constexpr uint32_t kNone = UINT32_MAX, kSeveral = UINT32_MAX - 1;
  std::vector<std::vector<std::pair<uint32_t, size_t>>> readers(count);  // (node, input)
  for (uint32_t i = 0; i < count; ++i) {
    if (!p.needed[i] || p.canonical[i].value != i) continue;
    const Node& n = g.node(NodeId{i});
    for (size_t j = 0; j < n.inputs.size(); ++j)
      readers[p.canon(n.inputs[j].source).value].emplace_back(i, j);
  }
  std::vector<uint32_t> owner(count, kNone);
  std::vector<bool> aligned(count, false);
  // Whether reader r is computed at its kernel's own element: a root that maps or
  // reduces its input is (a gather, which reads its data where its indices say, is not).
  const auto at_kernels_element = [&](uint32_t r) {
    if (!p.materialized[r]) return static_cast<bool>(aligned[r]);
    const Op op = g.node(NodeId{r}).op;
    return is_elementwise(op) || op == Op::SumReduce || op == Op::MaxReduce;
  };
  for (uint32_t i = count; i-- > 0;) {
    if (!p.needed[i] || p.canonical[i].value != i) continue;
    if (p.materialized[i] && !stored_for_sharing[i]) continue;
    const Node& n = g.node(NodeId{i});
    const View own = View::contiguous(n.shape);
    uint32_t k = kNone;
    bool at_own_element = true;
    for (const auto& [r, j] : readers[i]) {
      const uint32_t kr = p.materialized[r] ? r : owner[r];
      k = k == kNone || k == kr ? kr : kSeveral;
      at_own_element = at_own_element && at_kernels_element(r) &&
                       g.node(NodeId{r}).inputs[j].view == own;
    }
    if (p.materialized[i]) {
      if (k >= kSeveral || !at_own_element) continue;
      p.materialized[i] = false;
    }
    owner[i] = k;
    aligned[i] = at_own_element;
  }
}

// A reduction over a row of at most 16 elements (a pooling window's), known when planned.
bool short_reduction(const Node& n) {
  if (n.op != Op::SumReduce && n.op != Op::MaxReduce) return false;
  const std::optional<int64_t> len =
      n.inputs[0].view.shape()[static_cast<size_t>(n.axis)].as_const();
  return len && *len <= 16;
}

}  // namespace

KernelPlan plan_kernels(const Graph& g, Fusion fusion, bool computed_masks) {
  const bool fuse = fusion != Fusion::Off;
  const size_t count = g.num_nodes();
  KernelPlan p;
  p.canonical.resize(count);
  std::map<std::string, NodeId> seen;
  for (uint32_t i = 0; i < count; ++i) {
    const NodeId id{i};
    const Node& n = g.node(id);
    p.canonical[i] = id;
    if (n.op == Op::Input || g.is_output(id)) continue;
    auto [it, fresh] = seen.emplace(cse_key(n, p.canonical), id);
    if (!fresh) p.canonical[i] = it->second;
  }
  // DCE over canonical nodes; count consumers of each canonical node.
  p.needed.assign(count, false);
  std::vector<size_t> consumers(count, 0);
  for (NodeId o : g.outputs()) p.needed[p.canon(o).value] = true;
  std::vector<bool> read_broadcast(count, false);
  std::vector<uint32_t> a_reader(count, 0);  // (the only one where consumers is 1)
  for (uint32_t i = count; i-- > 0;) {
    if (!p.needed[i] || p.canonical[i].value != i) continue;
    for (const Edge& e : g.node(NodeId{i}).inputs) {
      const uint32_t s = p.canon(e.source).value;
      p.needed[s] = true;
      ++consumers[s];
      a_reader[s] = i;
      if (e.view.repeats()) read_broadcast[s] = true;
    }
  }
  // Materialise: inputs, outputs, anything that is not elementwise, and shared values.
  // Constants and iotas are recomputed everywhere; under RecomputeShared so are a few
  // elementwise ops shared by a few consumers, which cost less computed in each (as
  // softmax's exponentials are, by its sum and its division) than written out and read
  // back. `cone` counts the ops a node's value fuses, itself included: it bounds what
  // recomputation can multiply. (The CPU keeps StoreShared: there a stored value is
  // re-read from cache, and its JIT contracts a fused multiply-add where a stored
  // product would have been rounded, so recomputing changes its numbers.)
  // A longer cone is recomputed too where that costs its readers less than storing it
  // (one write, a read by each): the bytes an element reads from stored values
  // (`streamed`, a broadcast read counted as none: it stays in cache) by each reader, and
  // the ops it computes again in all but one (`work`, a transcendental as eight simple
  // ops), against the stored value's bytes, at kOpsPerByte ops the time of a byte. A
  // loss's one-hot over the vocabulary (an iota compared with the targets) streams
  // nothing; a softmax's exponentials stream the logits, half their f32 bytes where the
  // logits are bf16; eight sines read twice are stored.
  constexpr size_t kMaxRecomputedOps = 6, kMaxRecomputedStreamingOps = 24,
                   kMaxRecomputingConsumers = 4, kOpsPerByte = 10, kMinRepeatedWorkStored = 24;
  const auto op_work = [](Op op) -> size_t {
    switch (op) {
      case Op::Log2:
      case Op::Exp2:
      case Op::Sin:
      case Op::Sqrt:
      case Op::Recip:
      case Op::Mod:
        return 8;
      case Op::Constant:
        return 0;
      default:
        return 1;
    }
  };
  p.materialized.assign(count, false);
  std::vector<bool> stored_for_sharing(count, false);
  std::vector<size_t> cone(count, 0), streamed(count, 0), work(count, 0);
  for (uint32_t i = 0; i < count; ++i) {
    if (!p.needed[i] || p.canonical[i].value != i) continue;
    const NodeId id{i};
    const Node& n = g.node(id);
    const bool cheap_source = n.op == Op::Constant || n.op == Op::Iota;
    const bool elementwise = is_elementwise(n.op) || cheap_source;
    cone[i] = 1;
    work[i] = op_work(n.op);
    for (const Edge& e : n.inputs) {
      const uint32_t s = p.canon(e.source).value;
      const bool stored = p.materialized[s];  // (inputs included)
      cone[i] += cone[s];
      work[i] += stored ? 0 : work[s];
      if (!e.view.repeats())
        streamed[i] += stored ? dtype_size(g.node(NodeId{s}).dtype) : streamed[s];
    }
    const size_t readers = consumers[i];
    const bool costs_less = cone[i] <= kMaxRecomputedStreamingOps && readers > 0 &&
                            readers * streamed[i] * kOpsPerByte + (readers - 1) * work[i] <
                                (readers + 1) * dtype_size(n.dtype) * kOpsPerByte;
    const bool recompute =
        cheap_source || (fusion == Fusion::RecomputeShared && readers <= kMaxRecomputingConsumers &&
                         (cone[i] <= kMaxRecomputedOps || costs_less));
    // Fused into a reader that reads it broadcast, a costly value is computed again for
    // every element the broadcast repeats it into (a convolution's input gradient, nine
    // shifted windows summed, read by max pooling's gradient once for each of a 2x2
    // window's elements): on the CPU it is stored, once. (A value constant along a row
    // costs nothing repeated there: the C++ compiler hoists it out of the row's loop. The
    // GPU's row groups compute a row's values once too, and would be split by storing
    // them; its elementwise kernels are left as they were.)
    const bool repeated = fusion == Fusion::StoreShared && elementwise && !cheap_source &&
                          read_broadcast[i] && work[i] >= kMinRepeatedWorkStored;
    // A short reduction (a pooling window's row) read only by another is computed inside
    // that one's loop under RecomputeShared: a 3x3 max pooling is one kernel, not one over
    // each window row's maximum (three times the output's size, written and read back)
    // and another over those.
    const bool nested = fusion == Fusion::RecomputeShared && short_reduction(n) &&
                        consumers[i] == 1 && short_reduction(g.node(NodeId{a_reader[i]}));
    const bool must =
        n.op == Op::Input || g.is_output(id) || (!elementwise && !nested) || !fuse || repeated;
    stored_for_sharing[i] = !must && consumers[i] > 1 && !recompute;
    p.materialized[i] = must || stored_for_sharing[i];
    if (p.materialized[i]) cone[i] = 0;
  }
  // Library kernels (Custom) read buffers: their operands cannot be fused into them (but
  // an attention mask the backend computes from its index expression).
  std::vector<std::optional<Expr>> masks(count);
  for (uint32_t i = 0; i < count; ++i) {
    const Node& n = g.node(NodeId{i});
    if (!p.needed[i] || p.canonical[i].value != i || n.op != Op::Custom) continue;
    if (computed_masks) masks[i] = computed_mask(g, n);
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      if (masks[i] && j == 3) continue;
      const uint32_t s = p.canon(n.inputs[j].source).value;
      p.materialized[s] = true;
      stored_for_sharing[s] = false;
    }
  }
  if (fuse) fuse_shared_within_one_kernel(g, p, stored_for_sharing);
  // One kernel per materialised non-input node; collect what it reads.
  for (uint32_t i = 0; i < count; ++i) {
    if (!p.materialized[i] || g.node(NodeId{i}).op == Op::Input) continue;
    Kernel k;
    k.root = NodeId{i};
    k.computed_mask = std::move(masks[i]);
    std::vector<NodeId> stack{k.root};
    std::vector<bool> visited(count, false);
    while (!stack.empty()) {
      const NodeId n = stack.back();
      stack.pop_back();
      for (const Edge& e : g.node(n).inputs) {
        const NodeId s = p.canon(e.source);
        if (visited[s.value]) continue;
        visited[s.value] = true;
        if (p.materialized[s.value]) {
          k.reads.push_back(s);
        } else {
          ++k.fused;
          stack.push_back(s);
        }
      }
    }
    p.fused_ops += k.fused;
    p.kernels.push_back(std::move(k));
  }
  issue_collectives_early(g, p);
  return p;
}

std::string KernelPlan::to_text(const Graph& g) const {
  std::ostringstream os;
  for (size_t k = 0; k < kernels.size(); ++k) {
    const Kernel& kn = kernels[k];
    const Node& n = g.node(kn.root);
    os << "kernel " << k << ": %" << kn.root.value << " " << op_name(n.op) << " "
       << dtype_name(n.dtype) << to_string(n.shape) << " fuses " << kn.fused << " ops, reads";
    for (NodeId r : kn.reads) os << " %" << r.value;
    os << '\n';
  }
  return os.str();
}

}  // namespace luminal::compiler
