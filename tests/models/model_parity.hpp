// A tiny random-weight HF model's logits for a prompt and for greedy decode steps
// through the KV cache, against the transformers goldens in tests/fixtures/models/<arch>
// (made by tools/fixtures/make_models.py), on any backend, with the weights in f32 or
// rounded to bf16.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <type_traits>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/models/bert.hpp"
#include "luminal/models/gemma.hpp"
#include "luminal/models/gguf.hpp"
#include "luminal/models/llama.hpp"
#include "luminal/models/safetensors.hpp"
#include "testing/products_left_as_reductions.hpp"

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
/// The mixture-of-experts checkpoints as GGUF files (tests/fixtures/gguf).
inline const char* const kMoEGgufFixtures[] = {"mixtral", "qwen3_moe"};

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

// How a parity run holds the model: the fixture's f32 weights as they are (against
// transformers at f32 precision), or every weight rounded to bf16, as a bf16 checkpoint
// stores them, with an f16 KV cache (within a bound of the exact logits, the same argmax
// where the exact model's top two are further apart than the bound).
enum class Weights { F32, BF16 };

// bf16 weights: a logit error within 3% of the largest logit (the CPU backend measured
// 0.2-1%).
constexpr float kBf16LogitBound = 3e-2f;

inline void expect_logits_near(const std::vector<float>& got, const Buffer& want, size_t vocab,
                               const std::string& what) {
  const auto w = want.to_f32();
  ASSERT_EQ(got.size(), w.size()) << what;
  float scale = 0;
  for (float v : w) scale = std::max(scale, std::fabs(v));
  const float bound = kBf16LogitBound * scale;
  for (size_t row = 0; row * vocab < w.size(); ++row) {
    const auto* g = got.data() + row * vocab;
    const auto* e = w.data() + row * vocab;
    size_t best = 0, got_best = 0;
    for (size_t i = 0; i < vocab; ++i) {
      ASSERT_NEAR(g[i], e[i], bound) << what << " row " << row << " logit " << i;
      if (e[i] > e[best]) best = i;
      if (g[i] > g[got_best]) got_best = i;
    }
    float second = -INFINITY;
    for (size_t i = 0; i < vocab; ++i)
      if (i != best) second = std::max(second, e[i]);
    if (e[best] - second > 2 * bound) {
      EXPECT_EQ(got_best, best) << what << " row " << row << ": a different argmax";
    }
  }
}

// A copy of a safetensors file with every float tensor rounded to bf16.
inline std::string bf16_copy(const std::string& path, const std::string& tag) {
  const SafetensorsFile f(path);
  std::vector<Buffer> data;
  std::vector<NamedTensor> out;
  for (const SafetensorsTensor& t : f.tensors()) {
    const Buffer b = f.read(t.name);
    if (t.dtype == DType::F32) {
      Buffer r(DType::BF16, b.numel());
      for (size_t i = 0; i < b.numel(); ++i) r.set_f64(i, b.get_f64(i));
      data.push_back(std::move(r));
    } else {
      data.push_back(b);
    }
  }
  for (size_t i = 0; i < data.size(); ++i)
    out.push_back({f.tensors()[i].name, f.tensors()[i].shape, &data[i]});
  const std::string copy =
      (std::filesystem::temp_directory_path() / ("luminal_bf16_" + tag + ".safetensors")).string();
  save_safetensors(copy, out);
  return copy;
}

// `model`'s logits (compiled in `cx`) for the fixture's prompt and three greedy steps
// through the KV cache, against transformers' (expected.safetensors in the fixture
// folder of `arch`): to f32 precision, or within the bf16 bound where `near`.
template <class Model>
void expect_goldens(Graph& cx, Model& model, Tensor& tokens, typename Model::Output& out,
                    const std::string& arch, size_t vocab, bool near) {
  const SafetensorsFile expected(model_fixture_dir(arch) + "/expected.safetensors");
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
  const auto check = [&](const std::vector<float>& got, const std::string& name,
                         const std::string& what) {
    if (near)
      expect_logits_near(got, expected.read(name), vocab, what);
    else
      expect_logits(got, expected.read(name), what);
  };
  check(step({all.begin(), all.begin() + static_cast<std::ptrdiff_t>(prompt)}), "prefill_logits",
        "prefill");
  for (size_t s = 0; s < 3; ++s)
    check(step({all[prompt + s]}), "step" + std::to_string(s) + "_logits",
          "decode step " + std::to_string(s));
}

// `tensor_parallel`: the model is this rank's part (Llama only; see Llama's constructor).
template <class Model, class Config>
void run_parity(const std::string& arch, const Backend& backend, Weights weights = Weights::F32,
                std::shared_ptr<Communicator> tensor_parallel = nullptr) {
  const std::string kDir = model_fixture_dir(arch);
  const Config cfg = Config::from_hf_json(kDir + "/config.json");
  const bool bf16 = weights == Weights::BF16;
  Graph cx;
  const DType kv_cache = bf16 ? DType::F16 : DType::F32;
  Model model = [&] {
    if constexpr (std::is_same_v<Model, Llama>) return Model(cx, cfg, kv_cache, tensor_parallel);
    return Model(cx, cfg, kv_cache);
  }();
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
  const std::string weights_file =
      bf16 ? bf16_copy(kDir + "/model.safetensors",
                       arch + "_" + backend.name() +
                           (tensor_parallel ? "_" + std::to_string(tensor_parallel->rank()) : ""))
           : kDir + "/model.safetensors";
  for (const std::string& unused : load_safetensors_weights(model, weights_file))
    EXPECT_TRUE(tied && unused == "lm_head.weight") << arch << ": unused tensor " << unused;
  if (bf16) std::filesystem::remove(weights_file);
  EXPECT_EQ(testing::products_left_as_reductions(cx), std::vector<std::string>{}) << arch;
  cx.compile(backend);
  expect_goldens(cx, model, tokens, out, arch, static_cast<size_t>(cfg.vocab), bf16);
}

// The same checkpoint (Mixtral, Qwen3-MoE) as llama.cpp's converter writes it to GGUF
// (tools/fixtures/make_moe_gguf.py), `file` in tests/fixtures/gguf: F32 (the goldens to
// f32 precision) or with half matrices (`half`: within the bf16 bound).
inline void run_gguf_parity(const std::string& arch, const std::string& file,
                            const Backend& backend, bool half) {
  const GgufFile f(std::string(LUMINAL_FIXTURE_DIR) + "/gguf/" + file);
  const LlamaConfig cfg = LlamaConfig::from_gguf(f);
  const LlamaConfig hf = LlamaConfig::from_hf_json(model_fixture_dir(arch) + "/config.json");
  EXPECT_EQ(cfg.experts, hf.experts) << file;
  EXPECT_EQ(cfg.experts_per_token, hf.experts_per_token) << file;
  EXPECT_EQ(cfg.expert_intermediate, hf.expert_intermediate) << file;
  Graph cx;
  Llama model(cx, cfg, half ? DType::F16 : DType::F32);
  Tensor tokens = cx.named_tensor("tokens", {"seq"}, DType::I32);
  Llama::Output out = model.forward(tokens);
  out.logits.retrieve();
  for (auto& c : out.cache) {
    c.k.retrieve();
    c.v.retrieve();
  }
  for (const std::string& unused :
       load_gguf_weights(model, f, f.get_string("general.architecture")))
    ADD_FAILURE() << file << ": unused tensor " << unused;
  cx.compile(backend);
  expect_goldens(cx, model, tokens, out, arch, static_cast<size_t>(cfg.vocab), half);
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
