// The HLIR graph: node construction, derived shapes and dtypes, op traits, printing.
#include <gtest/gtest.h>

#include "luminal/luminal.hpp"

namespace luminal {
namespace {

TEST(Ops, TraitTableCoversTheOpSet) {
  EXPECT_EQ(kNumOps, 20u);
  EXPECT_EQ(op_name(Op::SumReduce), "SumReduce");
  EXPECT_EQ(traits(Op::Scatter).arity, 3);
  EXPECT_TRUE(traits(Op::Add).commutative);
  EXPECT_FALSE(traits(Op::Mod).commutative);
  EXPECT_TRUE(traits(Op::Exp2).float_only);
  EXPECT_TRUE(is_elementwise(Op::LessThan));
  EXPECT_FALSE(is_elementwise(Op::Gather));
}

TEST(Graph, BuildsNodesWithDerivedShapesAndDtypes) {
  Graph cx;
  Tensor a = cx.tensor({2, 3}, DType::F32);
  Tensor b = cx.named_tensor("b", {3});
  Tensor c = a * b + 1.0;
  EXPECT_EQ(c.shape(), (std::vector<Expr>{2, 3}));
  EXPECT_EQ(c.dtype(), DType::F32);
  Tensor lt = less_than(a, c);
  EXPECT_EQ(lt.dtype(), DType::Bool);
  Tensor s = c.sum_reduce(-1);
  EXPECT_EQ(s.shape(), (std::vector<Expr>{2}));
  EXPECT_EQ(cx.node(s.id()).axis, 1);
  Tensor i = a.cast(DType::I32);
  EXPECT_EQ(i.dtype(), DType::I32);
  EXPECT_EQ(cx.node(b.id()).name, "b");
  // Movement ops add no nodes.
  const size_t before = cx.num_nodes();
  Tensor v = c.permute({1, 0}).slice(0, 1, 3).pad(1, 1, 0).flip(0).expand(0, 4);
  EXPECT_EQ(cx.num_nodes(), before);
  EXPECT_EQ(v.shape(), (std::vector<Expr>{4, 2, 3}));
}

TEST(Graph, ReshapeCopiesOnlyWhenItMust) {
  Graph cx;
  Tensor a = cx.tensor({4, 6});
  const size_t n0 = cx.num_nodes();
  Tensor merged = a.reshape({24});
  EXPECT_EQ(cx.num_nodes(), n0);
  EXPECT_EQ(merged.id(), a.id());
  Tensor t = a.permute({1, 0}).reshape({24});
  EXPECT_EQ(cx.num_nodes(), n0 + 1);
  EXPECT_EQ(cx.node(t.id()).op, Op::Contiguous);
}

TEST(Graph, SymbolicDims) {
  Graph cx;
  Tensor x = cx.tensor({"s", 4});
  Tensor y = x.reshape({Expr("s") * 4});
  EXPECT_EQ(y.shape()[0], Expr("s") * 4);
  cx.set_dim("s", 3);
  EXPECT_EQ(cx.dims().get("s"), 3);
  EXPECT_THROW(cx.set_dim("s", -1), Error);
}

TEST(Graph, TextAndDotPrinting) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {2, 3});
  Tensor b = (a.permute({1, 0}).exp2()).sum_reduce(0);
  b.retrieve();
  const std::string text = cx.to_text();
  EXPECT_NE(text.find("%0 = Input \"a\" : f32[2, 3]"), std::string::npos) << text;
  EXPECT_NE(text.find("%1 = Exp2(%0{shape=[3, 2] strides=[1, 3]}) : f32[3, 2]"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%2 = SumReduce(%1) axis=0 : f32[2]  [output]"), std::string::npos) << text;
  const std::string dot = cx.to_dot();
  EXPECT_EQ(dot.rfind("digraph luminal {", 0), 0u);
  EXPECT_NE(dot.find("n0 -> n1"), std::string::npos);
  EXPECT_NE(dot.find("n1 -> n2;"), std::string::npos);
  EXPECT_NE(dot.find("style=bold"), std::string::npos);
}

TEST(Graph, ConstantsAndIota) {
  Graph cx;
  Tensor c = cx.constant(2.5);
  EXPECT_TRUE(c.shape().empty());
  Tensor k = cx.constant_int(7, DType::I64);
  EXPECT_EQ(cx.node(k.id()).value.i, 7);
  Tensor r = cx.iota(Expr("z") * 2, {5});
  EXPECT_EQ(r.dtype(), DType::I32);
  EXPECT_EQ(cx.node(r.id()).iota, Expr("z") * 2);
}

}  // namespace
}  // namespace luminal
