// Byte-level BPE tokenizer.json against the HF `tokenizers` library
// (fixtures: tools/fixtures/make_tokenizers.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "luminal/error.hpp"
#include "luminal/models/bpe_tokenizer.hpp"
#include "models/json.hpp"
#include "testing/expect_error.hpp"

namespace luminal::models {
namespace {

std::string dir(const std::string& name) {
  return std::string(LUMINAL_FIXTURE_DIR) + "/tokenizers/" + name;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class HfBpe : public ::testing::TestWithParam<const char*> {};

TEST_P(HfBpe, EncodeAndDecodeMatchTokenizers) {
  const BpeTokenizer tok(dir(GetParam()) + "/tokenizer.json");
  const std::string path = dir(GetParam()) + "/cases.json";
  const Json cases = parse_json(slurp(path), path);
  ASSERT_GE(cases.array().size(), 300u);
  for (const Json& c : cases.array()) {
    const std::string& text = c.find("text")->string();
    std::vector<int32_t> want;
    for (const Json& id : c.find("ids")->array())
      want.push_back(static_cast<int32_t>(id.integer()));
    ASSERT_EQ(tok.encode(text), want) << "encoding '" << text << "'";
    ASSERT_EQ(tok.decode(want), c.find("decoded")->string()) << "decoding '" << text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfBpe, ::testing::Values("gpt2", "llama3", "qwen2"));

TEST(BpeTokenizer, UnsupportedOrBrokenFilesAreClearErrors) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "luminal_tokenizer.json").string();
  const auto with = [&](const std::string& body) {
    std::ofstream(path, std::ios::binary) << body;
    return [&] { BpeTokenizer t(path); };
  };
  testing::expect_error(with(R"({"model": {"type": "Unigram", "vocab": []}})"),
                        {path.c_str(), "Unigram"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
                        {path.c_str(), "a b", "missing"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                 "pre_tokenizer": {"type": "Metaspace"}})"),
                        {path.c_str(), "Metaspace"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                 "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"},
                                                   "behavior": "Isolated"}})"),
                        {path.c_str(), "regex"});
  testing::expect_error(with(R"({"model": {"type": "BPE")"), {path.c_str()});
  testing::expect_error([] { BpeTokenizer t("/nonexistent/tokenizer.json"); },
                        {"/nonexistent/tokenizer.json"});
  std::filesystem::remove(path);
}

// Random byte mutations of a real tokenizer.json either load or raise luminal::Error.
TEST(BpeTokenizer, MutatedFilesNeverCrash) {
  const std::string original = slurp(dir("llama3") + "/tokenizer.json");
  const std::string path =
      (std::filesystem::temp_directory_path() / "luminal_tokenizer_fuzz.json").string();
  std::mt19937 rng(7);
  int loaded = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string s = original;
    for (int k = 0; k < 1 + trial % 4; ++k) {
      const size_t at = rng() % s.size();
      switch (rng() % 3) {
        case 0:
          s[at] = static_cast<char>(rng());
          break;
        case 1:
          s.erase(at, 1 + rng() % 16);
          break;
        default:
          s.resize(at);
          break;
      }
    }
    std::ofstream(path, std::ios::binary) << s;
    try {
      BpeTokenizer t(path);
      (void)t.decode(t.encode("Hello, world! 123 ünïcode 😀"));
      ++loaded;
    } catch (const Error&) {
    }
  }
  std::filesystem::remove(path);
  RecordProperty("loaded", loaded);
}

}  // namespace
}  // namespace luminal::models
