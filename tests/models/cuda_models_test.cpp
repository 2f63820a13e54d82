// Every HF model parity fixture (transformers 4 and 5 folders) on the CUDA backend:
// prefill and KV-cache decode logits against transformers' (f32 weights, and bf16 ones
// within a bound), BERT's hidden states, greedy generation, and sampled decoding's draw (label
// gpu; skips without a GPU).
#include <gtest/gtest.h>

#include "models/generate_cases.hpp"
#include "models/model_parity.hpp"
#include "models/sampling_cases.hpp"

namespace luminal::models {
namespace {

class CudaModel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  }
};

class CudaLlamaFamily : public CudaModel {};
TEST_P(CudaLlamaFamily, MatchesTransformers) {
  run_parity<Llama, LlamaConfig>(GetParam(), cuda());
}
TEST_P(CudaLlamaFamily, Bf16WeightsStayNearTransformers) {
  run_parity<Llama, LlamaConfig>(GetParam(), cuda(), Weights::BF16);
}
INSTANTIATE_TEST_SUITE_P(Arch, CudaLlamaFamily, ::testing::ValuesIn(kLlamaFixtures));
INSTANTIATE_TEST_SUITE_P(Transformers5, CudaLlamaFamily, ::testing::ValuesIn(kLlamaFixturesTf5));

class CudaMoEGguf : public CudaModel {};
TEST_P(CudaMoEGguf, MatchesTransformers) {
  run_gguf_parity(GetParam(), std::string(GetParam()) + ".gguf", cuda(), false);
  run_gguf_parity(GetParam(), std::string(GetParam()) + "_f16.gguf", cuda(), true);
}
INSTANTIATE_TEST_SUITE_P(Files, CudaMoEGguf, ::testing::ValuesIn(kMoEGgufFixtures));

class CudaGemmaFamily : public CudaModel {};
TEST_P(CudaGemmaFamily, MatchesTransformers) {
  run_parity<Gemma, GemmaConfig>(GetParam(), cuda());
}
TEST_P(CudaGemmaFamily, Bf16WeightsStayNearTransformers) {
  run_parity<Gemma, GemmaConfig>(GetParam(), cuda(), Weights::BF16);
}
INSTANTIATE_TEST_SUITE_P(Arch, CudaGemmaFamily, ::testing::ValuesIn(kGemmaFixtures));
INSTANTIATE_TEST_SUITE_P(Transformers5, CudaGemmaFamily, ::testing::ValuesIn(kGemmaFixturesTf5));

class CudaEncoder : public CudaModel {};
TEST_P(CudaEncoder, MatchesTransformers) {
  run_encoder_parity(GetParam(), cuda());
}
INSTANTIATE_TEST_SUITE_P(Bert, CudaEncoder, ::testing::ValuesIn(kEncoderFixtures));

// Greedy generation, the caches kept on the GPU between steps: an HF folder, and GGUF
// files whose block-quantised products (Q8_0, Q4_0, Q4_K, Q6_K) are decoded on the GPU.
class CudaGenerate : public ::testing::TestWithParam<GenerateForm> {};
TEST_P(CudaGenerate, MatchesTransformers) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  expect_generation_matches_transformers(GetParam(), cuda());
}
INSTANTIATE_TEST_SUITE_P(Forms, CudaGenerate, ::testing::ValuesIn(kGenerateForms),
                         [](const auto& info) { return std::string(info.param.name); });

// Sampled decoding's draw on the GPU (DeviceSampler): the reference interpreter's check.
TEST(CudaSampling, TheDrawAsGraphOpsFollowsTheTruncatedSoftmax) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  check_device_draw(cuda(), 5000);
}

}  // namespace
}  // namespace luminal::models
