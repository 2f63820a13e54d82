// SentencePiece-style BPE over a scored vocabulary (the "llama" tokenizer model stored
// in GGUF metadata, used by Llama 2 and Gemma): spaces become U+2581, adjacent pieces
// merge by the highest score of the merged piece, and anything not in the vocabulary
// falls back to <0xXX> byte tokens. Control and user-defined tokens written literally
// in the text ("<start_of_turn>") are recognised as single tokens.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "luminal/models/gguf.hpp"
#include "luminal/models/special_tokens.hpp"

namespace luminal::models {

class SpmTokenizer {
 public:
  /// Reads tokenizer.ggml.{tokens,scores,token_type,bos_token_id,...} from `f`.
  explicit SpmTokenizer(const GgufFile& f);
  SpmTokenizer(std::vector<std::string> pieces, std::vector<float> scores,
               std::vector<int32_t> types, int32_t bos, int32_t eos, bool add_space_prefix);

  /// Token ids for `text` (with BOS first when `add_bos`).
  std::vector<int32_t> encode(const std::string& text, bool add_bos) const;
  /// Text of token ids; control tokens are dropped, byte tokens reassembled.
  std::string decode(const std::vector<int32_t>& ids) const;
  /// The text of one token as it streams (control tokens render empty).
  std::string piece(int32_t id) const;

  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  size_t vocab_size() const { return pieces_.size(); }
  /// Id of an exact piece, or -1.
  int32_t find(const std::string& piece) const;

 private:
  void index();
  void encode_plain(const std::string& text, std::vector<int32_t>& out) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int32_t> byte_ids_;      // <0xXX> tokens
  SpecialTokens specials_;  // control, user-defined and unknown pieces
  int32_t bos_ = -1, eos_ = -1;
  bool add_space_prefix_ = false;
};

}  // namespace luminal::models
