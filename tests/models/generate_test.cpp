// The generator end to end on tiny models in each form `luminal generate --model` opens
// — a Hugging Face folder, a GGUF llama (q/k rows permuted as llama.cpp's converter
// writes them, Q8_0) and a GGUF qwen2 (biases, tied embeddings, Q4_0) — against Hugging
// Face transformers (tools/fixtures/make_generate.py): the prompt's ids with the model's
// special tokens, the greedy ids, and the streamed text up to the stop token.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "luminal/cpu.hpp"
#include "luminal/error.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/language_model.hpp"
#include "models/json.hpp"

namespace luminal::models {
namespace {

const std::string kDir = std::string(LUMINAL_FIXTURE_DIR) + "/generate/";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<int32_t> ids_of(const Json& j) {
  std::vector<int32_t> out;
  for (const Json& v : j.array()) out.push_back(static_cast<int32_t>(v.integer()));
  return out;
}

struct Form {
  const char* name;
  const char* model;
  const char* expected;
  friend void PrintTo(const Form& f, std::ostream* os) { *os << f.model; }
};

class Generate : public ::testing::TestWithParam<Form> {};

TEST_P(Generate, MatchesTransformers) {
  const Form& form = GetParam();
  const CpuBackend cpu;
  TextGenerator gen(kDir + form.model, cpu);
  const std::string path = kDir + form.expected;
  const Json cases = parse_json(read_file(path), path);
  ASSERT_TRUE(cases.is_array() && !cases.array().empty());
  for (const Json& c : cases.array()) {
    const std::string prompt = c.find("prompt")->string();
    const std::vector<int32_t> prompt_ids = ids_of(*c.find("prompt_ids"));
    const std::vector<int32_t> want = ids_of(*c.find("greedy_ids"));
    EXPECT_EQ(gen.encode(prompt), prompt_ids) << prompt;
    EXPECT_EQ(gen.greedy_ids(prompt_ids, static_cast<int64_t>(want.size())), want) << prompt;
    std::string streamed;
    gen.generate(prompt, static_cast<int64_t>(want.size()), {},
                 [&](const std::string& piece) { streamed += piece; });
    EXPECT_EQ(streamed, c.find("text")->string()) << prompt;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, Generate,
    ::testing::Values(Form{"hf_folder", "llama_folder", "expected_llama_folder.json"},
                      Form{"gguf_llama_q8_0", "llama.gguf", "expected_llama_gguf.json"},
                      Form{"gguf_qwen2_q4_0", "qwen2.gguf", "expected_qwen2_gguf.json"}),
    [](const auto& info) { return std::string(info.param.name); });

// The message of the error opening `path` raises.
std::string open_error(const std::string& path) {
  Graph g;
  try {
    open_language_model(path, g);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OpenLanguageModel, NamesWhatIsWrong) {
  EXPECT_NE(open_error("/no/such/model.gguf").find("no such file"), std::string::npos);
  EXPECT_NE(open_error(kDir + "expected_llama_gguf.json").find("expected a .gguf file"),
            std::string::npos);
  // A model folder without its tokenizer.
  EXPECT_NE(open_error(std::string(LUMINAL_FIXTURE_DIR) + "/models/llama").find("tokenizer.json"),
            std::string::npos);
  const auto dir = std::filesystem::temp_directory_path() / "luminal_open_model_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "vocab_size": 10})";
  EXPECT_NE(open_error(dir.string()).find("unsupported model_type 'gpt2'"), std::string::npos);
  std::filesystem::remove_all(dir);
  // A GGUF file of an architecture we do not build.
  EXPECT_NE(open_error(std::string(LUMINAL_FIXTURE_DIR) + "/gguf/mixed.gguf").find("llama."),
            std::string::npos);
}

}  // namespace
}  // namespace luminal::models
