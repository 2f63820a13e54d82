// E-graph core: hashcons, congruence, rebuild invariants, analyses.
#include <gtest/gtest.h>

#include <random>

#include "egraph/arith.hpp"

namespace luminal::eg {
namespace {

using namespace testing;

TEST(EGraph, HashconsSharesEqualNodes) {
  EGraph g;
  const ClassId a = var(g, "a"), b = var(g, "b");
  const ClassId x = op(g, "Add", {a, b});
  EXPECT_EQ(op(g, "Add", {a, b}), x);
  EXPECT_NE(op(g, "Add", {b, a}), x);
  EXPECT_EQ(g.num_nodes(), 4u);
  EXPECT_EQ(g.num_classes(), 4u);
  EXPECT_EQ(g.lookup(sym("Add"), AttrList{}, std::vector<ClassId>{a, b}), x);
  EXPECT_FALSE(g.lookup(sym("Mul"), AttrList{}, std::vector<ClassId>{a, b}));
}

TEST(EGraph, RebuildRestoresCongruence) {
  EGraph g;
  const ClassId a = var(g, "a"), b = var(g, "b");
  const ClassId fa = op(g, "F", {a}), fb = op(g, "F", {b});
  const ClassId gfa = op(g, "G", {fa}), gfb = op(g, "G", {fb});
  EXPECT_FALSE(g.equivalent(fa, fb));
  EXPECT_TRUE(g.merge(a, b));
  EXPECT_FALSE(g.merge(b, a));
  g.rebuild();
  EXPECT_TRUE(g.equivalent(fa, fb));
  EXPECT_TRUE(g.equivalent(gfa, gfb));  // congruence propagates upward
  EXPECT_EQ(g.num_classes(), 3u);
  EXPECT_EQ(g.num_nodes(), 4u);  // a, b, F(x), G(F(x)): duplicates collapsed
  g.check_invariants();
}

// Naive congruence closure over explicit terms: the independent reference.
struct Term {
  std::string op;
  std::vector<int> kids;
};

TEST(EGraph, RandomUnionsMatchNaiveCongruenceClosure) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    EGraph g;
    std::vector<Term> terms;
    std::vector<ClassId> ids;
    const char* ops[] = {"F", "G", "H"};
    for (int i = 0; i < 4; ++i) {
      terms.push_back({"v" + std::to_string(i), {}});
      ids.push_back(var(g, ("v" + std::to_string(i)).c_str()));
    }
    for (int i = 0; i < 40; ++i) {
      Term t{ops[rng() % 3], {}};
      const int arity = 1 + static_cast<int>(rng() % 2);
      for (int k = 0; k < arity; ++k) t.kids.push_back(static_cast<int>(rng() % terms.size()));
      std::vector<ClassId> ch;
      for (int k : t.kids) ch.push_back(ids[k]);
      ids.push_back(g.add(sym(t.op.c_str()), AttrList{}, ch));
      terms.push_back(t);
    }
    // Random unions, rebuilding at random points.
    std::vector<int> uf(terms.size());
    for (size_t i = 0; i < uf.size(); ++i) uf[i] = static_cast<int>(i);
    std::function<int(int)> find = [&](int x) { return uf[x] == x ? x : uf[x] = find(uf[x]); };
    for (int u = 0; u < 12; ++u) {
      const int x = static_cast<int>(rng() % terms.size()),
                y = static_cast<int>(rng() % terms.size());
      g.merge(ids[x], ids[y]);
      uf[find(x)] = find(y);
      if (rng() % 2) {
        g.rebuild();
        g.check_invariants();
      }
    }
    g.rebuild();
    g.check_invariants();
    // Close the reference: same op and equivalent children => equivalent.
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < terms.size(); ++i)
        for (size_t j = i + 1; j < terms.size(); ++j) {
          if (find(static_cast<int>(i)) == find(static_cast<int>(j))) continue;
          if (terms[i].op != terms[j].op || terms[i].kids.size() != terms[j].kids.size()) continue;
          bool same = !terms[i].kids.empty() || terms[i].op == terms[j].op;
          if (terms[i].kids.empty()) same = false;  // distinct variables stay distinct
          for (size_t k = 0; k < terms[i].kids.size() && same; ++k)
            same = find(terms[i].kids[k]) == find(terms[j].kids[k]);
          if (same) {
            uf[find(static_cast<int>(i))] = find(static_cast<int>(j));
            changed = true;
          }
        }
    }
    for (size_t i = 0; i < terms.size(); ++i)
      for (size_t j = 0; j < terms.size(); ++j)
        ASSERT_EQ(g.equivalent(ids[i], ids[j]),
                  find(static_cast<int>(i)) == find(static_cast<int>(j)))
            << "trial " << trial << " terms " << i << ", " << j;
  }
}

TEST(EGraph, ConstantFoldingThroughTheAnalysis) {
  auto g = arith_graph();
  const ClassId two = cnst(*g, 2), three = cnst(*g, 3);
  const ClassId sum = op(*g, "Add", {two, three});
  g->rebuild();
  EXPECT_EQ(folding(*g).data(g->find(sum)), 5.0);
  EXPECT_TRUE(g->equivalent(sum, cnst(*g, 5)));
  // Folding propagates when a merge makes children constant.
  const ClassId x = var(*g, "x");
  const ClassId prod = op(*g, "Mul", {x, sum});
  EXPECT_FALSE(folding(*g).data(g->find(prod)));
  g->merge(x, cnst(*g, 4));
  g->rebuild();
  EXPECT_EQ(folding(*g).data(g->find(prod)), 20.0);
  EXPECT_TRUE(g->equivalent(prod, cnst(*g, 20)));
  g->check_invariants();
  // Two different constants in one class is an unsound rewrite.
  const ClassId one = cnst(*g, 1), other_two = cnst(*g, 2);
  EXPECT_THROW(g->merge(one, other_two), InternalError);
}

TEST(EGraph, TypeAnalysisInfersAndGuards) {
  EGraph g;
  auto infer = [](Symbol op, AttrList attrs, std::span<const TypeInfo> ch) {
    TypeInfo t;
    if (op == sym("Input")) {
      t.known = true;
      t.shape = {attrs.get()[0].as_expr()};
    } else if (!ch.empty()) {
      t = ch[0];
    }
    return t;
  };
  g.set_analysis(std::make_unique<TypeAnalysis>(infer));
  const auto& types = dynamic_cast<const TypeAnalysis&>(*g.analysis());
  const ClassId x = g.add(sym("Input"), AttrList::of({Attr::of_expr(Expr("s") * 2)}), {});
  const ClassId e = op(g, "Exp2", {x});
  EXPECT_TRUE(types.data(g.find(e)).known);
  EXPECT_EQ(types.data(g.find(e)).shape, (std::vector<Expr>{Expr("s") * 2}));
  const ClassId y = g.add(sym("Input"), AttrList::of({Attr::of_expr(Expr(3))}), {});
  EXPECT_THROW(g.merge(x, y), InternalError);
}

TEST(EGraph, DumpsTextAndDot) {
  EGraph g;
  const ClassId a = var(g, "a");
  op(g, "Neg", {a});
  const std::string text = g.to_text();
  EXPECT_NE(text.find("2 e-classes, 2 e-nodes"), std::string::npos) << text;
  EXPECT_NE(text.find("Neg(e0)"), std::string::npos) << text;
  EXPECT_NE(text.find("Var(\"a\")"), std::string::npos) << text;
  const std::string dot = g.to_dot();
  EXPECT_EQ(dot.rfind("digraph egraph {", 0), 0u);
  EXPECT_NE(dot.find("lhead=cluster_0"), std::string::npos) << dot;
}

}  // namespace
}  // namespace luminal::eg
