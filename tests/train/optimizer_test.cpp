// Optimizers as graph nodes (luminal/train/optimizer.hpp) against torch.optim: five
// steps of a small regression model from the same weights (goldens written by
// tools/fixtures/make_training.py), plus schedules, clipping and errors.
#include <gtest/gtest.h>

#include <cmath>

#include "hlops/fixture.hpp"
#include "luminal/luminal.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/loss_scale.hpp"
#include "luminal/train/optimizer.hpp"
#include "testing/expect_error.hpp"

namespace luminal {
namespace {

using namespace train;

Schedule schedule_of(const testing::Params& p) {
  if (!p.has("schedule")) return constant_lr(p.f("lr"));
  EXPECT_EQ(p.str("schedule"), "warmup_cosine");
  return warmup_cosine(p.f("lr"), p.i("warmup"), p.i("total"), p.f("min_lr"));
}

double get(const testing::Params& p, const char* key, double fallback) {
  return p.has(key) ? p.f(key) : fallback;
}

// Trains the fixture's model for five steps with `backend`; returns the final weights
// followed by the five losses, as the golden lays them out.
std::vector<float> train_case(const testing::ParityCase& c, const Backend& backend) {
  const testing::Params p(c.params);
  Graph g;
  auto input = [&](const char* name, size_t k) {
    const auto& base = c.inputs[k].base;
    Tensor t = g.named_tensor(name, std::vector<Expr>(base.shape.begin(), base.shape.end()));
    t.set_buffer(base.data);
    return t;
  };
  Tensor w1 = input("w1", 0), w2 = input("w2", 1), x = input("x", 2), y = input("y", 3);
  const Tensor err = x.matmul(w1).tanh().matmul(w2) - y;
  Tensor loss = (err * err).mean({0, 1});
  std::vector<Tensor> grads = gradients(loss, {w1, w2});
  if (p.has("clip")) grads = clip_grad_norm(grads, p.f("clip"));
  const Schedule lr = schedule_of(p);
  Optimizer opt = c.op == "sgd"
                      ? sgd({w1, w2}, grads, lr,
                            {get(p, "momentum", 0), get(p, "dampening", 0),
                             get(p, "weight_decay", 0), p.has("nesterov") && p.i("nesterov") == 1})
                      : (c.op == "adam" ? adam : adamw)(
                            {w1, w2}, grads, lr,
                            {get(p, "beta1", 0.9), get(p, "beta2", 0.999), get(p, "eps", 1e-8),
                             get(p, "weight_decay", c.op == "adam" ? 0.0 : 0.01)});
  loss.retrieve();
  g.compile(backend);
  std::vector<float> losses;
  for (int step = 0; step < 5; ++step) {
    g.execute();
    losses.push_back(loss.to_f32()[0]);
    opt.advance();
  }
  std::vector<float> out = g.data(w1.id())->to_f32();
  const std::vector<float> second = g.data(w2.id())->to_f32();
  out.insert(out.end(), second.begin(), second.end());
  out.insert(out.end(), losses.begin(), losses.end());
  return out;
}

class Optimizers : public ::testing::TestWithParam<const char*> {};

TEST_P(Optimizers, MatchTorchOptim) {
  const auto cases =
      testing::load_fixture(std::string(LUMINAL_FIXTURE_DIR) + "/train/optimizers.lfx");
  ASSERT_GE(cases.size(), 8u);
  const std::unique_ptr<Backend> backend = std::string(GetParam()) == "cpu"
                                               ? std::unique_ptr<Backend>(new CpuBackend())
                                               : std::unique_ptr<Backend>(new ReferenceBackend());
  for (const auto& c : cases) {
    const std::vector<float> got = train_case(c, *backend);
    const std::vector<float> want = c.expected.data.to_f32();
    ASSERT_EQ(got.size(), want.size()) << c.name;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 2e-5 + 2e-4 * std::abs(want[i])) << c.name << " element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Optimizers, ::testing::Values("reference", "cpu"));

// Two micro-batches of four rows, accumulated, update as one batch of eight does; the
// parameters stay as they are on the runs between updates.
TEST(Optimizer, AccumulatedMicroBatchesEqualOneBatch) {
  const std::vector<float> x = {0.1f,  -0.4f, 0.9f,  0.3f,  -0.7f, 0.2f,  0.5f,  -0.1f,  //
                                0.6f,  0.8f,  -0.3f, 0.2f,  0.4f,  -0.9f, 0.1f,  0.7f,   //
                                -0.2f, 0.5f,  0.3f,  -0.6f, 0.9f,  0.1f,  -0.8f, 0.4f,   //
                                0.3f,  -0.5f, -0.6f, 0.8f,  -0.1f, 0.6f,  0.2f,  -0.3f};
  const std::vector<float> y = {0.5f, -0.2f, 0.1f, 0.3f, 0.7f, -0.6f, -0.4f, 0.2f};
  auto run = [&](int64_t rows, int64_t accumulate, bool sgd_momentum) {
    Graph g;
    Tensor w = g.named_tensor("w", {4, 1}), xs = g.named_tensor("x", {rows, 4}),
           ys = g.named_tensor("y", {rows, 1});
    w.set(std::vector<float>{0.2f, -0.1f, 0.4f, 0.05f});
    const Tensor err = xs.matmul(w) - ys;
    const Tensor loss = (err * err).mean({0, 1});
    auto grads = gradients(loss, {w});
    Optimizer opt =
        sgd_momentum
            ? sgd({w}, grads, constant_lr(0.1), {.momentum = 0.9, .accumulate = accumulate})
            : adamw({w}, grads, warmup_cosine(0.05, 1, 4), {.accumulate = accumulate});
    g.compile(reference());
    std::vector<std::vector<float>> after;
    for (int64_t r = 0; r < 3 * accumulate; ++r) {
      const size_t first = static_cast<size_t>((r % accumulate) * rows);
      xs.set(std::vector<float>(
          x.begin() + static_cast<std::ptrdiff_t>(first * 4),
          x.begin() + static_cast<std::ptrdiff_t>((first + static_cast<size_t>(rows)) * 4)));
      ys.set(std::vector<float>(
          y.begin() + static_cast<std::ptrdiff_t>(first),
          y.begin() + static_cast<std::ptrdiff_t>(first + static_cast<size_t>(rows))));
      g.execute();
      opt.advance();
      after.push_back(g.data(w.id())->to_f32());
    }
    EXPECT_EQ(opt.steps(), 3);
    return after;
  };
  for (bool momentum : {true, false}) {
    const auto whole = run(8, 1, momentum), parts = run(4, 2, momentum);
    for (size_t step = 0; step < 3; ++step) {
      const std::vector<float> before =
          step == 0 ? std::vector<float>{0.2f, -0.1f, 0.4f, 0.05f} : parts[2 * step - 1];
      EXPECT_EQ(parts[2 * step], before) << "no update between micro-batches";
      for (size_t i = 0; i < 4; ++i)
        EXPECT_NEAR(parts[2 * step + 1][i], whole[step][i], 1e-6) << "step " << step << " " << i;
    }
  }
}

// A step whose scaled gradients overflow f16 changes nothing and is not counted; the
// scale halves, and the next step goes through with the gradients divided back.
TEST(LossScale, AnOverflowSkipsTheStepAndHalvesTheScale) {
  Graph g;
  Tensor w = g.named_tensor("w", {3});
  w.set(std::vector<float>{1, 2, 3});
  // d loss / d (w as f16) is the scale itself: 65536 is past f16's largest, 32768 not.
  const Tensor loss = w.cast(DType::F16).cast(DType::F32).sum({0});
  LossScale scaler(g, {.initial = 65536});
  EXPECT_THROW(scaler.finite(), Error);
  const std::vector<Tensor> grads = scaler.gradients(loss, {w});
  Optimizer opt = sgd({w}, grads, constant_lr(0.5), {.apply_if = scaler.finite()});
  g.compile(reference());
  g.execute();
  bool counted = scaler.update();
  EXPECT_FALSE(counted);
  opt.advance(counted);
  EXPECT_EQ(scaler.scale(), 32768);
  EXPECT_EQ(opt.steps(), 0);
  EXPECT_EQ(g.data(w.id())->to_f32(), (std::vector<float>{1, 2, 3}));
  g.execute();
  counted = scaler.update();
  EXPECT_TRUE(counted);
  opt.advance(counted);
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_EQ(g.data(w.id())->to_f32(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
}

// The scale grows after `interval` good steps in a row.
TEST(LossScale, GrowsAfterAnIntervalOfGoodSteps) {
  Graph g;
  Tensor w = g.named_tensor("w", {2});
  w.set(std::vector<float>{1, 2});
  LossScale scaler(g, {.initial = 4, .interval = 3});
  const std::vector<Tensor> grads = scaler.gradients((w * w).sum({0}), {w});
  Optimizer opt = sgd({w}, grads, constant_lr(0.01), {.apply_if = scaler.finite()});
  g.compile(reference());
  for (int i = 0; i < 3; ++i) {
    g.execute();
    opt.advance(scaler.update());
  }
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_EQ(opt.steps(), 3);
}

TEST(Schedules, WarmUpThenCosine) {
  const Schedule s = warmup_cosine(1.0, 4, 12, 0.1);
  EXPECT_DOUBLE_EQ(s(0), 0.25);
  EXPECT_DOUBLE_EQ(s(3), 1.0);
  EXPECT_DOUBLE_EQ(s(4), 1.0);
  EXPECT_NEAR(s(8), 0.55, 1e-12);  // halfway down
  EXPECT_DOUBLE_EQ(s(12), 0.1);
  EXPECT_DOUBLE_EQ(s(50), 0.1);
  EXPECT_DOUBLE_EQ(linear_warmup(2.0, 4)(1), 1.0);
  EXPECT_DOUBLE_EQ(linear_warmup(2.0, 4)(9), 2.0);
  EXPECT_THROW(warmup_cosine(1.0, 5, 5), Error);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheLimit) {
  Graph g;
  Tensor a = g.tensor({2}), b = g.tensor({1});
  a.set(std::vector<float>{3, 0});
  b.set(std::vector<float>{4});  // joint norm 5
  auto clipped = clip_grad_norm({a, b}, 1.0);
  auto kept = clip_grad_norm({a, b}, 10.0);
  for (auto* v : {&clipped, &kept})
    for (Tensor& t : *v) t.retrieve();
  Tensor norm = global_norm({a, b}).retrieve();
  g.compile(reference());
  g.execute();
  EXPECT_FLOAT_EQ(norm.to_f32()[0], 5.0f);
  EXPECT_NEAR(clipped[0].to_f32()[0], 0.6f, 1e-6);
  EXPECT_NEAR(clipped[1].to_f32()[0], 0.8f, 1e-6);
  EXPECT_EQ(kept[0].to_f32(), (std::vector<float>{3, 0}));
}

TEST(Optimizer, ClearErrors) {
  Graph g;
  Tensor w = g.named_tensor("w", {2}), v = g.named_tensor("v", {2});
  w.set(std::vector<float>{1, 2});
  v.set(std::vector<float>{1, 2});
  const Tensor loss = (w * v).sum({0});
  auto grads = gradients(loss, {w, v});
  testing::expect_error([&] { adam({w}, grads, constant_lr(0.1)); }, {"1 parameters but 2"});
  testing::expect_error([&] { sgd({w * 2.0}, {grads[0]}, constant_lr(0.1)); },
                        {"not a whole input"});
  testing::expect_error([&] { sgd({w}, {grads[0]}, constant_lr(0.1), {.nesterov = true}); },
                        {"Nesterov"});
  // advance() before any run has nothing to carry.
  Optimizer opt = sgd({w}, {grads[0]}, constant_lr(0.1));
  g.compile(reference());
  testing::expect_error([&] { opt.advance(); }, {"follows an execute()"});
}

}  // namespace
}  // namespace luminal
