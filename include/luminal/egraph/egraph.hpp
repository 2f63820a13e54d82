// The e-graph: hash-consed e-nodes grouped into e-classes by a union-find, with
// deferred rebuilding (egg): unions only record work; rebuild() restores congruence
// (equal children => same class) and the hashcons, and re-runs analyses upward.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "luminal/egraph/ids.hpp"

namespace luminal::eg {

class Analysis;

/// A node as passed in and out: operator, attributes, children.
struct ENode {
  Symbol op;
  AttrList attrs;
  std::vector<ClassId> children;
  bool operator==(const ENode&) const = default;
};

/// Counters kept by the e-graph.
struct EGraphStats {
  uint64_t nodes_added = 0;      // add() calls that created a node
  uint64_t lookups = 0;          // add() calls in total
  uint64_t unions = 0;           // unions that merged two classes
  uint64_t rebuild_repairs = 0;  // parent nodes re-canonicalised in rebuild
};

class EGraph {
 public:
  EGraph();
  ~EGraph();
  EGraph(const EGraph&) = delete;
  EGraph& operator=(const EGraph&) = delete;

  /// Installs an analysis (before the first add). The e-graph owns it.
  void set_analysis(std::unique_ptr<Analysis> analysis);
  Analysis* analysis() const { return analysis_.get(); }

  /// Adds a node (children canonicalised); returns the class of an equal existing node
  /// or of a new singleton class.
  ClassId add(Symbol op, AttrList attrs, std::span<const ClassId> children);
  ClassId add(const ENode& n) { return add(n.op, n.attrs, n.children); }
  /// The class of a node if it is present (after canonicalising children).
  std::optional<ClassId> lookup(Symbol op, AttrList attrs, std::span<const ClassId> children) const;

  /// Records that two classes are equal; returns false if they already were.
  bool merge(ClassId a, ClassId b);
  /// Restores the invariants after merges. Returns the number of repairs.
  size_t rebuild();
  bool clean() const { return pending_.empty() && analysis_pending_.empty(); }

  ClassId find(ClassId c) const;
  bool equivalent(ClassId a, ClassId b) const { return find(a) == find(b); }

  // --- inspection (valid after rebuild) ---------------------------------------------
  /// Canonical class ids, ascending.
  std::vector<ClassId> classes() const;
  size_t num_classes() const { return live_classes_; }
  /// Distinct canonical e-nodes.
  size_t num_nodes() const { return hashcons_live_; }
  /// The e-nodes of a class (canonical children).
  std::vector<ENode> nodes(ClassId c) const;
  /// Node indices of a class, for fast iteration (see node_op / node_children).
  std::span<const uint32_t> node_ids(ClassId c) const;
  Symbol node_op(uint32_t n) const { return recs_[n].op; }
  AttrList node_attrs(uint32_t n) const { return recs_[n].attrs; }
  std::span<const ClassId> node_children(uint32_t n) const {
    return {pool_.data() + recs_[n].child_begin, recs_[n].child_count};
  }
  ENode node(uint32_t n) const;
  const EGraphStats& stats() const { return stats_; }

  /// Throws InternalError if a hashcons, congruence or parent invariant is broken.
  void check_invariants() const;

  /// Text and Graphviz dumps.
  std::string to_text() const;
  std::string to_dot() const;

 private:
  struct NodeRec {
    Symbol op;
    AttrList attrs;
    uint32_t child_begin = 0;
    uint32_t child_count = 0;
    ClassId eclass;  // the class the node was added to (find() it)
  };
  struct ClassRec {
    std::vector<uint32_t> nodes;
    std::vector<uint32_t> parents;  // nodes that have this class as a child
  };

  uint64_t hash_node(uint32_t n) const;
  uint64_t hash_parts(Symbol op, AttrList attrs, std::span<const ClassId> children) const;
  bool same_content(uint32_t n, Symbol op, AttrList attrs, std::span<const ClassId> children) const;
  // Hashcons: open addressing over node indices; tombstones on erase.
  int64_t hc_find(Symbol op, AttrList attrs, std::span<const ClassId> children, uint64_t h) const;
  void hc_insert(uint32_t n, uint64_t h);
  void hc_erase(uint32_t n);
  void hc_grow();
  void canonicalize(uint32_t n);
  void repair(ClassId c);
  void dedupe_nodes(ClassId c);

  mutable std::vector<uint32_t> uf_;  // union-find parents (path compression in find)
  std::vector<uint32_t> size_;        // union by size
  std::vector<ClassRec> classes_;
  std::vector<NodeRec> recs_;
  std::vector<ClassId> pool_;    // children of all nodes
  std::vector<uint64_t> slots_;  // hashcons: (hash tag << 32) | node + 1; 0 empty, 1 tomb
  size_t hashcons_live_ = 0, hashcons_used_ = 0, live_classes_ = 0;
  std::vector<ClassId> pending_;            // classes whose parents need repair
  std::vector<uint32_t> analysis_pending_;  // nodes whose class data may change
  std::vector<ClassId> stale_classes_;      // classes listing a node that congruence made stale
  std::unique_ptr<Analysis> analysis_;
  EGraphStats stats_;
};

}  // namespace luminal::eg
