// Symbolic expressions: construction, simplification rules, printing, parsing.
#include <gtest/gtest.h>

#include "luminal/error.hpp"
#include "luminal/expr.hpp"

namespace luminal {
namespace {

Expr P(const char* s) {
  return parse_expr(s);
}

TEST(Expr, InterningGivesEqualIds) {
  Expr a = Expr("a") * 3 + 1;
  Expr b = Expr("a") * 3 + 1;
  EXPECT_EQ(a.id(), b.id());
  EXPECT_EQ(Expr().as_const(), 0);
}

TEST(Expr, ConstantFolding) {
  EXPECT_EQ((Expr(6) * 7 + 3).as_const(), 45);
  EXPECT_EQ((Expr(-7) / 2).as_const(), -4);  // floor
  EXPECT_EQ((Expr(-7) % 2).as_const(), 1);   // takes the divisor's sign
  EXPECT_EQ((Expr(7) % -2).as_const(), -1);
  EXPECT_EQ(min(Expr(3), Expr(-2)).as_const(), -2);
  EXPECT_EQ(lt(Expr(3), Expr(4)).as_const(), 1);
  EXPECT_EQ(ge(Expr(3), Expr(4)).as_const(), 0);
  EXPECT_EQ(ceil_div(Expr(7), Expr(2)).as_const(), 4);
  EXPECT_EQ(ceil_div(Expr(-7), Expr(2)).as_const(), -3);
}

TEST(Expr, Identities) {
  Expr x = "x";
  EXPECT_EQ(x + 0, x);
  EXPECT_EQ(x * 1, x);
  EXPECT_EQ(x * 0, Expr(0));
  EXPECT_EQ(x / 1, x);
  EXPECT_EQ(x % 1, Expr(0));
  EXPECT_EQ(x - x, Expr(0));
  EXPECT_EQ(min(x, x), x);
  EXPECT_EQ(max(x, x), x);
}

TEST(Expr, CanonicalOrderAndLikeTerms) {
  Expr a = "a", b = "b", c = "c";
  EXPECT_EQ(a + b, b + a);
  EXPECT_EQ(a * b * c, c * (b * a));
  EXPECT_EQ(a + b + a, a * 2 + b);
  EXPECT_EQ((a + 1) * 3 - a * 3, Expr(3));
  EXPECT_EQ(a * 2 + b * 4 - (b * 4 + a), a);
  EXPECT_EQ((a + b) * 2, a * 2 + b * 2);
}

TEST(Expr, DivModOfSums) {
  Expr x = "x", y = "y";
  EXPECT_EQ((x * 8 + y) / 8, x + y / 8);
  EXPECT_EQ((x * 8 + y) % 8, y % 8);
  EXPECT_EQ((x * 8 + 5) / 4, x * 2 + 1);
  EXPECT_EQ((x * 4 + y * 6) / 8, (x * 2 + y * 3) / 4);
  EXPECT_EQ((x * 6) / 3, x * 2);
  EXPECT_EQ((x * 3) % 3, Expr(0));
}

TEST(Expr, BoundsRules) {
  Expr x = "x";  // variables are non-negative by default
  EXPECT_EQ((x % 8) / 8, Expr(0));
  EXPECT_EQ((x % 8) % 8, x % 8);
  EXPECT_EQ((x % 16) % 8, x % 8);
  EXPECT_EQ((x % 32) / 8, (x / 8) % 4);
  Expr i = Expr::var("i", 0, 15);
  EXPECT_EQ(i / 16, Expr(0));
  EXPECT_EQ(i % 16, i);
  EXPECT_EQ(lt(i, Expr(16)), Expr(1));
  EXPECT_EQ(ge(i, Expr(0)), Expr(1));
  EXPECT_EQ(min(i, Expr(20)), i);
  EXPECT_EQ(max(i, Expr(-1)), i);
  EXPECT_EQ(lt(x, x + 1), Expr(1));
  EXPECT_EQ(x / 8 * 8 + x % 8, x);
  EXPECT_EQ((x / 8 * 8 + x % 8) * 3 + 1, x * 3 + 1);
  EXPECT_EQ(x / 4 / 2, x / 8);
}

TEST(Expr, EvalAndUnboundVariable) {
  Expr e = Expr("s") * 4 + Expr("t") / 3;
  EXPECT_EQ(e.eval({{"s", 2}, {"t", 10}}), 11);
  try {
    e.eval({{"s", 2}});
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("'t'"), std::string::npos) << err.what();
  }
  EXPECT_THROW((Expr("s") / Expr("t")).eval({{"s", 1}, {"t", 0}}), Error);
}

TEST(Expr, Substitute) {
  Expr e = Expr("s") * 4 + 2;
  EXPECT_EQ(e.substitute("s", 3), Expr(14));
  EXPECT_EQ(e.substitute("s", Expr("t") + 1), Expr("t") * 4 + 6);
  EXPECT_EQ(e.variables(), std::vector<std::string>{"s"});
}

TEST(Expr, PrintAndParseRoundTrip) {
  const char* cases[] = {"a + b*2 - 3",     "(a + 1) / 4 % 3", "min(a, b + 2)",
                         "a < b && b >= 3", "a*b*c - c",       "max(a / 2, 7) || a"};
  for (const char* c : cases) {
    Expr e = P(c);
    EXPECT_EQ(P(e.to_string().c_str()), e) << c << " printed as " << e.to_string();
  }
  EXPECT_EQ(P("a - b").to_string(), "a - b");
}

TEST(Expr, ParseErrorsNameTheColumn) {
  try {
    P("a + * b");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("column 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(P("a + (b"), Error);
  EXPECT_THROW(P("foo(a)"), Error);
  EXPECT_THROW(P("a $ b"), Error);
}

TEST(Expr, CPrintingUsesFloorHelpersWhenSignsAreUnknown) {
  Expr x = "x";
  EXPECT_EQ((x / 4).to_c(), "x / 4");  // x >= 0: C truncation equals floor
  Expr n = Expr::var("n", -10, 10);
  EXPECT_EQ((n / 4).to_c(), "lum_floordiv(n, 4)");
  EXPECT_EQ((n % 4).to_c(), "lum_floormod(n, 4)");
  EXPECT_EQ(min(x, Expr("y")).to_c().substr(0, 8), "lum_min(");
  EXPECT_NE(expr_c_prelude().find("lum_floordiv"), std::string_view::npos);
}

TEST(Expr, InvalidVariableNames) {
  EXPECT_THROW(Expr::var("1abc"), Error);
  EXPECT_THROW(Expr::var("a-b"), Error);
  EXPECT_THROW(Expr::var("min"), Error);
  EXPECT_THROW(Expr::var("x", 5, 2), Error);
}

}  // namespace
}  // namespace luminal
