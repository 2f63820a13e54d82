// Random weights (luminal generate --random-weights): values fixed by name and position
// alone, of the stated spread, and split over ranks as the whole model holds them.
#include "luminal/models/random_weights.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "luminal/collective.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/reference.hpp"
#include "models/generate_cases.hpp"
#include "testing/expect_error.hpp"

namespace luminal::models {
namespace {

std::vector<float> values(const nn::WeightSource& source, const std::string& name,
                          const std::vector<int64_t>& shape) {
  const std::optional<Buffer> b = source(name, shape);
  EXPECT_TRUE(b.has_value()) << name;
  EXPECT_EQ(b->dtype(), DType::BF16) << name;
  return b->to_f32();
}

TEST(RandomWeights, ValuesDependOnSeedNameAndPositionAlone) {
  const nn::WeightSource source = random_weights(), again = random_weights(),
                         other_seed = random_weights(1);
  const std::vector<float> a = values(source, "layers.0.q_proj.weight", {64, 96});
  EXPECT_EQ(a, values(again, "layers.0.q_proj.weight", {64, 96}));
  // Another shape of as many elements: the same values in the same order.
  EXPECT_EQ(a, values(source, "layers.0.q_proj.weight", {6144}));
  // The first rows of a longer tensor are the shorter one's.
  const std::vector<float> longer = values(source, "layers.0.q_proj.weight", {128, 96});
  EXPECT_TRUE(std::equal(a.begin(), a.end(), longer.begin()));
  EXPECT_NE(a, values(source, "layers.1.q_proj.weight", {64, 96}));
  EXPECT_NE(a, values(other_seed, "layers.0.q_proj.weight", {64, 96}));
}

// A rank's part, made alone, is take_part of the whole tensor, on either dimension split.
TEST(RandomWeights, ARanksPartIsThePartOfTheWhole) {
  const nn::WeightSource whole = random_weights();
  for (int dim : {0, 1, 2})
    for (int rank : {0, 2}) {
      const nn::Sharding sharding{[dim](const std::string& name) -> std::optional<int> {
                                    if (name == "unsplit") return std::nullopt;
                                    return dim;
                                  },
                                  rank, 3};
      const nn::WeightSource part = random_weights(0, sharding);
      std::vector<int64_t> shape = {6, 9, 12};
      const std::optional<Buffer> all = whole("w", shape);
      const Buffer expected = take_part(*all, shape, dim, rank, 3);
      shape[static_cast<size_t>(dim)] /= 3;
      const std::optional<Buffer> mine = part("w", shape);
      ASSERT_EQ(mine->bytes(), expected.bytes());
      EXPECT_EQ(std::memcmp(mine->data(), expected.data(), expected.bytes()), 0)
          << "dim " << dim << ", rank " << rank;
      EXPECT_EQ(part("unsplit", {6, 4})->to_f32(), whole("unsplit", {6, 4})->to_f32());
    }
}

TEST(RandomWeights, MatricesHaveTheStatedSpreadAndNormsSitNearOne) {
  const nn::WeightSource source = random_weights();
  const std::vector<float> m = values(source, "model.layers.3.mlp.down_proj.weight", {1024, 1024});
  double sum = 0, squares = 0, largest = 0;
  for (float v : m)
    sum += v, squares += double{v} * v, largest = std::max(largest, std::fabs(double{v}));
  const double n = static_cast<double>(m.size()), mean = sum / n;
  EXPECT_LT(std::fabs(mean), 2e-4);  // 0.02 / sqrt(n) = 2e-5 is one standard error
  EXPECT_NEAR(std::sqrt(squares / n - mean * mean), 0.02, 2e-4);
  EXPECT_LE(largest, std::sqrt(3.0) * 0.02 * 1.01);  // uniform: bounded
  for (const char* name : {"model.norm.weight", "model.layers.0.input_layernorm.weight",
                           "model.layers.0.self_attn.q_norm.weight"})
    for (float v : values(source, name, {4096}))  // 1 +- 0.1, and bf16 rounds by 2^-8 there
      ASSERT_TRUE(v >= 0.896f && v <= 1.104f) << name << " " << v;
}

// The tensor-parallel ranks of a model with random weights give the one-rank model's
// logits: each rank took its part of the same values.
TEST(RandomWeights, RanksSplitTheWholeModelsValues) {
  const std::string folder = kGenerateDir + "llama_folder";
  const ReferenceBackend reference;
  const std::vector<int32_t> prompt = {3, 17, 42, 5}, fed = {9, 100, 7};
  TextGenerator one(folder, reference, {}, DType::F32, nullptr, WeightsFrom::Random);
  const std::vector<std::vector<float>> whole = one.forced_logits(prompt, fed);
  // Random weights are not the folder's: the logits are another model's.
  TextGenerator from_files(folder, reference, {}, DType::F32);
  EXPECT_NE(from_files.forced_logits(prompt, fed)[0], whole[0]);

  std::vector<std::shared_ptr<Communicator>> group = local_group(2);
  std::vector<std::vector<std::vector<float>>> parts(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      TextGenerator rank(folder, reference, {}, DType::F32, group[static_cast<size_t>(r)],
                         WeightsFrom::Random);
      parts[static_cast<size_t>(r)] = rank.forced_logits(prompt, fed);
    });
  for (std::thread& t : ranks) t.join();
  for (const auto& part : parts) {
    ASSERT_EQ(part.size(), whole.size());
    for (size_t row = 0; row < whole.size(); ++row) {
      ASSERT_EQ(part[row].size(), whole[row].size());
      for (size_t i = 0; i < whole[row].size(); ++i)
        ASSERT_NEAR(part[row][i], whole[row][i], 1e-4 * (1 + std::fabs(whole[row][i])))
            << "row " << row << ", logit " << i;
    }
  }
}

TEST(RandomWeights, GgufFilesAreRefused) {
  Graph g;
  luminal::testing::expect_error(
      [&] {
        open_language_model(kGenerateDir + "llama.gguf", g, DType::F32, nullptr,
                            WeightsFrom::Random);
      },
      {"llama.gguf", "random weights take a Hugging Face folder"});
}

}  // namespace
}  // namespace luminal::models
