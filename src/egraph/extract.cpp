// Greedy, DAG-aware and sampled extraction.
#include "luminal/egraph/extract.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <sstream>

#include "luminal/error.hpp"

namespace luminal::eg {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Keeps only the classes reachable from the roots through the chosen nodes.
Extraction reachable(const EGraph& g, std::span<const ClassId> roots,
                     const std::vector<uint32_t>& best) {
  Extraction x;
  LUM_ASSERT(!roots.empty()) << "extract: no root";
  x.root = g.find(roots[0]);
  std::vector<ClassId> stack;
  for (ClassId r : roots) stack.push_back(g.find(r));
  while (!stack.empty()) {
    const ClassId c = stack.back();
    stack.pop_back();
    if (x.choice.count(c.v)) continue;
    LUM_ASSERT(best[c.v] != UINT32_MAX) << "extract: class " << c.v << " has no finite-cost node";
    x.choice[c.v] = best[c.v];
    for (ClassId ch : g.node_children(best[c.v])) stack.push_back(g.find(ch));
  }
  return x;
}

}  // namespace

double node_count_cost(const EGraph&, uint32_t) {
  return 1.0;
}

namespace {

// The cheapest node of every class by tree cost (UINT32_MAX where none is finite).
std::vector<uint32_t> greedy_choices(const EGraph& g, const CostFn& cost,
                                     CostCombine combine = CostCombine::Sum) {
  LUM_CHECK(g.clean()) << "extract: rebuild() the e-graph first";
  const auto classes = g.classes();
  const size_t n = classes.empty() ? 0 : classes.back().v + 1;
  std::vector<double> best_cost(n, kInf);
  std::vector<uint32_t> best(n, UINT32_MAX);
  // Each node's own cost, asked once: the fixed point below sweeps every node until
  // nothing changes, and a backend's cost function is not free.
  uint32_t nodes = 0;
  for (ClassId c : classes)
    for (uint32_t node : g.node_ids(c)) nodes = std::max(nodes, node + 1);
  std::vector<double> own_cost(nodes, std::numeric_limits<double>::quiet_NaN());
  // Fixed point: a class's cost only drops, and only finite children count, so cycles
  // simply never become the cheapest way.
  for (bool changed = true; changed;) {
    changed = false;
    for (ClassId c : classes) {
      for (uint32_t node : g.node_ids(c)) {
        if (std::isnan(own_cost[node])) own_cost[node] = cost(g, node);
        const double own = own_cost[node];
        double total = own;
        for (ClassId ch : g.node_children(node)) {
          const double k = best_cost[g.find(ch).v];
          total = combine == CostCombine::Sum ? total + k : std::max(total, own + k);
        }
        if (total < best_cost[c.v]) {
          best_cost[c.v] = total;
          best[c.v] = node;
          changed = true;
        }
      }
    }
  }
  return best;
}

}  // namespace

Extraction extract_greedy(const EGraph& g, ClassId root, const CostFn& cost, CostCombine combine) {
  return extract_greedy(g, std::span(&root, 1), cost, combine);
}

Extraction extract_greedy(const EGraph& g, std::span<const ClassId> roots, const CostFn& cost,
                          CostCombine combine) {
  return reachable(g, roots, greedy_choices(g, cost, combine));
}

Extraction extract_dag(const EGraph& g, ClassId root, const CostFn& cost) {
  LUM_CHECK(g.clean()) << "extract: rebuild() the e-graph first";
  const auto classes = g.classes();
  const size_t n = classes.empty() ? 0 : classes.back().v + 1;
  // For each class: the set of classes its best term uses, and that set's summed cost.
  std::vector<std::set<uint32_t>> uses(n);
  std::vector<double> best_cost(n, kInf);
  std::vector<uint32_t> best(n, UINT32_MAX);
  for (bool changed = true; changed;) {
    changed = false;
    for (ClassId c : classes) {
      for (uint32_t node : g.node_ids(c)) {
        std::set<uint32_t> set{c.v};
        bool finite = true;
        for (ClassId ch : g.node_children(node)) {
          const uint32_t k = g.find(ch).v;
          if (best[k] == UINT32_MAX || uses[k].count(c.v)) {
            finite = false;  // unknown yet, or would use this class again (a cycle)
            break;
          }
          set.insert(uses[k].begin(), uses[k].end());
        }
        if (!finite) continue;
        double total = 0;
        for (uint32_t k : set) total += k == c.v ? cost(g, node) : cost(g, best[k]);
        if (total < best_cost[c.v] - 1e-12) {
          best_cost[c.v] = total;
          best[c.v] = node;
          uses[c.v] = std::move(set);
          changed = true;
        }
      }
    }
  }
  Extraction x = reachable(g, std::span(&root, 1), best);
  LUM_ASSERT(is_acyclic(g, x)) << "extract_dag produced a cycle";
  return x;
}

double tree_cost(const EGraph& g, const Extraction& x, const CostFn& cost) {
  std::function<double(ClassId)> walk = [&](ClassId c) {
    const uint32_t node = x.node_for(g.find(c));
    double total = cost(g, node);
    for (ClassId ch : g.node_children(node)) total += walk(ch);
    return total;
  };
  return walk(x.root);
}

double dag_cost(const EGraph& g, const Extraction& x, const CostFn& cost) {
  double total = 0;
  for (const auto& [cls, node] : x.choice) total += cost(g, node);
  return total;
}

bool is_acyclic(const EGraph& g, const Extraction& x) {
  enum : uint8_t { kNew, kOpen, kDone };
  std::unordered_map<uint32_t, uint8_t> state;
  std::function<bool(ClassId)> visit = [&](ClassId c) {
    c = g.find(c);
    auto& s = state[c.v];
    if (s == kOpen) return false;
    if (s == kDone) return true;
    s = kOpen;
    auto it = x.choice.find(c.v);
    if (it == x.choice.end()) return false;
    for (ClassId ch : g.node_children(it->second))
      if (!visit(ch)) return false;
    state[c.v] = kDone;
    return true;
  };
  return visit(x.root);
}

std::string term_string(const EGraph& g, const Extraction& x) {
  std::ostringstream os;
  std::function<void(ClassId)> emit = [&](ClassId c) {
    const uint32_t node = x.node_for(g.find(c));
    const auto children = g.node_children(node);
    const auto& attrs = g.node_attrs(node).get();
    if (children.empty() && attrs.empty()) {
      os << g.node_op(node).name();
      return;
    }
    os << '(' << g.node_op(node).name();
    for (const Attr& a : attrs) os << ' ' << a.to_string();
    for (ClassId ch : children) {
      os << ' ';
      emit(ch);
    }
    os << ')';
  };
  emit(x.root);
  return os.str();
}

std::vector<Extraction> sample_extractions(const EGraph& g, ClassId root, const CostFn& cost,
                                           size_t count, uint64_t seed) {
  std::vector<Extraction> out;
  if (count == 0) return out;
  const Extraction base = extract_dag(g, root, cost);
  out.push_back(base);
  std::set<std::vector<std::pair<uint32_t, uint32_t>>> seen;
  auto key = [](const Extraction& x) {
    std::vector<std::pair<uint32_t, uint32_t>> k(x.choice.begin(), x.choice.end());
    std::sort(k.begin(), k.end());
    return k;
  };
  seen.insert(key(base));
  // The greedy tree choice is a safe fallback for classes a mutation newly reaches.
  const std::vector<uint32_t> fallback = greedy_choices(g, cost);
  std::mt19937_64 rng(seed);
  const size_t max_attempts = count * 20 + 100;
  for (size_t attempt = 0; attempt < max_attempts && out.size() < count; ++attempt) {
    // Genome: the base choices, with a random node in 1-3 reachable classes.
    std::unordered_map<uint32_t, uint32_t> genome = out[rng() % out.size()].choice;
    std::vector<uint32_t> classes;
    for (const auto& [c, n] : genome) classes.push_back(c);
    std::sort(classes.begin(), classes.end());
    const size_t flips = 1 + rng() % 3;
    for (size_t f = 0; f < flips; ++f) {
      const uint32_t c = classes[rng() % classes.size()];
      const auto nodes = g.node_ids(ClassId{c});
      genome[c] = nodes[rng() % nodes.size()];
    }
    // Re-derive the reachable set, filling newly reached classes from the fallback.
    Extraction x;
    x.root = g.find(root);
    std::vector<ClassId> stack{x.root};
    bool complete = true;
    while (!stack.empty() && complete) {
      const ClassId c = stack.back();
      stack.pop_back();
      if (x.choice.count(c.v)) continue;
      auto it = genome.find(c.v);
      const uint32_t node = it != genome.end() ? it->second : fallback[c.v];
      complete = node != UINT32_MAX;
      if (!complete) break;
      x.choice[c.v] = node;
      for (ClassId ch : g.node_children(node)) stack.push_back(g.find(ch));
    }
    if (!complete || !is_acyclic(g, x)) continue;
    if (!seen.insert(key(x)).second) continue;
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace luminal::eg
