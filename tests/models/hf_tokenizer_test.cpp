// tokenizer.json (byte-level and SentencePiece-style BPE, Unigram) against the HF `tokenizers`
// library (fixtures: tools/fixtures/make_tokenizers.py).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "luminal/error.hpp"
#include "luminal/models/gguf.hpp"
#include "luminal/models/hf_tokenizer.hpp"
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

void expect_cases(const HfTokenizer& tok, const std::string& name) {
  const std::string path = dir(name) + "/cases.json";
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

class TokenizerJson : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerJson, EncodeAndDecodeMatchTokenizers) {
  expect_cases(HfTokenizer(dir(GetParam()) + "/tokenizer.json"), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenizerJson,
                         ::testing::Values("gpt2", "llama3", "qwen2", "llama2", "metaspace",
                                           "unigram", "unigram_bytes"));

// The same vocabularies as llama.cpp stores them in GGUF metadata are checked against
// llama.cpp itself in tokenizer_goldens_test.cpp.

TEST(HfTokenizer, GgufSentencePieceVocabularyIsRefused) {
  const std::string gguf = std::string(LUMINAL_FIXTURE_DIR) + "/gguf/mixed.gguf";
  testing::expect_error([&] { HfTokenizer::from_gguf(GgufFile(gguf)); },
                        {gguf.c_str(), "tokenizer model"});
}

TEST(HfTokenizer, UnsupportedOrBrokenFilesAreClearErrors) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "luminal_tokenizer.json").string();
  const auto with = [&](const std::string& body) {
    std::ofstream(path, std::ios::binary) << body;
    return [&] { HfTokenizer t(path); };
  };
  testing::expect_error(with(R"({"model": {"type": "WordLevel", "vocab": {}}})"),
                        {path.c_str(), "WordLevel"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
                        {path.c_str(), "a b", "missing"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                 "pre_tokenizer": {"type": "UnicodeScripts"}})"),
                        {path.c_str(), "UnicodeScripts"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                 "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"},
                                                   "behavior": "Isolated"}})"),
                        {path.c_str(), "regex"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {}, "merges": []},
                                 "decoder": {"type": "CTC"}})"),
                        {path.c_str(), "CTC"});
  testing::expect_error(with(R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []}})"),
                        {path.c_str(), "'a'"});
  testing::expect_error(with(R"({"model": {"type": "BPE")"), {path.c_str()});
  testing::expect_error([] { HfTokenizer t("/nonexistent/tokenizer.json"); },
                        {"/nonexistent/tokenizer.json"});
  std::filesystem::remove(path);
}

// Mutations of real tokenizer.json files either load (and then encode and decode) or
// raise luminal::Error, never crash: byte edits and truncations, which mostly break the
// syntax, and value swaps, which keep it valid and hit the type checks.
TEST(HfTokenizer, MutatedFilesNeverCrash) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "luminal_tokenizer_fuzz.json").string();
  const char* values[] = {"0", "-1", "null", "\"x\"", "[]", "{}", "true", "[\"a\"]", "1e9"};
  std::mt19937 rng(7);
  for (const char* name : {"llama3", "llama2", "metaspace", "unigram_bytes"}) {
    const std::string original = slurp(dir(name) + "/tokenizer.json");
    int loaded = 0;
    for (int trial = 0; trial < 300; ++trial) {
      std::string s = original;
      for (int k = 0; k < 1 + trial % 3; ++k) {
        const size_t at = rng() % s.size();
        switch (rng() % 4) {
          case 0:
            s[at] = static_cast<char>(rng());
            break;
          case 1:
            s.erase(at, 1 + rng() % 16);
            break;
          case 2:
            s.resize(at);
            break;
          default: {  // replace the value after a ':' (in the first 4 KiB, where the structure is)
            const size_t colon = s.find(':', rng() % std::min<size_t>(s.size(), 4096));
            const size_t end = colon == std::string::npos ? colon : s.find_first_of(",}", colon);
            if (end != std::string::npos)
              s.replace(colon + 1, end - colon - 1, values[rng() % std::size(values)]);
          }
        }
      }
      std::ofstream(path, std::ios::binary) << s;
      try {
        const HfTokenizer t(path);
        (void)t.decode(t.encode("Hello, world! 123 ünïcode 😀 <|im_start|>"));
        ++loaded;
      } catch (const Error&) {
      }
    }
    RecordProperty(name, loaded);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace luminal::models
