// The default real model (Gemma 3 270M, GGUF Q4_K_M) against Hugging Face transformers
// running the same dequantised weights: tokenizer ids, the first 32 greedy tokens and
// the top-5 logits of every step. Skipped, with a message, when the model package is not
// installed (scripts/get_model.sh installs it).
#include <gtest/gtest.h>

#include <fstream>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "luminal/luminal.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/safetensors.hpp"
#include "luminal/models/tokenizer.hpp"
#include "models/json.hpp"

namespace luminal::models {
namespace {

std::string model_path() {
  if (const char* p = std::getenv("LUMINAL_GEMMA_GGUF")) return p;
  return std::string(LUMINAL_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
}

const std::string kReference =
    std::string(LUMINAL_FIXTURE_DIR) + "/models/gemma3_reference.safetensors";

std::vector<int32_t> ids_of(const Buffer& b) {
  std::vector<int32_t> out;
  for (int64_t v : b.to_i64()) out.push_back(static_cast<int32_t>(v));
  return out;
}

// One prompt of the reference fixture: its ids, transformers' greedy tokens, and each
// step's top-5 token ids and logits.
struct ReferencePrompt {
  std::string name;
  std::vector<int32_t> prompt, tokens;
  std::vector<int64_t> top_ids;
  std::vector<float> top_logits;
};

ReferencePrompt reference_prompt(const SafetensorsFile& ref, int k) {
  const std::string p = "p" + std::to_string(k);
  return {p, ids_of(ref.read(p + ".prompt_ids")), ids_of(ref.read(p + ".tokens")),
          ref.read(p + ".top5_ids").to_i64(), ref.read(p + ".top5_logits").to_f32()};
}

class Gemma3Real : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_path()))
      GTEST_SKIP() << "Gemma 3 270M is not installed at " << model_path()
                   << " (run scripts/get_model.sh)";
  }
};

// The prompts of the generation reference; the tokenizer's full check against llama.cpp
// is tests/models/tokenizer_goldens_test.cpp.
TEST_F(Gemma3Real, TokenizerEncodesTheReferencePrompts) {
  GgufFile f(model_path());
  SpmTokenizer tok(f);
  SafetensorsFile ref(kReference);
  const Json prompts = parse_json(ref.metadata().at("prompts"), "prompts");
  for (size_t k = 0; k < 3; ++k) {
    const auto want = ids_of(ref.read("p" + std::to_string(k) + ".prompt_ids"));
    EXPECT_EQ(tok.encode(prompts.array()[k].string(), true), want) << "prompt " << k;
  }
}

// With f32 activations (CpuOptions::int8_activations off) the compiled model computes
// what transformers computes on the dequantised weights, up to summation order.
TEST_F(Gemma3Real, GreedyGenerationMatchesTransformers) {
  TextGenerator gen(model_path(), cpu({.int8_activations = false}));
  SafetensorsFile ref(kReference);
  for (int k = 0; k < 3; ++k) {
    const auto& [p, prompt, want, top_ids, top_logits] = reference_prompt(ref, k);
    std::vector<std::vector<float>> logits;
    const auto got = gen.greedy_ids(prompt, static_cast<int64_t>(want.size()), &logits);
    EXPECT_EQ(got, want) << p << ": " << gen.decode(got) << " vs " << gen.decode(want);
    // Documented tolerance: each reference top-5 logit within 1% of the step's largest
    // logit magnitude (f32 with different summation orders over 18 layers).
    for (size_t s = 0; s < want.size() && s < logits.size(); ++s) {
      const float scale = std::fabs(top_logits[s * 5]);
      for (size_t j = 0; j < 5; ++j) {
        const auto id = static_cast<size_t>(top_ids[s * 5 + j]);
        EXPECT_NEAR(logits[s][id], top_logits[s * 5 + j], 0.01f * scale)
            << p << " step " << s << " rank " << j;
      }
    }
  }
}

// Fed the reference tokens (teacher forcing), every step's top-5 logits are within
// `tolerance` (a fraction of the step's largest logit magnitude) of the reference, and the
// top token agrees wherever the reference's lead is clear of twice that. Returns the
// largest deviation seen, as that fraction.
double expect_forced_logits_track(TextGenerator& gen, const SafetensorsFile& ref, float tolerance) {
  double worst = 0;
  for (int k = 0; k < 3; ++k) {
    const auto& [p, prompt, want, top_ids, top_logits] = reference_prompt(ref, k);
    const auto logits = gen.forced_logits(prompt, want);
    for (size_t s = 0; s < want.size(); ++s) {
      const float tol = tolerance * std::fabs(top_logits[s * 5]);
      for (size_t j = 0; j < 5; ++j) {
        const auto id = static_cast<size_t>(top_ids[s * 5 + j]);
        const double err = std::fabs(logits[s][id] - top_logits[s * 5 + j]);
        worst = std::max(worst, err / std::fabs(top_logits[s * 5]));
        EXPECT_LE(err, tol) << p << " step " << s << " rank " << j << ": " << logits[s][id]
                            << " vs " << top_logits[s * 5 + j];
      }
      if (top_logits[s * 5] - top_logits[s * 5 + 1] > 2 * tol) {
        const auto best = std::max_element(logits[s].begin(), logits[s].end()) - logits[s].begin();
        EXPECT_EQ(best, want[s]) << p << " step " << s;
      }
    }
  }
  return worst;
}

// The default kernels quantise activations to 8 bits (as llama.cpp does), so greedy
// paths may part where two tokens are nearly tied; teacher-forced, they track the
// reference. Documented tolerance: 8% of the step's largest logit magnitude. llama.cpp
// on the same file (it also quantises activations to 8 bits) deviates from this
// reference by up to 6.0% on these prompts (docs/models.md).
TEST_F(Gemma3Real, Int8ActivationKernelsTrackTransformers) {
  TextGenerator gen(model_path(), cpu());
  const double worst = expect_forced_logits_track(gen, SafetensorsFile(kReference), 0.08f);
  std::printf("largest logit deviation: %.2f%% of the step's top logit\n", 100 * worst);
}

// A KV cache kept in f16 rounds keys and values to 11 significant bits. With f32
// activations, so that the cache is the only difference, documented tolerance: 0.5% of
// the step's largest logit magnitude (0.03% measured).
TEST_F(Gemma3Real, HalfPrecisionKvCacheTracksTransformers) {
  TextGenerator gen(model_path(), cpu({.int8_activations = false}), {}, DType::F16);
  const double worst = expect_forced_logits_track(gen, SafetensorsFile(kReference), 0.005f);
  std::printf("largest logit deviation: %.2f%% of the step's top logit\n", 100 * worst);
}

// The default path (`luminal generate`: int8 activations, f16 KV cache) against llama.cpp's
// greedy continuations of 8 varied prompts (code, a list, French, Chinese, the chat
// template, JSON, a table, arithmetic; tools/fixtures/make_greedy_goldens.py): the same
// prompt ids, and the same tokens up to the first step where llama.cpp's own top-2 logit
// margin is a near-tie (below kNearTie logits); any earlier divergence fails. Fed
// llama.cpp's tokens, the same top token at every step that is no near-tie.
TEST_F(Gemma3Real, GreedyGenerationMatchesLlamaCpp) {
  // Both sides quantise activations to 8 bits (in different blocks and orders), which
  // moves a logit by up to ~1 on this model (Int8ActivationKernelsTrackTransformers);
  // typical moves are far smaller.
  constexpr double kNearTie = 0.5;
  const std::string path = std::string(LUMINAL_FIXTURE_DIR) + "/generate/llamacpp_greedy_gemma3.json";
  std::ifstream f(path);
  const Json golden = parse_json(std::string{std::istreambuf_iterator<char>(f), {}}, path);
  TextGenerator gen(model_path(), cpu(), {}, DType::F16);
  int64_t compared = 0;
  for (const Json& c : golden.find("cases")->array()) {
    const std::string prompt = c.find("prompt")->string();
    std::vector<int32_t> prompt_ids, want;
    std::vector<double> margins;
    for (const Json& id : c.find("prompt_ids")->array()) prompt_ids.push_back(static_cast<int32_t>(id.integer()));
    for (const Json& id : c.find("tokens")->array()) want.push_back(static_cast<int32_t>(id.integer()));
    for (const Json& m : c.find("margins")->array()) margins.push_back(m.number());
    ASSERT_EQ(gen.encode(prompt), prompt_ids) << prompt;
    size_t must = 0;  // steps before llama.cpp's first near-tie
    while (must < margins.size() && margins[must] >= kNearTie) ++must;
    // Free-running, only the steps up to the near-tie can be held to llama.cpp's.
    const auto got = gen.greedy_ids(prompt_ids, static_cast<int64_t>(std::min(want.size(), must + 1)));
    const size_t agree = static_cast<size_t>(
        std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
    EXPECT_GE(agree, std::min(must, got.size())) << ::testing::PrintToString(prompt) << ": luminal chose " << got[agree]
                           << " at step " << agree << " where llama.cpp chose " << want[agree]
                           << " by a margin of " << margins[agree] << " (first near-tie at step "
                           << must << ")";
    std::printf("%-40s agree for %zu of %zu steps run (llama.cpp's first near-tie: step %zu)\n",
                ::testing::PrintToString(prompt.substr(0, 30)).c_str(), agree, got.size(), must);
    compared += static_cast<int64_t>(std::min(agree, must));
    // Fed llama.cpp's tokens (teacher forcing), every step past the near-ties is checked:
    // where llama.cpp's choice is clear, luminal's is the same.
    const auto rows = gen.forced_logits(prompt_ids, want);
    for (size_t s = 0; s < want.size(); ++s) {
      if (margins[s] < kNearTie) continue;
      const auto best = std::max_element(rows[s].begin(), rows[s].end()) - rows[s].begin();
      EXPECT_EQ(best, want[s]) << ::testing::PrintToString(prompt) << " step " << s
                               << " (llama.cpp's margin " << margins[s] << ")";
      ++compared;
    }
  }
  std::printf("%lld steps compared with llama.cpp's choice\n", static_cast<long long>(compared));
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace luminal::models
