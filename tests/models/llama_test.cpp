// Llama against Hugging Face transformers: a tiny random-weight model's logits for a
// prompt and for greedy decode steps through the KV cache, on every backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "luminal/luminal.hpp"
#include "luminal/models/gemma.hpp"
#include "luminal/models/llama.hpp"
#include "luminal/models/safetensors.hpp"
#include "models/model_parity.hpp"
#include "testing/expect_error.hpp"

namespace luminal::models {
namespace {

const std::string kDir = model_fixture_dir("llama");

// Llama (GQA 4:2), Qwen2 (qkv bias, tied embeddings, theta 1e6), Mistral (GQA 4:1).
class LlamaFamily : public ::testing::TestWithParam<const char*> {};
TEST_P(LlamaFamily, MatchesTransformersOnTheReference) {
  run_parity<Llama, LlamaConfig>(GetParam(), reference());
}
TEST_P(LlamaFamily, MatchesTransformersOnTheCpuBackend) {
  run_parity<Llama, LlamaConfig>(GetParam(), cpu());
}
TEST_P(LlamaFamily, Bf16WeightsOnTheCpuBackendStayNearTransformers) {
  run_parity<Llama, LlamaConfig>(GetParam(), cpu(), Weights::BF16);
}
#ifdef LUMINAL_HAS_CUDA
// The program the CUDA backend compiles, on the interpreter: its rewrites without a GPU.
TEST_P(LlamaFamily, MatchesTransformersThroughTheCudaProgram) {
  run_parity<Llama, LlamaConfig>(GetParam(), cuda_program_reference());
}
#endif
INSTANTIATE_TEST_SUITE_P(Arch, LlamaFamily, ::testing::ValuesIn(kLlamaFixtures));
// The same models written by transformers 5 (rope_parameters; experts in the per-expert
// layout 5.24 writes, and fused as 5.0-5.17 wrote them).
INSTANTIATE_TEST_SUITE_P(Transformers5, LlamaFamily, ::testing::ValuesIn(kLlamaFixturesTf5));

// Gemma (1 + w norms, GeGLU), Gemma 2 (soft-capping, sandwich norms, alternating
// windows), Gemma 3 (q/k norms, local RoPE base).
// Mixtral and Qwen3-MoE from GGUF files (experts stacked, as llama.cpp writes them):
// every tensor F32, then the matrices in F16 (the stacks kept in half precision).
class MoEGguf : public ::testing::TestWithParam<const char*> {};
TEST_P(MoEGguf, MatchesTransformersOnTheReference) {
  run_gguf_parity(GetParam(), std::string(GetParam()) + ".gguf", reference(), false);
}
TEST_P(MoEGguf, MatchesTransformersOnTheCpuBackend) {
  run_gguf_parity(GetParam(), std::string(GetParam()) + ".gguf", cpu(), false);
  run_gguf_parity(GetParam(), std::string(GetParam()) + "_f16.gguf", cpu(), true);
}
INSTANTIATE_TEST_SUITE_P(Files, MoEGguf, ::testing::ValuesIn(kMoEGgufFixtures));

class GemmaFamily : public ::testing::TestWithParam<const char*> {};
TEST_P(GemmaFamily, MatchesTransformersOnTheReference) {
  run_parity<Gemma, GemmaConfig>(GetParam(), reference());
}
TEST_P(GemmaFamily, MatchesTransformersOnTheCpuBackend) {
  run_parity<Gemma, GemmaConfig>(GetParam(), cpu());
}
TEST_P(GemmaFamily, Bf16WeightsOnTheCpuBackendStayNearTransformers) {
  run_parity<Gemma, GemmaConfig>(GetParam(), cpu(), Weights::BF16);
}
#ifdef LUMINAL_HAS_CUDA
TEST_P(GemmaFamily, MatchesTransformersThroughTheCudaProgram) {
  run_parity<Gemma, GemmaConfig>(GetParam(), cuda_program_reference());
}
#endif
INSTANTIATE_TEST_SUITE_P(Arch, GemmaFamily, ::testing::ValuesIn(kGemmaFixtures));
INSTANTIATE_TEST_SUITE_P(Transformers5, GemmaFamily, ::testing::ValuesIn(kGemmaFixturesTf5));

TEST(Llama, ConfigFields) {
  const LlamaConfig q = LlamaConfig::from_hf_json(model_fixture_dir("qwen2") + "/config.json");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_TRUE(q.tie_embeddings);
  EXPECT_EQ(q.rope_theta, 1000000.0);
  EXPECT_EQ(LlamaConfig::from_hf_json(model_fixture_dir("mistral") + "/config.json").kv_heads, 1);
  EXPECT_EQ(LlamaConfig::from_hf_json(model_fixture_dir("mistral_window") + "/config.json").sliding_window, 3);
  const nn::RopeScaling llama3 =
      LlamaConfig::from_hf_json(model_fixture_dir("llama3_rope") + "/config.json").rope_scaling;
  EXPECT_EQ(llama3.kind, nn::RopeScaling::Kind::Llama3);
  EXPECT_EQ(llama3.original_context, 64.0);
}

// Saving a loaded model writes back the checkpoint's tensors, byte for byte.
TEST(Llama, SavedWeightsEqualTheCheckpoint) {
  Graph cx;
  Llama model(cx, LlamaConfig::from_hf_json(kDir + "/config.json"));
  ASSERT_TRUE(load_safetensors_weights(model, kDir + "/model.safetensors").empty());
  const std::string saved =
      (std::filesystem::temp_directory_path() / "luminal_saved_llama.safetensors").string();
  save_safetensors_weights(model, saved);
  const SafetensorsFile original(kDir + "/model.safetensors"), copy(saved);
  ASSERT_EQ(copy.tensors().size(), original.tensors().size());
  for (const auto& t : original.tensors()) {
    ASSERT_TRUE(copy.has(t.name)) << t.name;
    EXPECT_EQ(copy.tensor(t.name).shape, t.shape) << t.name;
    const auto a = original.data(t), b = copy.data(copy.tensor(t.name));
    ASSERT_EQ(a.size(), b.size()) << t.name;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << t.name;
  }
  std::filesystem::remove(saved);
}

// The llama fixture's prompt logits with its weights from `weights`, on `backend`; the
// model's parameters are left in `params`.
std::vector<float> prompt_logits(const std::string& weights, const Backend& backend,
                                 std::vector<std::pair<std::string, uint32_t>>* storage = nullptr) {
  Graph cx;
  Llama model(cx, LlamaConfig::from_hf_json(kDir + "/config.json"));
  Tensor tokens = cx.named_tensor("tokens", {"seq"}, DType::I32);
  Llama::Output out = model.forward(tokens);
  out.logits.retrieve();
  EXPECT_TRUE(load_safetensors_weights(model, weights).empty());
  if (storage)
    for (const auto& [name, t] : model.named_parameters())
      storage->emplace_back(name, cx.node(t.id()).quant);
  for (auto& c : model.cache_inputs) {
    c.k.set(std::vector<float>{});
    c.v.set(std::vector<float>{});
  }
  const std::vector<int64_t> ids = SafetensorsFile(kDir + "/expected.safetensors").read("tokens").to_i64();
  cx.compile(backend);
  cx.set_dim("seq", static_cast<int64_t>(ids.size()));
  cx.set_dim("past", 0);
  tokens.set(std::vector<int32_t>(ids.begin(), ids.end()));
  cx.execute();
  return out.logits.to_f32();
}

TEST(Llama, HalfPrecisionCheckpointsStayHalfPrecision) {
  // The f32 fixture rounded to f16 and to bf16, matrices and vectors alike.
  const SafetensorsFile original(kDir + "/model.safetensors");
  for (const DType half : {DType::F16, DType::BF16}) {
    const std::string what(dtype_name(half));
    std::vector<Buffer> buffers;
    buffers.reserve(original.tensors().size());
    std::vector<NamedTensor> tensors;
    for (const auto& t : original.tensors()) {
      buffers.push_back(Buffer::from_doubles(original.read(t.name).to_f64(), half));
      tensors.push_back({t.name, t.shape, &buffers.back()});
    }
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("luminal_half_llama_" + what + ".safetensors"))
                                 .string();
    save_safetensors(path, tensors);

    // Matrices keep the file's 16 bits; vectors (norms) are widened.
    std::vector<std::pair<std::string, uint32_t>> storage;
    const std::vector<float> got = prompt_logits(path, cpu(), &storage);
    const auto kept = static_cast<uint32_t>(half == DType::F16 ? GgmlType::F16 : GgmlType::BF16);
    for (const auto& [name, quant] : storage) {
      const bool matrix = original.tensor(name).shape.size() == 2;
      EXPECT_EQ(quant, matrix ? kept : kPlainStorage) << what << " " << name;
    }
    // The CPU's products over the 16-bit weights against the reference interpreter,
    // which decodes every value and computes in f64.
    const std::vector<float> want = prompt_logits(path, reference());
    ASSERT_EQ(got.size(), want.size());
    float scale = 0;
    for (float v : want) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4f * scale) << what << " element " << i;

    // Saving writes the 16-bit values back bit for bit.
    Graph cx;
    Llama model(cx, LlamaConfig::from_hf_json(kDir + "/config.json"));
    ASSERT_TRUE(load_safetensors_weights(model, path).empty());
    const std::string saved = path + ".saved";
    save_safetensors_weights(model, saved);
    const SafetensorsFile written(path), copy(saved);
    for (const auto& t : written.tensors()) {
      if (t.shape.size() != 2) continue;
      ASSERT_EQ(copy.tensor(t.name).dtype, half) << what << " " << t.name;
      const auto a = written.data(t), b = copy.data(copy.tensor(t.name));
      ASSERT_EQ(a.size(), b.size()) << t.name;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << what << " " << t.name;
    }
    std::filesystem::remove(path);
    std::filesystem::remove(saved);
  }
}

// Scaling schemes we cannot run exactly are refused, naming the scheme.
TEST(Llama, UnsupportedRopeScalingIsAClearError) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "luminal_rope_config.json").string();
  for (const char* scaling :
       {R"({"rope_type": "dynamic", "factor": 2.0})", R"({"type": "longrope", "factor": 2.0})",
        R"({"rope_type": "llama3", "factor": 8.0})", R"("linear")"}) {
    std::ofstream(path)
        << R"({"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
                            "num_attention_heads": 2, "rope_scaling": )"
        << scaling << "}";
    testing::expect_error([&] { LlamaConfig::from_hf_json(path); }, {path.c_str(), "rope_scaling"});
  }
  std::filesystem::remove(path);
}

TEST(Llama, MissingWeightsAndBadConfigsAreClearErrors) {
  const LlamaConfig cfg = LlamaConfig::from_hf_json(kDir + "/config.json");
  Graph cx;
  LlamaConfig bigger = cfg;
  bigger.hidden *= 2;
  Llama model(cx, bigger);
  try {
    load_safetensors_weights(model, kDir + "/model.safetensors");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(LlamaConfig::from_hf_json(kDir + "/missing.json"), Error);
  EXPECT_THROW(LlamaConfig::from_hf_json(kDir + "/model.safetensors"), Error);
}

}  // namespace
}  // namespace luminal::models
