// The tokenizer a text generator needs, whichever format the model came in: prompts to
// ids (with the special tokens the model expects, such as BOS) and ids back to text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace luminal::models {

class GgufFile;

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  /// Ids of a prompt, with the model's leading (and trailing) special tokens.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  /// Text of ids.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  /// Id of an exact token, or -1.
  virtual int32_t find(const std::string& token) const = 0;
  virtual size_t vocab_size() const = 0;
};

/// The vocabulary in GGUF metadata: SentencePiece BPE (tokenizer.ggml.model = llama) or
/// byte-level BPE (gpt2). BOS is added as tokenizer.ggml.add_bos_token says (default: on
/// for SentencePiece, off for byte-level, as llama.cpp).
std::unique_ptr<TextTokenizer> gguf_text_tokenizer(const GgufFile& f);

/// A Hugging Face tokenizer.json; special tokens come from its post-processor template.
std::unique_ptr<TextTokenizer> hf_text_tokenizer(const std::string& tokenizer_json);

}  // namespace luminal::models
