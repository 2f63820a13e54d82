// A tiny random-weight HF model's logits for a prompt and for greedy decode steps
// through the KV cache, against the transformers goldens in tests/fixtures/models/<arch>
// (made by tools/fixtures/make_models.py), on any backend.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/models/bert.hpp"
#include "luminal/models/gemma.hpp"
#include "luminal/models/llama.hpp"
#include "luminal/models/safetensors.hpp"

namespace luminal::models {

/// Fixture model folders written by transformers 4 and, suffixed _tf5, by transformers 5.
inline const char* const kLlamaFixtures[] = {
    "llama",      "qwen2",       "mistral",     "mistral_window",    "qwen3",
    "phi3",       "mixtral",     "qwen3_moe",   "llama_linear",      "llama3_rope",
    "qwen2_yarn"};
inline const char* const kLlamaFixturesTf5[] = {
    "llama_tf5",       "qwen2_tf5",         "mistral_tf5",       "mistral_window_tf5",
    "qwen3_tf5",       "phi3_tf5",          "mixtral_tf5",       "qwen3_moe_tf5",
    "mixtral_fused_tf5", "qwen3_moe_fused_tf5", "llama_linear_tf5", "llama3_rope_tf5",
    "qwen2_yarn_tf5"};
inline const char* const kGemmaFixtures[] = {"gemma", "gemma2", "gemma3", "gemma3_scaled"};
inline const char* const kGemmaFixturesTf5[] = {"gemma_tf5", "gemma2_tf5", "gemma3_tf5",
                                                "gemma3_scaled_tf5"};
inline const char* const kEncoderFixtures[] = {"bert_tf5"};

inline std::string model_fixture_dir(const std::string& arch) {
  return std::string(LUMINAL_FIXTURE_DIR) + "/models/" + arch;
}

// Relative error against the largest logit magnitude of the row set, as fp32 allows.
inline void expect_logits(const std::vector<float>& got, const Buffer& want, const std::string& what) {
  const auto w = want.to_f32();
  ASSERT_EQ(got.size(), w.size()) << what;
  float scale = 0;
  for (float v : w) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_NEAR(got[i], w[i], 1e-4f * scale) << what << " element " << i;
}

template <class Model, class Config>
void run_parity(const std::string& arch, const Backend& backend) {
  const std::string kDir = model_fixture_dir(arch);
  const Config cfg = Config::from_hf_json(kDir + "/config.json");
  Graph cx;
  Model model(cx, cfg);
  Tensor tokens = cx.named_tensor("tokens", {"seq"}, DType::I32);
  typename Model::Output out = model.forward(tokens);
  out.logits.retrieve();
  for (auto& c : out.cache) {
    c.k.retrieve();
    c.v.retrieve();
  }
  // Every tensor in the checkpoint is used (a tied output embedding excepted).
  bool tied = true;  // Gemma always ties
  if constexpr (std::is_same_v<Config, LlamaConfig>) tied = cfg.tie_embeddings;
  for (const std::string& unused : load_safetensors_weights(model, kDir + "/model.safetensors"))
    EXPECT_TRUE(tied && unused == "lm_head.weight") << arch << ": unused tensor " << unused;
  cx.compile(backend);

  const SafetensorsFile expected(kDir + "/expected.safetensors");
  const std::vector<int64_t> all = expected.read("tokens").to_i64();
  const size_t prompt = all.size() - 3;
  // Empty caches for the prefill.
  for (auto& c : model.cache_inputs) {
    c.k.set(std::vector<float>{});
    c.v.set(std::vector<float>{});
  }
  int64_t past = 0;
  auto step = [&](const std::vector<int64_t>& ids) {
    cx.set_dim("seq", static_cast<int64_t>(ids.size()));
    cx.set_dim("past", past);
    tokens.set(std::vector<int32_t>(ids.begin(), ids.end()));
    cx.execute();
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << arch << ": kernels run on the host";
    past += static_cast<int64_t>(ids.size());
    for (size_t l = 0; l < out.cache.size(); ++l) {  // feed the grown cache back in
      model.cache_inputs[l].k.set_buffer(out.cache[l].k.data());
      model.cache_inputs[l].v.set_buffer(out.cache[l].v.data());
    }
    return out.logits.to_f32();
  };
  expect_logits(step({all.begin(), all.begin() + static_cast<std::ptrdiff_t>(prompt)}),
                expected.read("prefill_logits"), "prefill");
  for (size_t s = 0; s < 3; ++s)
    expect_logits(step({all[prompt + s]}), expected.read("step" + std::to_string(s) + "_logits"),
                  "decode step " + std::to_string(s));
}

// A tiny random-weight BERT's last hidden states and sentence embedding for sentences of
// several lengths (one compile, the length a dim), against transformers' BertModel.
inline void run_encoder_parity(const std::string& arch, const Backend& backend) {
  const std::string kDir = model_fixture_dir(arch);
  Graph cx;
  Bert bert(cx, BertConfig::from_hf_json(kDir + "/config.json"));
  Tensor ids = cx.named_tensor("ids", {"seq"}, DType::I32);
  Tensor hidden = bert.forward(ids).retrieve();
  Tensor embedding = bert.embed(ids).retrieve();
  for (const std::string& unused : load_safetensors_weights(bert, kDir + "/model.safetensors"))
    ADD_FAILURE() << arch << ": unused tensor " << unused;
  cx.compile(backend);
  const SafetensorsFile expected(kDir + "/expected.safetensors");
  for (size_t k = 0; expected.has("ids" + std::to_string(k)); ++k) {
    const std::string i = std::to_string(k);
    const std::vector<int64_t> want_ids = expected.read("ids" + i).to_i64();
    cx.set_dim("seq", static_cast<int64_t>(want_ids.size()));
    ids.set(std::vector<int32_t>(want_ids.begin(), want_ids.end()));
    cx.execute();
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << arch << ": kernels run on the host";
    expect_logits(hidden.to_f32(), expected.read("hidden" + i), "hidden states of input " + i);
    expect_logits(embedding.to_f32(), expected.read("embedding" + i), "embedding of input " + i);
  }
}

}  // namespace luminal::models
