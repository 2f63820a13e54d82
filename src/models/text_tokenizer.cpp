// TextTokenizer over the SentencePiece and Hugging Face tokenizers.
#include "luminal/models/text_tokenizer.hpp"

#include "luminal/models/gguf.hpp"
#include "luminal/models/hf_tokenizer.hpp"
#include "luminal/models/tokenizer.hpp"

namespace luminal::models {
namespace {

class SpmText final : public TextTokenizer {
 public:
  SpmText(const GgufFile& f)
      : t_(f), add_bos_(f.get_flag("tokenizer.ggml.add_bos_token", true) && t_.bos() >= 0) {}
  std::vector<int32_t> encode(const std::string& text) const override {
    return t_.encode(text, add_bos_);
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return t_.decode(ids); }
  int32_t find(const std::string& token) const override { return t_.find(token); }
  size_t vocab_size() const override { return t_.vocab_size(); }

 private:
  SpmTokenizer t_;
  bool add_bos_;
};

class HfText final : public TextTokenizer {
 public:
  explicit HfText(HfTokenizer t) : t_(std::move(t)) {}
  std::vector<int32_t> encode(const std::string& text) const override {
    return t_.encode(text, /*add_special_tokens=*/true);
  }
  std::string decode(const std::vector<int32_t>& ids) const override { return t_.decode(ids); }
  int32_t find(const std::string& token) const override { return t_.find(token); }
  size_t vocab_size() const override { return t_.vocab_size(); }

 private:
  HfTokenizer t_;
};

}  // namespace

std::unique_ptr<TextTokenizer> gguf_text_tokenizer(const GgufFile& f) {
  const std::string model =
      f.find("tokenizer.ggml.model") ? f.get_string("tokenizer.ggml.model") : "";
  if (model == "gpt2") return std::make_unique<HfText>(HfTokenizer::from_gguf(f));
  return std::make_unique<SpmText>(f);  // names the model if it is not SentencePiece either
}

std::unique_ptr<TextTokenizer> hf_text_tokenizer(const std::string& tokenizer_json) {
  return std::make_unique<HfText>(HfTokenizer(tokenizer_json));
}

}  // namespace luminal::models
