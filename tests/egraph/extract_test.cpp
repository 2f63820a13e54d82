// Extraction against brute force on small e-graphs: the greedy extractor must reach
// the minimum tree cost, every extraction must be a valid term equivalent to the input
// (checked by evaluating it), and DAG extraction must exploit sharing.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "egraph/arith.hpp"
#include "luminal/egraph/scheduler.hpp"

namespace luminal::eg {
namespace {

using namespace testing;

double weighted_cost(const EGraph& g, uint32_t n) {
  const std::string_view op = g.node_op(n).name();
  if (op == "Mul") return 3;
  if (op == "Add") return 2;
  if (op == "Neg") return 4;
  if (op == "Big2") return 1;
  if (op == "Small") return 5;
  if (op == "S") return 3;
  return 1;
}

struct BruteForce {
  double best_tree = std::numeric_limits<double>::infinity();
  double best_dag = std::numeric_limits<double>::infinity();
  size_t terms = 0;
};

// Enumerates every choice of node for every reachable class, keeping acyclic terms.
BruteForce brute_force(const EGraph& g, ClassId root, const CostFn& cost) {
  BruteForce out;
  Extraction x;
  x.root = g.find(root);
  std::function<void()> go = [&] {
    // The first reachable class without a choice, in DFS order.
    std::vector<ClassId> stack{x.root};
    std::unordered_map<uint32_t, bool> seen;
    ClassId open{};
    while (!stack.empty() && !open.valid()) {
      const ClassId c = g.find(stack.back());
      stack.pop_back();
      if (seen[c.v]) continue;
      seen[c.v] = true;
      auto it = x.choice.find(c.v);
      if (it == x.choice.end()) {
        open = c;
        break;
      }
      for (ClassId ch : g.node_children(it->second)) stack.push_back(ch);
    }
    if (!open.valid()) {
      // Drop choices no longer reachable so the DAG cost counts only the term.
      Extraction term;
      term.root = x.root;
      for (const auto& [c, n] : x.choice)
        if (seen.count(c)) term.choice[c] = n;
      if (!is_acyclic(g, term)) return;
      ++out.terms;
      out.best_tree = std::min(out.best_tree, tree_cost(g, term, cost));
      out.best_dag = std::min(out.best_dag, dag_cost(g, term, cost));
      return;
    }
    for (uint32_t n : g.node_ids(open)) {
      x.choice[open.v] = n;
      go();
      x.choice.erase(open.v);
    }
  };
  go();
  return out;
}

ClassId random_term(EGraph& g, std::mt19937& rng, int depth) {
  if (depth == 0 || rng() % 4 == 0) {
    switch (rng() % 3) {
      case 0:
        return var(g, "a");
      case 1:
        return var(g, "b");
      default:
        return cnst(g, static_cast<double>(rng() % 3));
    }
  }
  switch (rng() % 3) {
    case 0:
      return op(g, "Add", {random_term(g, rng, depth - 1), random_term(g, rng, depth - 1)});
    case 1:
      return op(g, "Mul", {random_term(g, rng, depth - 1), random_term(g, rng, depth - 1)});
    default:
      return op(g, "Neg", {random_term(g, rng, depth - 1)});
  }
}

TEST(Extract, GreedyIsTreeOptimalAndEquivalentOnRandomEGraphs) {
  Functions fns = arith_functions();
  const auto rules = parse_rules(R"(
    (ruleset small
      (rewrite add-comm (Add ?a ?b) (Add ?b ?a))
      (rewrite mul-one (Mul ?a (Const 1)) ?a)
      (rewrite add-zero (Add ?a (Const 0)) ?a)
      (rewrite double (Add ?a ?a) (Mul ?a (Const 2.0)))
      (rewrite neg-neg (Neg (Neg ?a)) ?a)
      (rewrite distribute (Mul ?a (Add ?b ?c)) (Add (Mul ?a ?b) (Mul ?a ?c)))))",
                                 "small.rules", fns);
  std::mt19937 rng(17);
  int checked = 0;
  for (int trial = 0; trial < 60; ++trial) {
    auto g = arith_graph();
    const ClassId root = random_term(*g, rng, 3);
    g->rebuild();  // constant folding may have merged classes
    // The original term's value, before any rewriting.
    const Extraction original = extract_greedy(*g, root, weighted_cost);
    const std::map<std::string, double> vars{{"a", 1.7}, {"b", -0.6}};
    const double want = evaluate(*g, original, root, vars);
    run_rules(*g, {&rules[0]}, fns, {.max_iterations = 3, .max_nodes = 400});
    const BruteForce bf = brute_force(*g, root, weighted_cost);
    if (bf.terms > 200000) continue;
    const Extraction greedy = extract_greedy(*g, root, weighted_cost);
    const Extraction dag = extract_dag(*g, root, weighted_cost);
    ASSERT_TRUE(is_acyclic(*g, greedy));
    ASSERT_TRUE(is_acyclic(*g, dag));
    EXPECT_DOUBLE_EQ(tree_cost(*g, greedy, weighted_cost), bf.best_tree) << term_string(*g, greedy);
    EXPECT_GE(dag_cost(*g, dag, weighted_cost), bf.best_dag - 1e-9);
    EXPECT_NEAR(evaluate(*g, greedy, root, vars), want, 1e-9 * (1 + std::fabs(want)))
        << term_string(*g, greedy);
    EXPECT_NEAR(evaluate(*g, dag, root, vars), want, 1e-9 * (1 + std::fabs(want)))
        << term_string(*g, dag);
    for (const Extraction& s : sample_extractions(*g, root, weighted_cost, 8, trial)) {
      ASSERT_TRUE(is_acyclic(*g, s));
      EXPECT_NEAR(evaluate(*g, s, root, vars), want, 1e-9 * (1 + std::fabs(want)))
          << term_string(*g, s);
    }
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

TEST(Extract, DagExtractionSharesSubterms) {
  // C = Big2(S, S) | Small. By tree cost Small (5) beats Big2 (1 + 3 + 3); counting the
  // shared S once, Big2 costs 1 + 3 = 4.
  EGraph g;
  const ClassId s = g.add(sym("S"), AttrList{}, {});
  const ClassId c = op(g, "Big2", {s, s});
  g.merge(c, g.add(sym("Small"), AttrList{}, {}));
  g.rebuild();
  const ClassId root = op(g, "Root", {c});
  const BruteForce bf = brute_force(g, root, weighted_cost);
  const Extraction tree = extract_greedy(g, root, weighted_cost);
  const Extraction dag = extract_dag(g, root, weighted_cost);
  EXPECT_EQ(term_string(g, tree), "(Root Small)");
  EXPECT_EQ(term_string(g, dag), "(Root (Big2 S S))");
  EXPECT_DOUBLE_EQ(dag_cost(g, dag, weighted_cost), bf.best_dag);
  EXPECT_LT(dag_cost(g, dag, weighted_cost), dag_cost(g, tree, weighted_cost));
}

TEST(Extract, HandlesCyclesAndSamplesDistinctValidTerms) {
  // x = Neg(Neg(x)) makes a cycle; extraction must still pick the leaf.
  auto g = arith_graph();
  const ClassId a = var(*g, "a");
  const ClassId nn = op(*g, "Neg", {op(*g, "Neg", {a})});
  g->merge(a, nn);
  const ClassId root = op(*g, "Add", {a, op(*g, "Mul", {a, cnst(*g, 1)})});
  g->merge(root, op(*g, "Mul", {a, cnst(*g, 2)}));
  g->rebuild();
  const Extraction x = extract_greedy(*g, root, node_count_cost);
  EXPECT_TRUE(is_acyclic(*g, x));
  const auto samples = sample_extractions(*g, root, node_count_cost, 10, 1);
  EXPECT_EQ(samples.size(), 2u);  // Add(...) or Mul(a, 2); Neg(Neg(a)) would be a cycle
  std::set<std::string> distinct;
  for (const Extraction& e : samples) {
    EXPECT_TRUE(is_acyclic(*g, e));
    EXPECT_NEAR(evaluate(*g, e, root, {{"a", 3.0}}), 6.0, 1e-12) << term_string(*g, e);
    distinct.insert(term_string(*g, e));
  }
  EXPECT_EQ(distinct.size(), samples.size());
}

}  // namespace
}  // namespace luminal::eg
