// BERT's WordPiece tokenizer (vocab.txt): basic tokenisation (clean-up, lower-casing and
// accent stripping for Latin scripts, CJK characters and punctuation split off), then
// greedy longest-match WordPiece with "##" continuations, wrapped in [CLS] ... [SEP].
// Lower-casing and accent stripping cover Latin (U+00C0..U+024F), Greek and Cyrillic
// capitals and combining marks, not full Unicode normalisation.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace luminal::models {

class WordPieceTokenizer {
 public:
  /// Reads one token per line; throws luminal::Error naming the file.
  explicit WordPieceTokenizer(const std::string& vocab_path, bool lower_case = true);
  std::vector<int32_t> encode(const std::string& text) const;
  size_t vocab_size() const { return tokens_.size(); }

 private:
  std::vector<std::string> basic_tokens(const std::string& text) const;
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  bool lower_case_;
  int32_t cls_ = -1, sep_ = -1, unk_ = -1;
};

}  // namespace luminal::models
