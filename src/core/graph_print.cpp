// Text and Graphviz renderings of a graph.
#include <sstream>

#include "luminal/dot.hpp"
#include "luminal/graph.hpp"

namespace luminal {
namespace {

std::string type_of(const Node& n) {
  return std::string(dtype_name(n.dtype)) + to_string(n.shape);
}

std::string attributes(const Node& n) {
  std::ostringstream os;
  switch (n.op) {
    case Op::Input:
      os << " \"" << n.name << "\"";
      if (n.quant != kPlainStorage) os << " as " << ggml_type_name(n.quant);
      break;
    case Op::Constant:
      if (n.value.is_int) {
        os << ' ' << n.value.i;
      } else {
        os << ' ' << n.value.f;
      }
      break;
    case Op::Iota:
      os << " {" << n.iota << "}";
      break;
    default:
      break;
  }
  return os.str();
}

// Attributes printed after the inputs.
std::string trailing_attributes(const Node& n) {
  if (n.op == Op::SumReduce || n.op == Op::MaxReduce) return " axis=" + std::to_string(n.axis);
  return "";
}

// An edge whose view is the producer's own row-major layout prints as just %id.
std::string edge_text(const Graph& g, const Edge& e) {
  std::string s = "%" + std::to_string(e.source.value);
  if (!(e.view == View::contiguous(g.node(e.source).shape))) s += e.view.to_string();
  return s;
}

}  // namespace

std::string Graph::to_text() const {
  std::ostringstream os;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    os << '%' << i << " = " << op_name(n.op) << attributes(n);
    if (!n.inputs.empty()) {
      os << '(';
      for (size_t k = 0; k < n.inputs.size(); ++k)
        os << (k ? ", " : "") << edge_text(*this, n.inputs[k]);
      os << ')';
    }
    os << trailing_attributes(n) << " : " << type_of(n);
    if (is_output(NodeId{static_cast<uint32_t>(i)})) os << "  [output]";
    os << '\n';
  }
  return os.str();
}

std::string Graph::to_dot() const {
  std::ostringstream os;
  os << "digraph luminal {\n  node [shape=box, fontname=\"monospace\"];\n";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    const std::string head = "%" + std::to_string(i) + " " + std::string(op_name(n.op)) +
                             attributes(n) + trailing_attributes(n);
    os << "  n" << i << " [label=\"" << dot_escape(head) << "\\n"
       << dot_escape(type_of(n)) << "\""
       << (is_output(NodeId{static_cast<uint32_t>(i)}) ? ", style=bold" : "") << "];\n";
    for (const Edge& e : n.inputs) {
      os << "  n" << e.source.value << " -> n" << i;
      if (!(e.view == View::contiguous(node(e.source).shape)))
        os << " [label=\"" << dot_escape(e.view.to_string()) << "\"]";
      os << ";\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace luminal
