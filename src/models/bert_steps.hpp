// The BERT steps of a tokenizer.json (private to src/models): the BertNormalizer, the
// BertPreTokenizer and the WordPiece model, each as the HF `tokenizers` library defines it
// (per-character Unicode lower-casing, the punctuation and CJK ranges it uses), on ICU
// strings. The WordPiece decoder sits with the other decoders in hf_tokenizer.cpp.
#pragma once

#include <unicode/unistr.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace luminal::models {

struct BertNormalizerOptions {
  bool clean_text = true, handle_chinese_chars = true, strip_accents = true, lowercase = true;
};

/// Control characters dropped and whitespace made ' ', CJK ideographs spaced apart,
/// accents stripped (NFD less nonspacing marks), lower-cased: as the options say.
void bert_normalize(icu::UnicodeString& u, const BertNormalizerOptions& options);

/// Splits on whitespace (dropped) and isolates each punctuation character.
void bert_pre_tokenize(const icu::UnicodeString& piece, std::vector<icu::UnicodeString>& out);

/// Greedy longest-match WordPiece of one word (UTF-8): continuation pieces carry `prefix`;
/// a word longer than `max_chars` characters, or with a part no piece matches, is `unk`.
void wordpiece_encode(const std::string& word, const std::function<int32_t(const std::string&)>& find,
                      const std::string& prefix, int64_t max_chars, int32_t unk,
                      std::vector<int32_t>& out);

}  // namespace luminal::models
