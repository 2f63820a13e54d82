// The BERT steps of a tokenizer.json (private to src/models): the BertNormalizer, the
// BertPreTokenizer, the WordPiece model and the WordPiece decoder, each as the HF
// `tokenizers` library defines it (per-character Unicode lower-casing, the punctuation
// and CJK ranges it uses), on ICU strings.
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

/// Joins pieces: `prefix` removed from continuations, a space before the others, and with
/// `cleanup` the spaces before punctuation and English contractions taken out.
void wordpiece_decode(std::vector<std::string>& tokens, const std::string& prefix, bool cleanup);

}  // namespace luminal::models
