// Hugging Face tokenizer.json: a BPE model, byte-level (GPT-2, Llama 3, Qwen 2) or
// SentencePiece-style with <0xXX> byte fallback (Llama 2, Mistral, Gemma), or a
// Unigram model (T5, ALBERT; the highest-scoring segmentation). Added tokens are cut
// out of the raw text first; the rest is normalised (NFC / NFKC / NFD, Prepend,
// Replace), pre-tokenised (regex Splits run on ICU like the library's Oniguruma
// patterns, ByteLevel, Metaspace) and then merged by rank or segmented. Decoding runs
// the file's decoder steps (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace).
#pragma once

#include "luminal/models/special_tokens.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace luminal::models {

class GgufFile;
struct Json;

class HfTokenizer {
 public:
  /// Reads `path` (a tokenizer.json). An unsupported model, normalizer or pre-tokenizer
  /// is an error naming it.
  explicit HfTokenizer(const std::string& path);
  /// A byte-level BPE vocabulary stored in GGUF metadata (tokenizer.ggml.model = gpt2:
  /// Llama 3, Qwen 2), with the pre-tokenizer that tokenizer.ggml.pre names.
  static HfTokenizer from_gguf(const GgufFile& f);
  ~HfTokenizer();
  HfTokenizer(HfTokenizer&&) noexcept;

  /// Token ids for `text`; with `add_special_tokens`, the post-processor's template
  /// (a TemplateProcessing "single" sequence: BOS for Llama, Gemma) around them, as
  /// HF's add_special_tokens=True. From GGUF, the template is BOS if
  /// tokenizer.ggml.add_bos_token is set.
  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens = false) const;
  /// Text of token ids, added tokens included; invalid UTF-8 becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids) const;

  size_t vocab_size() const { return tokens_.size(); }
  /// Id of an exact token (vocabulary or added), or -1.
  int32_t find(const std::string& token) const;

 private:
  struct Impl;
  HfTokenizer();
  void load(const Json& tokenizer_json, const std::string& what);
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
  void merge_symbols(std::vector<int32_t>& symbols) const;
  void encode_unigram(const std::string& word, std::vector<int32_t>& out) const;
  void encode_unknown(const std::string& text, bool& last_unk, std::vector<int32_t>& out) const;
  void add_post_processor(const Json& p, const std::string& path);
  /// Follows llama.cpp where it differs from the `tokenizers` library (GGUF vocabularies):
  /// its order for special tokens, its reading of invalid UTF-8, raw bytes out of decode,
  /// and `silent_ids` decoding to nothing.
  void follow_llama_cpp(std::unordered_set<int32_t> silent_ids);

  std::unique_ptr<Impl> impl_;
  std::vector<std::string> tokens_;  // id -> token text (byte-level alphabet, or added content)
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>>
      merges_;                                              // (left, right) -> (rank, merged)
  SpecialTokens added_;  // added tokens, matched in the raw text
  // From GGUF, llama.cpp is the reference: its order for special tokens, its reading of
  // invalid UTF-8, and control tokens that decode to nothing.
  bool llama_cpp_rules_ = false;
  std::unordered_set<int32_t> silent_ids_;
  std::vector<int32_t> template_prefix_, template_suffix_;  // special tokens around a text
  std::array<int32_t, 256> byte_ids_{};                     // <0xXX> tokens (byte fallback)
  std::vector<double> scores_;                              // Unigram log-probabilities
  double min_score_ = 0;
  size_t max_piece_bytes_ = 0;
  int32_t unk_ = -1;
  bool unigram_ = false, ignore_merges_ = false, byte_fallback_ = false, fuse_unk_ = false;
  bool wordpiece_ = false;
  std::string subword_prefix_ = "##";  // WordPiece continuation pieces
  int64_t max_word_chars_ = 100;       // WordPiece: longer words are unk
};

}  // namespace luminal::models
