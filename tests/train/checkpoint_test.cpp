// Training checkpoints: a run stopped after some steps and resumed from its checkpoint
// takes bit-identical next steps on the CPU; broken checkpoints are refused by name.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "luminal/luminal.hpp"
#include "luminal/models/safetensors.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/checkpoint.hpp"
#include "luminal/train/optimizer.hpp"
#include "testing/expect_error.hpp"

namespace luminal {
namespace {

using namespace train;

std::vector<float> randoms(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, 0.5f);
  std::vector<float> out(n);
  for (float& x : out) x = d(rng);
  return out;
}

// A two-layer regression model trained by AdamW with a warm-up and cosine decay.
struct TrainingRun {
  Graph g;
  Tensor w1, w2, x, y, loss;
  std::optional<Optimizer> opt;

  explicit TrainingRun(int64_t width = 8) {
    w1 = g.named_tensor("w1", {4, width});
    w2 = g.named_tensor("w2", {width, 3});
    x = g.named_tensor("x", {16, 4});
    y = g.named_tensor("y", {16, 3});
    w1.set(randoms(static_cast<size_t>(4 * width), 1));
    w2.set(randoms(static_cast<size_t>(width * 3), 2));
    const Tensor err = x.matmul(w1).tanh().matmul(w2) - y;
    loss = (err * err).mean({0, 1}).retrieve();
    opt = adamw({w1, w2}, gradients(loss, {w1, w2}), warmup_cosine(0.05, 2, 10),
                {.weight_decay = 0.1});
    g.compile(cpu());
  }
  // One step on batch `b`.
  float step(int b) {
    x.set(randoms(64, 100 + static_cast<uint32_t>(b)));
    y.set(randoms(48, 200 + static_cast<uint32_t>(b)));
    g.execute();
    const float l = loss.to_f32()[0];
    opt->advance();
    return l;
  }
  std::vector<float> weights() const {
    std::vector<float> out = g.data(w1.id())->to_f32();
    const auto b = g.data(w2.id())->to_f32();
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }
};

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

TEST(Checkpoint, ResumingTakesTheSameSteps) {
  TrainingRun straight;
  std::vector<float> straight_losses;
  for (int b = 0; b < 6; ++b) straight_losses.push_back(straight.step(b));

  const std::string path = temp_path("luminal_resume.safetensors");
  {
    TrainingRun first;
    for (int b = 0; b < 3; ++b) first.step(b);
    save_checkpoint(path, first.opt.value());
  }
  TrainingRun resumed;
  load_checkpoint(path, resumed.opt.value());
  EXPECT_EQ(resumed.opt->steps(), 3);
  for (int b = 3; b < 6; ++b)
    EXPECT_EQ(resumed.step(b), straight_losses[static_cast<size_t>(b)]) << b;
  EXPECT_EQ(resumed.weights(), straight.weights());
  std::filesystem::remove(path);
}

TEST(Checkpoint, BrokenCheckpointsAreRefusedByName) {
  const std::string path = temp_path("luminal_ckpt.safetensors");
  TrainingRun run;
  run.step(0);
  save_checkpoint(path, run.opt.value());
  // Another width: every parameter and moment of w1 and w2 has another shape.
  TrainingRun wider(9);
  const std::vector<float> before = wider.g.data(wider.w1.id())->to_f32();
  testing::expect_error([&] { load_checkpoint(path, wider.opt.value()); }, {"w1 in"});
  EXPECT_EQ(wider.g.data(wider.w1.id())->to_f32(), before) << "nothing is set on a refusal";
  // A tensor missing.
  const std::string partial = temp_path("luminal_partial.safetensors");
  const Buffer w1 = *run.g.data(run.w1.id());
  models::save_safetensors(partial, {{"w1", {4, 8}, &w1}}, {{"luminal.train.runs", "1"}});
  testing::expect_error([&] { load_checkpoint(partial, run.opt.value()); }, {"lacks w2"});
  // Not a training checkpoint.
  models::save_safetensors(partial, {{"w1", {4, 8}, &w1}});
  testing::expect_error([&] { load_checkpoint(partial, run.opt.value()); }, {"no run count"});
  testing::expect_error(
      [&] { load_checkpoint(temp_path("luminal_missing.safetensors"), run.opt.value()); }, {});
  std::filesystem::remove(path);
  std::filesystem::remove(partial);
}

}  // namespace
}  // namespace luminal
