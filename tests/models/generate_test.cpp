// The generator end to end on the CPU (generate_cases.hpp), and opening models that are
// not there or not what they claim.
#include <gtest/gtest.h>

#include <cstring>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "luminal/cpu.hpp"
#include "luminal/error.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/language_model.hpp"
#include "models/generate_cases.hpp"
#include "models/json.hpp"
#include "testing/scoped_env.hpp"

namespace luminal::models {
namespace {

const std::string& kDir = kGenerateDir;

class Generate : public ::testing::TestWithParam<GenerateForm> {};

TEST_P(Generate, MatchesTransformers) {
  expect_generation_matches_transformers(GetParam(), CpuBackend());
}

INSTANTIATE_TEST_SUITE_P(Forms, Generate, ::testing::ValuesIn(kGenerateForms),
                         [](const auto& info) { return std::string(info.param.name); });

// With int8 activations, CpuOptions::residual selects the products that carry the
// activations' residual term: by default (sensitive) those next to each attention
// (queries, keys, values, output) and the feed-forward's down projection, 5 of every
// layer's 7 quantised products, not the gate and up projections nor the output head;
// all of them with `all`, none with `none`.
TEST(Generate, TheSensitiveProductsCarryTheResidualTerm) {
  Graph g;
  const std::string summary = open_language_model(kDir + "llama.gguf", g).summary;
  const size_t at = summary.find(" layers");
  ASSERT_NE(at, std::string::npos) << summary;
  const int layers = std::stoi(summary.substr(summary.rfind(' ', at - 1) + 1));
  const testing::ScopedEnv log("LUMINAL_LOG", "info");
  using Residual = CpuOptions::Residual;
  for (const Residual which : {Residual::none, Residual::sensitive, Residual::all}) {
    ::testing::internal::CaptureStderr();
    TextGenerator gen(kDir + "llama.gguf", CpuBackend(CpuOptions{.residual = which}));
    gen.greedy_ids(gen.encode("Hello"), 2);
    const std::string err = ::testing::internal::GetCapturedStderr();
    const std::string want = "residual int8 term on ";
    const size_t line = err.find(want);
    ASSERT_NE(line, std::string::npos) << want << " missing from:\n" << err;
    size_t end = 0;
    const int residual = std::stoi(err.substr(line + want.size()), &end);
    const int products = std::stoi(err.substr(line + want.size() + end + 4));  // " of "
    EXPECT_GE(products, 7 * layers);
    EXPECT_LE(products, 7 * layers + 1);  // the output head, where it is quantised
    EXPECT_EQ(residual, which == Residual::none        ? 0
                        : which == Residual::sensitive ? 5 * layers
                                                       : products)
        << err;
  }
}

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

// A folder whose config.json lies about the weights beside it: the error names the field
// before any model of that size is built.
TEST(OpenLanguageModel, ConfigThatLiesIsRefusedBeforeBuilding) {
  const auto src = std::filesystem::path(kDir) / "llama_folder";
  const auto dir = std::filesystem::temp_directory_path() / "luminal_lying_config_test";
  const std::string config = read_file((src / "config.json").string());
  const auto with = [&](const std::string& from, const std::string& to) {
    std::filesystem::remove_all(dir);
    std::filesystem::copy(src, dir);
    std::string c = config;
    const size_t at = c.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    c.replace(at, from.size(), to);
    std::ofstream(dir / "config.json") << c;
    return open_error(dir.string());
  };
  EXPECT_NE(with("\"num_attention_heads\": 4", "\"num_attention_heads\": 0")
                .find("num_attention_heads 0"),
            std::string::npos);
  EXPECT_NE(with("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1000000")
                .find("num_hidden_layers is 1000000"),
            std::string::npos);
  EXPECT_NE(with("\"vocab_size\": 600", "\"vocab_size\": 100")
                .find("more than the model's vocab_size 100"),
            std::string::npos);
  EXPECT_NE(with("\"rope_theta\": 10000.0",
                 "\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2, \"mscale\": 1}")
                .find("rope_parameters.mscale"),
            std::string::npos);
  EXPECT_NE(with("\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"longrope\"}")
                .find("longrope"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

// A GGUF file whose counts disagree with its tensors, or that names a tensor twice.
TEST(OpenLanguageModel, GgufThatLiesIsRefusedBeforeBuilding) {
  const std::string original = read_file(kDir + "llama.gguf");
  const auto path = (std::filesystem::temp_directory_path() / "luminal_lying.gguf").string();
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string bytes = original;
    const size_t at = bytes.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    EXPECT_EQ(from.size(), to.size());
    bytes.replace(at, from.size(), to);
    std::ofstream(path, std::ios::binary) << bytes;
    return open_error(path);
  };
  // llama.block_count is a uint32 after its key: make it 1000000.
  const std::string key = "llama.block_count";
  const size_t at = original.find(key);
  ASSERT_NE(at, std::string::npos);
  std::string patched = original.substr(at, key.size() + 8);
  const uint32_t big = 1000000;
  std::memcpy(patched.data() + key.size() + 4, &big, 4);
  EXPECT_NE(with(original.substr(at, key.size() + 8), patched)
                .find("llama.block_count says 1000000 layers"),
            std::string::npos);
  // Two tensors of the same name: rename blk.1's attention norm to blk.0's.
  EXPECT_NE(with("blk.1.attn_norm.weight", "blk.0.attn_norm.weight").find("appears twice"),
            std::string::npos);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace luminal::models
