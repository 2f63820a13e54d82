// Extraction: choosing one e-node per e-class to form a term.
//
// - extract_greedy: bottom-up fixed point of tree cost (node cost + children's costs,
//   a shared child counted at each use); optimal for tree cost, and handles cycles.
// - extract_dag: greedy with DAG cost — each chosen class counted once, so sharing is
//   rewarded (the cost of a kernel graph, where a value computed once is reused).
// - sample_extractions: random valid alternatives ("genomes") for search, mutated from
//   the best and deduplicated.
// Every extraction is acyclic and reaches from the root only classes it chose for.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "luminal/egraph/egraph.hpp"

namespace luminal::eg {

/// The cost of one e-node on its own (not counting children); must be positive.
using CostFn = std::function<double(const EGraph& g, uint32_t node)>;

/// A cost of 1 per node: the term size.
double node_count_cost(const EGraph& g, uint32_t node);

struct Extraction {
  ClassId root;
  /// Canonical class -> chosen node index, for every class reachable from the root.
  std::unordered_map<uint32_t, uint32_t> choice;
  uint32_t node_for(ClassId c) const { return choice.at(c.v); }
};

/// How children's costs combine with a node's own: Sum is tree cost; Max is the cost
/// of the most expensive path, which stays finite and exact in deep DAGs where a value
/// feeds many consumers (tree cost there grows exponentially and drowns differences).
enum class CostCombine { Sum, Max };

Extraction extract_greedy(const EGraph& g, ClassId root, const CostFn& cost,
                          CostCombine combine = CostCombine::Sum);
/// The same for several roots from one choice table (so what they share stays shared): the
/// classes any of them reaches; `root` is the first. One pass over the e-graph, however
/// many roots (a decoding graph has one per layer's cache).
Extraction extract_greedy(const EGraph& g, std::span<const ClassId> roots, const CostFn& cost,
                          CostCombine combine = CostCombine::Sum);
Extraction extract_dag(const EGraph& g, ClassId root, const CostFn& cost);

/// Sum over the term tree (shared subterms counted at each use).
double tree_cost(const EGraph& g, const Extraction& x, const CostFn& cost);
/// Sum over the distinct classes the term uses.
double dag_cost(const EGraph& g, const Extraction& x, const CostFn& cost);
/// True if following choices from the root never revisits a class on the current path.
bool is_acyclic(const EGraph& g, const Extraction& x);
/// The term as an S-expression (shared subterms repeated).
std::string term_string(const EGraph& g, const Extraction& x);

/// Up to `count` distinct valid extractions: the DAG-greedy one first, then random
/// mutations of it (each a different choice in one or more reachable classes).
std::vector<Extraction> sample_extractions(const EGraph& g, ClassId root, const CostFn& cost,
                                           size_t count, uint64_t seed);

}  // namespace luminal::eg
