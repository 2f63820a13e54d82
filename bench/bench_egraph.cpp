// E-graph throughput.
//   BM_AcClosure/n: a0 + ... + a(n-1) saturated under associativity and commutativity
//     to its known closure (3^n - 2^(n+1) + 1 + n e-nodes); reports e-node insertions
//     per second (add() calls, hits included) and new e-nodes per second.
//   BM_TransformerLayer: a ~3,000-node synthetic transformer layer (norms, attention,
//     MLP over an arithmetic op set) saturated under the simplification rules.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>

#include "luminal/egraph/analysis.hpp"
#include "luminal/egraph/rules.hpp"
#include "luminal/egraph/scheduler.hpp"

namespace {

using namespace luminal::eg;

Functions functions() {
  Functions f;
  f.predicates["positive"] = [](const EGraph&, std::span<const Value>) { return false; };
  f.predicates["nonzero"] = [](const EGraph&, std::span<const Value>) { return false; };
  return f;
}

const RuleSet& rule_set(const std::string& name) {
  static const auto sets = load_embedded_rules("arith", functions());
  for (const RuleSet& s : sets)
    if (s.name == name) return s;
  throw std::runtime_error(name);
}

ClassId leaf(EGraph& g, const std::string& name) {
  return g.add(Symbol::of("Var"), AttrList::of({Attr::of_str(name)}), {});
}

ClassId node(EGraph& g, const char* op, std::vector<ClassId> ch) {
  return g.add(Symbol::of(op), AttrList{}, ch);
}

void BM_AcClosure(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  RuleSet add_rules;
  for (const Rule& r : rule_set("arith-ac").rules)
    if (r.name.rfind("add-", 0) == 0) add_rules.rules.push_back(r);
  uint64_t lookups = 0, added = 0, nodes = 0, unions = 0, repairs = 0;
  double rebuild = 0;
  for (auto _ : state) {
    EGraph g;
    ClassId acc = leaf(g, "a0");
    for (int i = 1; i < n; ++i) acc = node(g, "Add", {acc, leaf(g, "a" + std::to_string(i))});
    const RunReport r =
        run_rules(g, {&add_rules}, functions(),
                  {.max_iterations = 1000, .max_nodes = 10'000'000, .max_seconds = 600});
    for (const IterationStats& it : r.iterations) {
      rebuild += it.rebuild_seconds;
      unions += it.unions;
      repairs += it.repairs;
    }
    lookups += g.stats().lookups;
    added += g.stats().nodes_added;
    nodes = g.num_nodes();
  }
  state.counters["enodes"] = static_cast<double>(nodes);
  state.counters["insertions/s"] =
      benchmark::Counter(static_cast<double>(lookups), benchmark::Counter::kIsRate);
  state.counters["new_enodes/s"] =
      benchmark::Counter(static_cast<double>(added), benchmark::Counter::kIsRate);
  // Rebuild cost per union and per repaired parent: flat across n means linear in the work.
  state.counters["rebuild_ns/union"] =
      rebuild * 1e9 / static_cast<double>(std::max<uint64_t>(unions, 1));
  state.counters["rebuild_ns/repair"] =
      rebuild * 1e9 / static_cast<double>(std::max<uint64_t>(repairs, 1));
}
BENCHMARK(BM_AcClosure)->DenseRange(6, 10, 2)->Unit(benchmark::kMillisecond);

// One pre-norm transformer layer over hidden size `h`, written out scalar-wise as the
// arithmetic ops a lowering produces, with the redundancies real graphs carry
// (x*1, x+0, double negation and reciprocal, log2(exp2(x))).
ClassId transformer_layer(EGraph& g, int h) {
  auto c = [&](double v) {
    return g.add(Symbol::of("Const"), AttrList::of({Attr::of_float(v)}), {});
  };
  std::vector<ClassId> x;
  for (int i = 0; i < h; ++i) x.push_back(leaf(g, "x" + std::to_string(i)));
  auto rms_norm = [&](const std::vector<ClassId>& v, const std::string& w) {
    ClassId ss = c(0);
    for (ClassId e : v) ss = node(g, "Add", {ss, node(g, "Mul", {e, e})});
    const ClassId inv = node(g, "Recip", {node(g, "Exp2", {node(g, "Log2", {ss})})});
    std::vector<ClassId> out;
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(node(g, "Mul", {node(g, "Mul", {v[i], inv}), leaf(g, w + std::to_string(i))}));
    return out;
  };
  auto linear = [&](const std::vector<ClassId>& v, const std::string& w, int outs) {
    std::vector<ClassId> out;
    for (int o = 0; o < outs; ++o) {
      ClassId acc = c(0);
      for (size_t i = 0; i < v.size(); ++i)
        acc = node(g, "Add",
                   {acc, node(g, "Mul",
                              {v[i], leaf(g, w + std::to_string(o) + "_" + std::to_string(i))})});
      out.push_back(node(g, "Mul", {acc, c(1)}));
    }
    return out;
  };
  const auto n1 = rms_norm(x, "g1_");
  const auto q = linear(n1, "wq", h), k = linear(n1, "wk", h), v = linear(n1, "wv", h);
  // Attention over a single position: softmax of one score is exp/sum of itself.
  ClassId score = c(0);
  for (int i = 0; i < h; ++i) score = node(g, "Add", {score, node(g, "Mul", {q[i], k[i]})});
  const ClassId e = node(g, "Exp2", {score});
  const ClassId p =
      node(g, "Mul", {e, node(g, "Recip", {node(g, "Recip", {node(g, "Recip", {e})})})});
  std::vector<ClassId> attn, resid;
  for (int i = 0; i < h; ++i) attn.push_back(node(g, "Mul", {p, v[i]}));
  const auto o = linear(attn, "wo", h);
  for (int i = 0; i < h; ++i)
    resid.push_back(node(g, "Add", {x[i], node(g, "Neg", {node(g, "Neg", {o[i]})})}));
  const auto n2 = rms_norm(resid, "g2_");
  const auto up = linear(n2, "wu", h);
  std::vector<ClassId> act;
  for (ClassId u : up)
    act.push_back(node(
        g, "Mul",
        {u, node(g, "Recip", {node(g, "Add", {c(1), node(g, "Exp2", {node(g, "Neg", {u})})})})}));
  const auto down = linear(act, "wd", h);
  ClassId out = c(0);
  for (int i = 0; i < h; ++i) out = node(g, "Add", {out, node(g, "Add", {resid[i], down[i]})});
  return out;
}

void BM_TransformerLayer(benchmark::State& state) {
  const RuleSet& simp = rule_set("arith-simplify");
  size_t before = 0, after = 0, iterations = 0;
  for (auto _ : state) {
    EGraph g;
    g.set_analysis(ConstantFolding::arithmetic(Symbol::of("Const")));
    transformer_layer(g, static_cast<int>(state.range(0)));
    g.rebuild();
    before = g.num_nodes();
    const RunReport r = run_rules(
        g, {&simp}, functions(), {.max_iterations = 30, .max_nodes = 2'000'000, .max_seconds = 60});
    after = g.num_nodes();
    iterations = r.iterations.size();
  }
  state.counters["enodes_before"] = static_cast<double>(before);
  state.counters["enodes_after"] = static_cast<double>(after);
  state.counters["iterations"] = static_cast<double>(iterations);
}
BENCHMARK(BM_TransformerLayer)->Arg(12)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
