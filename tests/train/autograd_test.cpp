// Reverse-mode gradients (luminal/train/autograd.hpp) against central finite
// differences in f64 on the reference interpreter: every primitive op, the view
// transposes (broadcast, slice, pad, flip, permute, reshape, overlapping windows,
// symbolic dims), every composite op of the hlops fixtures, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include "hlops/fixture.hpp"
#include "luminal/luminal.hpp"
#include "luminal/train/autograd.hpp"
#include "testing/expect_error.hpp"

namespace luminal {
namespace {

using train::gradients;
using Build = std::function<Tensor(Graph&, const std::vector<Tensor>&)>;

std::vector<double> uniform(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> out(n);
  for (double& x : out) x = d(rng);
  return out;
}

size_t count(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// loss = sum(f(params) * w) for a fixed random w: its gradient with respect to each
// param, from the graph's gradient nodes, against central differences of the loss.
// Returns what differs (empty if nothing); at most `probes` elements of each param are
// perturbed.
std::string check(const std::vector<std::vector<int64_t>>& shapes, const Build& f, double lo = -1.0,
                  double hi = 1.0, size_t probes = 24,
                  const std::vector<std::vector<double>>& values = {}) {
  Graph g;
  std::vector<Tensor> params;
  std::vector<std::vector<double>> x;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::vector<Expr> shape(shapes[i].begin(), shapes[i].end());
    params.push_back(g.tensor(shape, DType::F64));
    x.push_back(i < values.size() ? values[i] : uniform(count(shapes[i]), lo, hi, 11 + i));
    params.back().set_buffer(Buffer::from_doubles(x.back(), DType::F64));
  }
  const Tensor out = f(g, params).cast(DType::F64);
  Tensor w = g.tensor(out.shape(), DType::F64);
    Tensor loss = (out * w).sum();  // every axis
  std::vector<Tensor> grads = gradients(loss, params);
  loss.retrieve();
  for (Tensor& gr : grads) gr.retrieve();
  g.compile(reference());
  const int64_t w_count = simplify(out.numel()).eval();
  w.set_buffer(Buffer::from_doubles(uniform(static_cast<size_t>(w_count), -1, 1, 99), DType::F64));
  g.execute();
  std::vector<std::vector<double>> analytic;
  for (const Tensor& gr : grads) analytic.push_back(gr.data().to_f64());

  const double eps = 1e-6;
  // A difference of two losses is exact only to the loss's own rounding (about 1e-16 of
  // it), divided by 2 eps.
  const double noise = 1e-9 * std::abs(loss.data().to_f64()[0]);
  std::string errors;
  for (size_t i = 0; i < params.size(); ++i) {
    if (analytic[i].size() != x[i].size())
      return "param " + std::to_string(i) + ": gradient has " + std::to_string(analytic[i].size()) +
             " elements, the param " + std::to_string(x[i].size());
    const size_t step = std::max<size_t>(1, x[i].size() / probes);
    for (size_t j = 0; j < x[i].size(); j += step) {
      std::vector<double> y = x[i];
      auto loss_at = [&](double v) {
        y[j] = v;
        params[i].set_buffer(Buffer::from_doubles(y, DType::F64));
        g.execute();
        return loss.data().to_f64()[0];
      };
      const double fd = (loss_at(x[i][j] + eps) - loss_at(x[i][j] - eps)) / (2 * eps);
      const double got = analytic[i][j];
      if (!(std::abs(got - fd) <= 1e-5 * std::max(1.0, std::abs(fd)) + noise))
        errors += "param " + std::to_string(i) + " element " + std::to_string(j) + ": gradient " +
                  std::to_string(got) + ", finite difference " + std::to_string(fd) + "\n";
    }
    params[i].set_buffer(Buffer::from_doubles(x[i], DType::F64));
  }
  return errors;
}

// --- primitive ops --------------------------------------------------------------------

TEST(Autograd, UnaryPrimitives) {
  EXPECT_EQ(check(
                {{3, 4}}, [](Graph&, auto& p) { return p[0].log2(); }, 0.5, 2.0),
            "");
  EXPECT_EQ(check({{3, 4}}, [](Graph&, auto& p) { return p[0].exp2(); }), "");
  EXPECT_EQ(check(
                {{3, 4}}, [](Graph&, auto& p) { return p[0].sin(); }, -3, 3),
            "");
  EXPECT_EQ(check(
                {{3, 4}}, [](Graph&, auto& p) { return p[0].sqrt(); }, 0.5, 2.0),
            "");
  EXPECT_EQ(check(
                {{3, 4}}, [](Graph&, auto& p) { return p[0].recip(); }, 0.5, 2.0),
            "");
  EXPECT_EQ(check({{3, 4}}, [](Graph&, auto& p) { return p[0].permute({1, 0}).contiguous(); }), "");
}

TEST(Autograd, BinaryAndTernaryPrimitives) {
  EXPECT_EQ(check({{3, 4}, {3, 4}}, [](Graph&, auto& p) { return p[0] + p[1]; }), "");
  EXPECT_EQ(check({{3, 4}, {3, 4}}, [](Graph&, auto& p) { return p[0] * p[1]; }), "");
  // fmod away from its jumps (|a / b| between 1.1 and 1.9).
  EXPECT_EQ(check({{6}, {6}}, [](Graph&, auto& p) { return fmod(p[0], p[1]); }, 0, 0, 24,
                  {{1.5, -2.2, 3.3, 1.4, -3.6, 2.5}, {1.0, 1.5, 2.0, -1.0, 2.5, -1.5}}),
            "");
  EXPECT_EQ(check({{3, 4}, {3, 4}},
                  [](Graph&, auto& p) { return where(less_than(p[0], p[1]), p[0] * 2.0, p[1]); }),
            "");
}

TEST(Autograd, ReductionPrimitives) {
  EXPECT_EQ(check({{3, 4, 5}}, [](Graph&, auto& p) { return p[0].sum_reduce(1); }), "");
  EXPECT_EQ(check({{3, 4, 5}}, [](Graph&, auto& p) { return p[0].max_reduce(2); }), "");
  // Ties share the gradient: max over a row of equal values.
  Graph g;
  Tensor x = g.tensor({2, 3}, DType::F64);
  x.set(std::vector<double>{1, 1, 0, 2, 5, 5});
  Tensor m = x.max_reduce(1);
  Tensor gx = gradients(m.sum({0}), {x})[0].retrieve();
  g.compile(reference());
  g.execute();
  EXPECT_EQ(gx.data().to_f64(), (std::vector<double>{0.5, 0.5, 0, 0, 0.5, 0.5}));
}

TEST(Autograd, IndexingPrimitives) {
  // Gather with repeated indices: both reads add up.
  EXPECT_EQ(check({{5, 3}},
                  [](Graph& g, auto& p) {
                    Tensor idx = g.tensor({4}, DType::I64);
                    idx.set(std::vector<int64_t>{4, 0, 4, 2});
                    return p[0].index_select(0, idx);
                  }),
            "");
  // Along an axis with an index that varies in every dim, smaller than the data in the
  // others (torch.gather).
  EXPECT_EQ(check({{4, 5}},
                  [](Graph& g, auto& p) {
                    Tensor idx = g.tensor({3, 2}, DType::I32);
                    idx.set(std::vector<int32_t>{4, 4, 0, 1, 3, 0});
                    return p[0].gather_axis(1, idx);
                  }),
            "");
  // Any positions of the flat data.
  EXPECT_EQ(check({{3, 4}},
                  [](Graph& g, auto& p) {
                    Tensor idx = g.tensor({5}, DType::I64);
                    idx.set(std::vector<int64_t>{11, 0, 11, 5, 6});
                    return p[0].gather(idx);
                  }),
            "");
  // Scatter of distinct positions: dest loses them, src gets theirs.
  EXPECT_EQ(check({{6}, {3}},
                  [](Graph& g, auto& p) {
                    Tensor idx = g.tensor({3}, DType::I32);
                    idx.set(std::vector<int32_t>{5, 1, 3});
                    return p[0].scatter(idx, p[1]) * p[0];
                  }),
            "");
}

// A zero gradient times an infinite derivative is zero (a saturated sigmoid), but a NaN
// gradient is not hidden.
TEST(Autograd, ZeroTimesInfinityIsZeroButNaNStaysNaN) {
  Graph g;
  Tensor x = g.tensor({3}, DType::F64), w = g.tensor({3}, DType::F64);
  x.set(std::vector<double>{-1000, 0.5, 0.5});
  w.set(std::vector<double>{1, std::nan(""), 2});
  Tensor gx = gradients((x.sigmoid() * w).sum({0}), {x})[0].retrieve();
  g.compile(reference());
  g.execute();
  const std::vector<double> got = gx.data().to_f64();
  EXPECT_EQ(got[0], 0.0);
  EXPECT_TRUE(std::isnan(got[1]));
  const double s = 1 / (1 + std::exp(-0.5));
  EXPECT_NEAR(got[2], 2 * s * (1 - s), 1e-12);
}

// Products' gradients over zeros, against the product rule by brute force: the
// gradient of x_i is the product of the other factors (of the window up to each position,
// for cumprod), finite at a lone zero, zero beside two; nothing NaN.
TEST(Autograd, ProductsOverZerosHaveTheProductRulesGradient) {
  const std::vector<std::vector<double>> rows = {
      {1.5, -2.0, 0.5, 3.0}, {1.5, 0.0, -2.0, 3.0}, {0.0, 2.0, 0.0, -1.0}, {-0.5, 4.0, 2.0, 0.0}};
  const std::vector<double> w = {0.3, -1.1, 2.0, 0.7};  // d sum(cumprod(x) * w)
  for (const auto& row : rows) {
    Graph g;
    Tensor x = g.tensor({4}, DType::F64), weights = g.tensor({4}, DType::F64);
    x.set(row);
    weights.set(w);
    Tensor product = gradients(x.prod({0}), {x})[0].retrieve();
    Tensor cumulative = gradients((x.cumprod(0) * weights).sum({0}), {x})[0].retrieve();
    g.compile(reference());
    g.execute();
    for (size_t i = 0; i < 4; ++i) {
      double others = 1, cum = 0;
      for (size_t j = 0; j < 4; ++j) others *= j == i ? 1 : row[j];
      for (size_t k = i; k < 4; ++k) {  // d cumprod(x)[k] / d x_i for k >= i
        double d = 1;
        for (size_t j = 0; j <= k; ++j) d *= j == i ? 1 : row[j];
        cum += w[k] * d;
      }
      EXPECT_NEAR(product.data().get_f64(i), others, 1e-12)
          << "prod, x_" << i << " of row " << row[0];
      EXPECT_NEAR(cumulative.data().get_f64(i), cum, 1e-12)
          << "cumprod, x_" << i << " of row " << row[0];
    }
  }
}

TEST(Autograd, Casts) {
  // The gradient of a cast comes back rounded the same way: d sum(cast(x) * w) = cast(w).
  Graph g;
  Tensor x = g.tensor({3}, DType::F64), w = g.tensor({3}, DType::F16);
  x.set(std::vector<double>{0.5, -2, 3});
  w.set_buffer(Buffer::from_doubles({0.1, 1.0 / 3, -7.77}, DType::F16));
  Tensor gx = gradients((x.cast(DType::F16) * w).cast(DType::F32).sum({0}), {x})[0].retrieve();
  g.compile(reference());
  g.execute();
  EXPECT_EQ(gx.dtype(), DType::F64);
  EXPECT_EQ(gx.data().to_f64(), Buffer::from_doubles({0.1, 1.0 / 3, -7.77}, DType::F16).to_f64());
}

// An embedding's gradient is a product with the one-hot of its indices ([tokens,
// vocabulary], the vocabulary padded to a multiple of 64 for the product), not a
// one-hot over every element ([tokens, width, vocabulary]) summed: the only iota it adds
// is the one-hot's two-dimensional one.
TEST(Autograd, EmbeddingGradientIsAProductWithTheOneHotIndex) {
  for (DType index : {DType::I32, DType::I64}) {
    Graph g;
    Tensor table = g.tensor({1000, 64}), ids = g.tensor({4, 128}, index);
    Tensor loss = table.index_select(0, ids.reshape({-1})).sum({0, 1});
    const size_t before = g.num_nodes();
    gradients(loss, {table});
    size_t iotas = 0;
    for (size_t i = before; i < g.num_nodes(); ++i) {
      const Node& n = g.node(NodeId{static_cast<uint32_t>(i)});
      if (n.op != Op::Iota) continue;
      ++iotas;
      EXPECT_EQ(n.shape, (std::vector<Expr>{512, 1024})) << dtype_name(index);
    }
    EXPECT_EQ(iotas, 1u) << dtype_name(index);
  }
}

// --- views ---------------------------------------------------------------------------

TEST(Autograd, ViewsTransposeBack) {
  auto one = [](const std::function<Tensor(const Tensor&)>& f) {
    return [f](Graph&, const std::vector<Tensor>& p) { return f(p[0]) * 1.5; };
  };
  EXPECT_EQ(check({{3, 4}}, one([](const Tensor& x) { return x.permute({1, 0}); })), "");
  EXPECT_EQ(check({{3, 1, 4}}, one([](const Tensor& x) {
                    return x.broadcast_to({2, 3, 5, 4});
                  })),
            "");
  EXPECT_EQ(check({{3, 8}}, one([](const Tensor& x) { return x.slice(1, 2, 7).slice(0, 1, 3); })),
            "");
  EXPECT_EQ(check({{3, 4}}, one([](const Tensor& x) { return x.pad(1, 2, 1).pad(0, 1, 0); })), "");
  EXPECT_EQ(check({{3, 4}}, one([](const Tensor& x) { return x.flip(1).flip(0).slice(1, 1, 3); })),
            "");
  EXPECT_EQ(check({{2, 3, 4}}, one([](const Tensor& x) {
                    return x.permute({2, 0, 1}).reshape({4, 6});
                  })),
            "");
  EXPECT_EQ(check({{2, 6}}, one([](const Tensor& x) {
                    return x.reshape({3, 4}).transpose(0, 1);
                  })),
            "");
  EXPECT_EQ(check({{4, 5}}, one([](const Tensor& x) { return x.diagonal(1); })), "");
  EXPECT_EQ(check({{3, 4}}, one([](const Tensor& x) { return x.roll(2, 1); })), "");
  EXPECT_EQ(check({{2, 3}}, one([](const Tensor& x) { return x.repeat({2, 3}); })), "");
  // Heads split out of a fused projection's columns (a view dim stepping inside a
  // source dim: the gradient is laid out over the source's columns split 3 x 2 x 2).
  EXPECT_EQ(check({{2, 3, 12}}, one([](const Tensor& x) {
                    return x.slice(2, 4, 8).reshape({2, 3, 2, 2}).permute({0, 2, 1, 3});
                  })),
            "");
  // A padded slice read back through a reshape (a copy in between).
  EXPECT_EQ(check({{3, 4}},
                  one([](const Tensor& x) { return x.slice(1, 1, 3).pad(0, 1, 1).reshape({10}); })),
            "");
}

TEST(Autograd, OverlappingWindowsAddUp) {
  auto one = [](const std::function<Tensor(const Tensor&)>& f) {
    return [f](Graph&, const std::vector<Tensor>& p) { return f(p[0]); };
  };
  EXPECT_EQ(check({{2, 9}}, one([](const Tensor& x) { return x.unfold(1, 3); })), "");
  EXPECT_EQ(check({{2, 9}}, one([](const Tensor& x) { return x.unfold(1, 3, 2); })), "");
  EXPECT_EQ(check({{2, 11}}, one([](const Tensor& x) { return x.unfold(1, 3, 1, 2); })), "");
  // Two spatial axes, as a convolution reads its input.
  EXPECT_EQ(check({{2, 6, 7}},
                  one([](const Tensor& x) { return x.pad(2, 1, 1).unfold(1, 3).unfold(2, 3, 2); })),
            "");
  // A 3x3 window at stride 1 over a padded image: laid out as pads along its dims.
  EXPECT_EQ(check({{2, 5, 6}}, one([](const Tensor& x) {
                    return x.pad(1, 1, 1).pad(2, 1, 1).unfold(1, 3).unfold(2, 3);
                  })),
            "");
}

TEST(Autograd, SymbolicDimsStaySymbolic) {
  Graph g;
  Tensor x = g.tensor({"n", 4}, DType::F64);
  Tensor y = (x.slice(0, 1, "n").pad(1, 1, 0) * 2.0).sum({0, 1});
  Tensor gx = gradients(y, {x})[0].retrieve();
  EXPECT_EQ(gx.shape(), (std::vector<Expr>{Expr("n"), 4}));
  for (int64_t n : {3, 5}) {
    g.set_dim("n", n);
    x.set_buffer(Buffer::from_doubles(uniform(static_cast<size_t>(n * 4), -1, 1, 3), DType::F64));
    g.compile(reference());
    g.execute();
    std::vector<double> want(static_cast<size_t>(n * 4), 2.0);
    for (int k = 0; k < 4; ++k) want[static_cast<size_t>(k)] = 0.0;  // row 0 is sliced away
    EXPECT_EQ(gx.data().to_f64(), want) << "n = " << n;
  }
}

// --- composition -----------------------------------------------------------------------

TEST(Autograd, AValueUsedTwiceAddsBothPaths) {
  EXPECT_EQ(check({{3, 4}}, [](Graph&, auto& p) { return p[0] * p[0] + p[0].exp() * p[0]; }), "");
  EXPECT_EQ(check({{3, 4}, {4, 5}},
                  [](Graph&, auto& p) {
                    return p[0].matmul(p[1]).softmax(-1).matmul(p[1].transpose(0, 1));
                  }),
            "");
}

TEST(Autograd, TransformerPiecesMatchFiniteDifferences) {
  // Attention with a causal mask, RMSNorm, SiLU-gated MLP: what a language model's
  // training step differentiates.
  EXPECT_EQ(check({{4, 8}, {8, 8}, {8, 8}, {8}},
                  [](Graph& g, auto& p) {
                    Tensor x = p[0].rms_norm({-1}) * p[3];
                    Tensor q = x.matmul(p[1]), k = x.matmul(p[2]);
                    Tensor s = q.matmul(k.transpose(0, 1)) * (1.0 / std::sqrt(8.0));
                    Tensor keep = g.iota(ge(Expr("z") / 4, Expr("z") % 4), {4, 4}, DType::Bool);
                    s = where(keep, s, -1e30);
                    return s.softmax(-1).matmul(x).silu() * x.gelu();
                  }),
            "");
}

TEST(Autograd, LossOfASoftmaxClassifier) {
  // Cross-entropy of a linear layer over one-hot targets, averaged.
  EXPECT_EQ(check({{5, 3}, {3, 4}, {4}},
                  [](Graph& g, auto& p) {
                    Tensor labels = g.tensor({5}, DType::I64);
                    labels.set(std::vector<int64_t>{0, 3, 1, 3, 2});
                    Tensor logits = p[0].matmul(p[1]) + p[2];
                    Tensor picked = logits.log_softmax(-1).gather_axis(1, labels.unsqueeze(1));
                    return -picked.mean({0, 1});
                  }),
            "");
}

// The maximum a softmax subtracts does not change its result, so its gradient is zero:
// the gradient graph reads it only where the forward pass does (no ties mask, no sums
// for it), and the gradients still match central differences.
TEST(Autograd, TheSoftmaxShiftGetsNoGradientNodes) {
  const auto readers_of_maxima = [](const Graph& g) {
    size_t n = 0;
    for (uint32_t i = 0; i < g.num_nodes(); ++i)
      for (const Edge& e : g.node(NodeId{i}).inputs) n += g.node(e.source).op == Op::MaxReduce;
    return n;
  };
  for (const bool log : {false, true}) {
    Graph g;
    Tensor x = g.named_tensor("x", {4, 6});
    x.set(uniform(24, -2, 2, 5));
    const Tensor y = log ? x.log_softmax(1) : x.softmax(1);
    const Tensor loss = (y * g.iota(Expr("z") % 6, {4, 6}, DType::F32)).sum({0, 1});
    const size_t forward = readers_of_maxima(g);
    train::gradients(loss, {x});
    EXPECT_EQ(readers_of_maxima(g), forward) << (log ? "log_softmax" : "softmax");
  }
  EXPECT_EQ(
      check({{4, 6}},
            [](Graph& g, auto& p) {
              const Tensor w = g.iota(Expr("z") % 7, {4, 6}, p[0].dtype());
              // Over one element, the maximum is the max node itself, read elsewhere
              // too: its gradient must still flow.
              const Tensor top = p[0].max({1}, true);
              return (p[0].softmax(1) * w).sum({0, 1}) + (p[0].log_softmax(0) * w).sum({0, 1}) +
                     top.sum({0, 1}) + top.softmax(1).sum({0, 1});
            }),
      "");
}

// --- every composite op of the hlops fixtures ------------------------------------------

TEST(Autograd, EveryHlopFixtureMatchesFiniteDifferences) {
  const std::string dir = std::string(LUMINAL_FIXTURE_DIR) + "/hlops";
  size_t checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".lfx") continue;
    for (const testing::ParityCase& c : testing::load_fixture(entry.path().string())) {
      // Left out: ops whose gradient is zero almost everywhere (or none at all); casts,
      // whose rounding to f32 is coarser than the differences' step (Autograd.Casts checks
      // them exactly).
      static const std::set<std::string> skipped = {"floor", "ceil",   "round",  "trunc",
                                                    "sign",  "argmax", "argmin", "remainder",
                                                    "fmod",  "cast"};
      if (skipped.count(c.op) || skipped.count(c.name) || c.expected.data.dtype() != DType::F32)
        continue;
      std::vector<std::vector<int64_t>> shapes;
      std::vector<std::vector<double>> values;
      for (const auto& in : c.inputs)
        if (in.base.data.dtype() == DType::F32) {
          shapes.push_back(in.base.shape);
          values.push_back(in.base.data.to_f64());
        }
      if (shapes.empty()) continue;
      const std::string errors = check(
          shapes,
          [&](Graph& g, const std::vector<Tensor>& p) {
            std::vector<Tensor> inputs;
            size_t next = 0;
            for (size_t k = 0; k < c.inputs.size(); ++k) {
              const auto& in = c.inputs[k];
              Tensor base = p[0];
              if (in.base.data.dtype() == DType::F32) {
                base = p[next++];
              } else {
                base = g.tensor(std::vector<Expr>(in.base.shape.begin(), in.base.shape.end()),
                                in.base.data.dtype());
                base.set_buffer(in.base.data);
              }
              inputs.push_back(testing::apply_recipe(base, in.recipe));
            }
            return testing::build_op(g, c.op, inputs, testing::Params(c.params));
          },
          0, 0, 8, values);
      EXPECT_EQ(errors, "") << c.name << " (" << c.op << ")";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100u);
}

// Every composite op's gradient against PyTorch's autograd on make_hlops.py's cases
// (tools/fixtures/make_gradients.py): d sum(out * w) / d input for every f32 input.
TEST(Autograd, EveryHlopMatchesPyTorchAutograd) {
  const auto cases =
      testing::load_fixture(std::string(LUMINAL_FIXTURE_DIR) + "/train/gradients.lfx");
  ASSERT_GT(cases.size(), 250u);
  size_t compared = 0;
  for (const testing::ParityCase& c : cases) {
    Graph g;
    std::vector<Tensor> inputs, params;
    for (size_t k = 0; k + 1 < c.inputs.size(); ++k) {
      const auto& in = c.inputs[k];
      Tensor base = g.tensor(std::vector<Expr>(in.base.shape.begin(), in.base.shape.end()),
                             in.base.data.dtype());
      base.set_buffer(in.base.data);
      if (in.base.data.dtype() == DType::F32) params.push_back(base);
      inputs.push_back(testing::apply_recipe(base, in.recipe));
    }
    const Tensor out = testing::build_op(g, c.op, inputs, testing::Params(c.params));
    const auto& wb = c.inputs.back().base;
    Tensor w = g.tensor(std::vector<Expr>(wb.shape.begin(), wb.shape.end()), wb.data.dtype());
    w.set_buffer(wb.data);
        const Tensor loss = (out * w.cast(out.dtype())).sum();  // every axis
    std::vector<Tensor> grads = gradients(loss.cast(DType::F32), params);
    for (Tensor& t : grads) t.retrieve();
    g.compile(reference());
    g.execute();
    std::vector<float> got;
    for (const Tensor& t : grads) {
      const std::vector<float> v = t.to_f32();
      got.insert(got.end(), v.begin(), v.end());
    }
    const std::vector<float> want = c.expected.data.to_f32();
    ASSERT_EQ(got.size(), want.size()) << c.name;
    float scale = 0;
    for (float x : want) scale = std::max(scale, std::abs(x));
    std::string errors;
    for (size_t i = 0; i < want.size(); ++i)
      if (!(std::abs(got[i] - want[i]) <=
            1e-4f * std::max(1.0f, scale) + 1e-3f * std::abs(want[i])))
        errors += " [" + std::to_string(i) + "] " + std::to_string(got[i]) + " vs " +
                  std::to_string(want[i]);
    EXPECT_EQ(errors, "") << c.name << " (" << c.op << ")";
    ++compared;
  }
  EXPECT_GT(compared, 250u);
}

// --- what is refused --------------------------------------------------------------------

TEST(Autograd, ClearErrors) {
  Graph g, other;
  Tensor x = g.tensor({2, 3});
  Tensor y = x * 2.0;
  testing::expect_error([&] { gradients(y, {x}); }, {"needs a seed gradient"});
  testing::expect_error(
      [&] {
        gradients(y.sum({0, 1}), {other.tensor({2})});
      },
      {"not in the loss's graph"});
  testing::expect_error(
      [&] {
        gradients(y.sum({0, 1}), {x.transpose(0, 1)});
      },
      {"view of its node"});
  testing::expect_error(
      [&] {
        gradients(y.sum({0, 1}), {g.tensor({2}, DType::I32)});
      },
      {"only floating-point"});
  testing::expect_error([&] { gradients(y, {x}, g.tensor({3, 2})); }, {"seed's shape"});
}

TEST(Autograd, UnusedParameterGetsZeros) {
  Graph g;
  Tensor x = g.tensor({2, 2}, DType::F64), unused = g.tensor({3}, DType::F64);
  x.set(std::vector<double>{1, 2, 3, 4});
  auto grads = gradients((x * x).sum({0, 1}), {x, unused});
  grads[0].retrieve();
  grads[1].retrieve();
  g.compile(reference());
  g.execute();
  EXPECT_EQ(grads[0].data().to_f64(), (std::vector<double>{2, 4, 6, 8}));
  EXPECT_EQ(grads[1].data().to_f64(), (std::vector<double>{0, 0, 0}));
}

TEST(Autograd, SeededVectorJacobianProduct) {
  Graph g;
  Tensor x = g.tensor({3}, DType::F64), seed = g.tensor({3}, DType::F64);
  x.set(std::vector<double>{1, 2, 3});
  seed.set(std::vector<double>{1, 10, 100});
  Tensor gx = gradients(x * x, {x}, seed)[0].retrieve();
  g.compile(reference());
  g.execute();
  EXPECT_EQ(gx.data().to_f64(), (std::vector<double>{2, 40, 600}));
}

// The compiled CPU backend runs gradient graphs as it runs any graph: an MLP's gradients
// there equal the reference interpreter's.
TEST(Autograd, GradientsCompileForTheCpu) {
  auto run = [](const Backend& backend) {
    Graph g;
    Tensor x = g.tensor({8, 16}), w1 = g.tensor({16, 32}), w2 = g.tensor({32, 4});
    x.set(std::vector<float>(128, 0.0f));
    std::vector<float> xs(128), a(512), b(128);
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0, 0.5);
    for (auto* v : {&xs, &a, &b})
      for (float& e : *v) e = d(rng);
    x.set(xs);
    w1.set(a);
    w2.set(b);
    Tensor loss = x.matmul(w1).gelu().matmul(w2).log_softmax(-1).mean({0, 1});
    auto grads = gradients(loss, {w1, w2});
    for (Tensor& t : grads) t.retrieve();
    g.compile(backend);
    g.execute();
    return std::make_pair(grads[0].to_f32(), grads[1].to_f32());
  };
  const auto want = run(reference());
  const auto got = run(cpu());
  ASSERT_EQ(got.first.size(), want.first.size());
  for (size_t i = 0; i < want.first.size(); ++i)
    EXPECT_NEAR(got.first[i], want.first[i], 1e-5 + 1e-4 * std::abs(want.first[i])) << i;
  for (size_t i = 0; i < want.second.size(); ++i)
    EXPECT_NEAR(got.second[i], want.second[i], 1e-5 + 1e-4 * std::abs(want.second[i])) << i;
}

}  // namespace
}  // namespace luminal
