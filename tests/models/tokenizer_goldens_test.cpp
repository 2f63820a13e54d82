// Every tokenizer against its reference implementation on an adversarial corpus: llama.cpp
// for GGUF vocabularies, HF `tokenizers` for tokenizer.json files (goldens:
// tools/fixtures/make_tokenizer_goldens.py). The real vocabularies (Gemma 3 270M's GGUF,
// all-MiniLM-L6-v2's tokenizer.json) come from scripts/get_model.sh; their cases skip,
// saying so, where it has not run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "luminal/models/gguf.hpp"
#include "luminal/models/text_tokenizer.hpp"
#include "models/json.hpp"

namespace luminal::models {
namespace {

const std::string kDir = std::string(LUMINAL_FIXTURE_DIR) + "/tokenizers/adversarial/";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A text as the goldens store it: a string, or {"hex": ...} for bytes that are not UTF-8.
std::string text_of(const Json& j) {
  if (j.is_string()) return j.string();
  const std::string& hex = j.find("hex")->string();
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::vector<int32_t> ids_of(const Json& j) {
  std::vector<int32_t> out;
  for (const Json& id : j.array()) out.push_back(static_cast<int32_t>(id.integer()));
  return out;
}

// The FNV-1a hash of the ids' little-endian int32 bytes, as the golden script computes it.
std::string fnv1a64(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k) {
      h ^= (static_cast<uint32_t>(id) >> (8 * k)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string show(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str();
}

class ReferenceTokens : public ::testing::TestWithParam<const char*> {};

TEST_P(ReferenceTokens, IdsAndDecodedTextMatchTheReference) {
  const Json golden = parse_json(slurp(kDir + GetParam() + ".json"), GetParam());
  const std::string vocabulary =
      std::string(LUMINAL_SOURCE_DIR) + "/" + golden.find("vocabulary")->string();
  if (!std::filesystem::exists(vocabulary))
    GTEST_SKIP() << vocabulary << " is not installed (scripts/get_model.sh installs it)";
  const std::string kind = golden.find("kind")->string();
  std::unique_ptr<TextTokenizer> tok;
  std::optional<GgufFile> gguf;
  if (kind == "gguf") {
    gguf.emplace(vocabulary);
    tok = gguf_text_tokenizer(*gguf);
  } else {
    tok = hf_text_tokenizer(vocabulary);
  }
  const std::string reference = golden.find("reference")->string();
  const Json corpus = parse_json(slurp(kDir + "corpus.json"), "corpus.json");
  const JsonArray& cases = golden.find("cases")->array();
  ASSERT_EQ(cases.size(), corpus.array().size());
  size_t compared = 0, wrong = 0, wrong_decoded = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = text_of(corpus.array()[i]);
    if (std::holds_alternative<std::nullptr_t>(cases[i].v)) {
      // No reference (text that is not UTF-8, which tokenizers cannot take): it must
      // still encode, and decode to what the ids spell.
      EXPECT_NO_THROW(tok->decode(tok->encode(text))) << "text " << i;
      continue;
    }
    ++compared;
    const auto want = ids_of(*cases[i].find("ids"));
    const auto got = tok->encode(text);
    if (got != want && ++wrong <= 8)
      ADD_FAILURE() << GetParam() << " text " << i << " " << ::testing::PrintToString(text)
                    << "\n  " << reference << ": " << show(want) << "\n  luminal: " << show(got);
    const std::string decoded = tok->decode(want), want_decoded = text_of(*cases[i].find("decoded"));
    if (decoded != want_decoded && ++wrong_decoded <= 8)
      ADD_FAILURE() << GetParam() << " decoding the ids of text " << i << "\n  " << reference
                    << ": " << ::testing::PrintToString(want_decoded)
                    << "\n  luminal: " << ::testing::PrintToString(decoded);
  }
  EXPECT_EQ(wrong, 0u) << wrong << " of " << compared << " texts encode differently from "
                       << reference;
  EXPECT_EQ(wrong_decoded, 0u) << wrong_decoded << " of " << compared
                               << " id sequences decode differently from " << reference;
  const auto long_ids = tok->encode(slurp(kDir + "long_document.txt"));
  const Json& want_long = *golden.find("long_document");
  EXPECT_EQ(static_cast<int64_t>(long_ids.size()), want_long.find("tokens")->integer())
      << "the 100k-character document";
  EXPECT_EQ(fnv1a64(long_ids), want_long.find("fnv1a64")->string()) << "the 100k-character document";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTokens,
                         ::testing::Values("gemma3_gguf", "llama2_gguf", "gpt2_gguf", "llama3_gguf",
                                           "qwen2_gguf", "gpt2_json", "llama3_json", "qwen2_json",
                                           "llama2_json", "metaspace_json", "unigram_json",
                                           "unigram_bytes_json", "minilm_json"));

}  // namespace
}  // namespace luminal::models
