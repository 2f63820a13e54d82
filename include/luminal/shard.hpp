// Sharding as a graph transform: a graph written for one device, whose inputs are
// annotated with how they lie over the ranks of a tensor-parallel group (whole on every
// rank, or cut along a dim), becomes each rank's graph. Placements follow the ops (an
// elementwise op of parts is a part; a sum over the cut dim is a partial sum, summed over
// the ranks only where something needs the whole value), and collectives are inserted
// where an op cannot take what it is given: an all-reduce makes a partial sum whole, an
// all-gather a cut value. A product of a row-cut weight and a column-cut one (Megatron's
// MLP and attention) so costs one all-reduce; the compiler's rules may merge more.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "luminal/collective.hpp"
#include "luminal/graph.hpp"
#include "luminal/tensor.hpp"

namespace luminal {

/// How a value lies over the ranks.
struct Placement {
  enum class Kind : uint8_t {
    Replicated,  // whole on every rank
    Split,       // cut along `axis` into equal parts, rank r holding part r
    Partial,     // of the whole shape on every rank; the value is the sum over the ranks
  };
  Kind kind = Kind::Replicated;
  int axis = 0;  // Split
  static Placement replicated() { return {}; }
  static Placement split(int axis) { return {Kind::Split, axis}; }
  static Placement partial() { return {Kind::Partial, 0}; }
  bool operator==(const Placement&) const = default;
};

/// One rank's graph, made by shard().
class ShardedGraph {
 public:
  Graph& graph() { return *graph_; }
  /// This rank's tensor for a node of the whole graph: its part of an input (to set), the
  /// whole value of an output (to read).
  Tensor tensor(const Tensor& whole) const;
  /// Where a node of the whole graph lies here.
  Placement placement(const Tensor& whole) const;
  /// Collectives the pass inserted.
  size_t collectives() const { return collectives_; }

  // Built by shard().
  struct Local {
    NodeId id;  // holds the value row-major over its shape here (a split dim cut)
    Placement placement;
  };
  ShardedGraph(std::unique_ptr<Graph> graph, std::vector<Local> local, size_t collectives)
      : graph_(std::move(graph)), local_(std::move(local)), collectives_(collectives) {}

 private:
  std::unique_ptr<Graph> graph_;
  std::vector<Local> local_;  // by node of the whole graph
  size_t collectives_ = 0;
  const Local& local(const Tensor& whole) const;
};

/// This rank's (comm's) graph of `whole`: `inputs` placed as given, every other input
/// replicated. A cut input's size along its axis must divide by the ranks; its data, where
/// `whole` has them, are cut to this rank's part. Dims bound in `whole` are bound here.
/// Every output of `whole` is whole here, except those of `parts` that are cut (a KV
/// cache fed back as a cut input): each rank reads its part. Ops the pass has no rule
/// for read whole values.
ShardedGraph shard(const Graph& whole, const std::vector<std::pair<Tensor, Placement>>& inputs,
                   const std::shared_ptr<Communicator>& comm,
                   const std::vector<Tensor>& parts = {});

}  // namespace luminal
