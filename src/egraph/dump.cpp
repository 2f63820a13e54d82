// Text and Graphviz dumps of an e-graph.
#include <sstream>

#include "luminal/dot.hpp"
#include "luminal/egraph/egraph.hpp"

namespace luminal::eg {
namespace {

std::string node_label(const EGraph& g, uint32_t n, bool with_children) {
  std::ostringstream os;
  os << g.node_op(n).name();
  const auto& attrs = g.node_attrs(n).get();
  const auto children = g.node_children(n);
  if (attrs.empty() && (children.empty() || !with_children)) return os.str();
  os << '(';
  bool first = true;
  for (const Attr& a : attrs) {
    os << (first ? "" : ", ") << a.to_string();
    first = false;
  }
  if (with_children)
    for (ClassId c : children) {
      os << (first ? "" : ", ") << 'e' << g.find(c).v;
      first = false;
    }
  os << ')';
  return os.str();
}

}  // namespace

std::string EGraph::to_text() const {
  std::ostringstream os;
  os << "; " << num_classes() << " e-classes, " << num_nodes() << " e-nodes\n";
  for (ClassId c : classes()) {
    os << 'e' << c.v << " =";
    bool first = true;
    for (uint32_t n : node_ids(c)) {
      os << (first ? " " : " | ") << node_label(*this, n, true);
      first = false;
    }
    os << '\n';
  }
  return os.str();
}

std::string EGraph::to_dot() const {
  std::ostringstream os;
  os << "digraph egraph {\n  compound=true;\n  node [shape=box, fontname=\"monospace\"];\n";
  for (ClassId c : classes()) {
    os << "  subgraph cluster_" << c.v << " {\n    label=\"e" << c.v << "\"; style=dashed;\n";
    for (uint32_t n : node_ids(c))
      os << "    n" << n << " [label=\"" << dot_escape(node_label(*this, n, false)) << "\"];\n";
    os << "  }\n";
  }
  // An edge from a node to the first node of each child class, clipped at the cluster.
  for (ClassId c : classes())
    for (uint32_t n : node_ids(c))
      for (ClassId ch : node_children(n)) {
        const ClassId k = find(ch);
        const auto targets = node_ids(k);
        if (targets.empty()) continue;
        os << "  n" << n << " -> n" << targets[0] << " [lhead=cluster_" << k.v << "];\n";
      }
  os << "}\n";
  return os.str();
}

}  // namespace luminal::eg
