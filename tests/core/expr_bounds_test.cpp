// Expr::to_c_bounds against brute force: the rendered C, compiled, bounds every value an
// expression takes over random boxes of its variables; and for the masks attention
// computes (causal, windowed, padded), it decides every tile that lies wholly on one
// side, as the CUDA backend's pass over a mask's tiles relies on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/cpu/jit.hpp"
#include "luminal/expr.hpp"
#include "testing/random_exprs.hpp"

namespace luminal {
namespace {

using testing::RandomExprs;
using testing::try_eval;

// out = {least, greatest, known} of an expression over the box [lo, hi] of its variables.
using BoundsFn = void (*)(const long long* lo, const long long* hi, long long* out);

// One C function an expression, `lum_bounds_<k>`, reading variable vars[v] at lo[v], hi[v].
std::string bounds_program(const std::vector<Expr>& exprs, const std::vector<std::string>& vars) {
  std::string s(expr_c_prelude());
  for (size_t k = 0; k < exprs.size(); ++k) {
    s += "extern \"C\" void lum_bounds_" + std::to_string(k) +
         "(const long long* lo, const long long* hi, long long* out) {\n";
    for (size_t v = 0; v < vars.size(); ++v)
      s += "  const long long " + vars[v] + "_lo = lo[" + std::to_string(v) + "], " + vars[v] +
           "_hi = hi[" + std::to_string(v) + "];\n";
    s += "  " + exprs[k].to_c_bounds("e") + "\n";
    s += "  out[0] = e_lo; out[1] = e_hi; out[2] = e_known;\n}\n";
  }
  return s;
}

struct Compiled {
  cpugen::JitResult jit;
  std::vector<BoundsFn> fns;
};

Compiled compile(const std::vector<Expr>& exprs, const std::vector<std::string>& vars) {
  Compiled c{cpugen::compile_and_load(bounds_program(exprs, vars)), {}};
  for (size_t k = 0; k < exprs.size(); ++k)
    c.fns.push_back(
        reinterpret_cast<BoundsFn>(c.jit.library->symbol("lum_bounds_" + std::to_string(k))));
  return c;
}

// Calls f(bindings) at every point of the box.
template <typename F>
void for_each_point(const std::vector<std::string>& vars, const long long* lo, const long long* hi,
                    F&& f, size_t v = 0, Bindings b = {}) {
  if (v == vars.size()) return f(b);
  for (long long x = lo[v]; x <= hi[v]; ++x) {
    b.set(vars[v], x);
    for_each_point(vars, lo, hi, f, v + 1, b);
  }
}

TEST(ExprBounds, HoldEveryValueOfRandomExpressionsOverRandomBoxes) {
  RandomExprs gen(31337);
  const std::vector<std::string> vars = {"a", "b", "i"};
  std::vector<Expr> exprs;
  for (int k = 0; k < 150; ++k) exprs.push_back(gen.make(4));
  for (int k = 0; k < 150; ++k) exprs.push_back(gen.make_index(4));
  const Compiled c = compile(exprs, vars);
  std::uniform_int_distribution<long long> start(0, 12), width(0, 4), i_start(0, 15);
  int boxes = 0, known = 0, points = 0;
  for (size_t k = 0; k < exprs.size(); ++k) {
    for (int trial = 0; trial < 12; ++trial) {
      long long lo[3], hi[3];
      for (int v = 0; v < 2; ++v) lo[v] = start(gen.rng()), hi[v] = lo[v] + width(gen.rng());
      lo[2] = i_start(gen.rng()), hi[2] = std::min(15LL, lo[2] + width(gen.rng()));
      std::vector<int64_t> values;
      bool defined = true;
      for_each_point(vars, lo, hi, [&](const Bindings& b) {
        const auto v = try_eval(exprs[k], b);
        if (v) values.push_back(*v);
        defined = defined && v.has_value();
      });
      if (!defined) continue;  // a division by zero or an overflow inside the box
      long long out[3];
      c.fns[k](lo, hi, out);
      ++boxes;
      if (!out[2]) continue;
      ++known;
      for (int64_t v : values) {
        ASSERT_LE(out[0], v) << exprs[k].to_string() << " a in [" << lo[0] << ", " << hi[0]
                             << "], b in [" << lo[1] << ", " << hi[1] << "], i in [" << lo[2]
                             << ", " << hi[2] << "]";
        ASSERT_GE(out[1], v) << exprs[k].to_string();
        ++points;
      }
    }
  }
  // Only divisors whose range holds zero leave a box unbounded: most are bounded.
  EXPECT_GT(boxes, 2500);
  EXPECT_GT(known, boxes * 7 / 10);
  EXPECT_GT(points, 50000);
}

TEST(ExprBounds, DecideAttentionMasksOnTilesWhollyOnOneSide) {
  // Rows lum_m of a prompt after `past` cached positions, keys lum_t; a window of `w`
  // positions; `n` keys that exist (a padded batch).
  const Expr m = Expr::var("lum_m"), t = Expr::var("lum_t"), past("past"), w("w"), n("n");
  const std::vector<Expr> masks = {
      ge(m + past, t),
      logical_and(ge(m + past, t), lt(m + past - t, w)),
      logical_and(lt(t, n), ge(m + past, t)),
      lt(t, m + past + 1),
  };
  const std::vector<std::string> vars = {"lum_m", "lum_t", "past", "w", "n"};
  const Compiled c = compile(masks, vars);
  int decided = 0;
  for (size_t k = 0; k < masks.size(); ++k)
    for (long long past_v : {0LL, 5LL, 64LL})
      for (long long m0 = 0; m0 < 256; m0 += 32)
        for (long long t0 = 0; t0 < 320; t0 += 32) {
          long long lo[5] = {m0, t0, past_v, 40, 200}, hi[5] = {m0 + 31, t0 + 31, past_v, 40, 200};
          bool all = true, any = false;
          for_each_point(vars, lo, hi, [&](const Bindings& b) {
            const bool keep = masks[k].eval(b) != 0;
            all = all && keep, any = any || keep;
          });
          long long out[3];
          c.fns[k](lo, hi, out);
          ASSERT_TRUE(out[2]) << masks[k].to_string();
          const std::string where = masks[k].to_string() + " past " + std::to_string(past_v) +
                                    ", rows from " + std::to_string(m0) + ", keys from " +
                                    std::to_string(t0);
          if (all) {
            EXPECT_GE(out[0], 1) << where;
          } else if (!any) {
            EXPECT_EQ(out[1], 0) << where;
          } else {
            EXPECT_TRUE(out[0] == 0 && out[1] == 1) << where;
          }
          decided += all || !any;
        }
  EXPECT_GT(decided, 600);
}

}  // namespace
}  // namespace luminal
