// Typed arrays and tokenizer constants from GGUF metadata (private to src/models).
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "luminal/error.hpp"
#include "luminal/models/gguf.hpp"

namespace luminal::models {

/// The array under `key` as T (std::string, float or an integer type); a missing key
/// is an error when `required`, else an empty vector.
template <class T>
std::vector<T> gguf_array(const GgufFile& f, const std::string& key, bool required) {
  const GgufValue* v = f.find(key);
  std::vector<T> out;
  if (!v) {
    LUM_CHECK(!required) << f.path() << ": tokenizer metadata '" << key << "' is missing";
    return out;
  }
  const auto* arr = std::get_if<std::shared_ptr<GgufArray>>(&v->v);
  LUM_CHECK(arr) << f.path() << ": tokenizer metadata '" << key << "' is not an array";
  for (const GgufValue& e : **arr) {
    if constexpr (std::is_same_v<T, std::string>) {
      const auto* s = std::get_if<std::string>(&e.v);
      LUM_CHECK(s) << f.path() << ": '" << key << "' holds a non-string";
      out.push_back(*s);
    } else if constexpr (std::is_same_v<T, float>) {
      const auto* d = std::get_if<double>(&e.v);
      LUM_CHECK(d) << f.path() << ": '" << key << "' holds a non-float";
      out.push_back(static_cast<float>(*d));
    } else {
      if (const auto* i = std::get_if<int64_t>(&e.v))
        out.push_back(static_cast<T>(*i));
      else if (const auto* u = std::get_if<uint64_t>(&e.v))
        out.push_back(static_cast<T>(*u));
      else
        LUM_FAIL() << f.path() << ": '" << key << "' holds a non-integer";
    }
  }
  return out;
}

/// Values of tokenizer.ggml.token_type (llama.cpp's token attributes).
namespace gguf_token_type {
inline constexpr int32_t kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;
/// Whether llama.cpp treats a token of this text as a control token whatever its stored
/// type (it marks these end-of-generation tokens so: Gemma's "</s>" is user-defined).
inline bool forced_control(const std::string& text) {
  for (const char* t : {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                        "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
                        "<|end_of_text|>", "<end_of_utterance>", "</s>"})
    if (text == t) return true;
  return false;
}
/// Whether llama.cpp matches tokens of this type where they are written in a prompt.
inline bool matched_in_text(int32_t type) {
  return type == kUnknown || type == kControl || type == kUserDefined;
}
/// Whether llama.cpp treats a token as a control token (which decodes to nothing): its
/// stored type, or an end-of-generation text among the tokens matched in prompts.
inline bool control_in_llama_cpp(int32_t type, const std::string& text) {
  return type == kControl || (matched_in_text(type) && forced_control(text));
}
}  // namespace gguf_token_type

/// The token id metadata `key` holds (tokenizer.ggml.bos_token_id, ...), or -1 where the
/// file has none; an id outside a vocabulary of `vocab` tokens is an error naming the key.
inline int32_t gguf_token_id(const GgufFile& f, const std::string& key, size_t vocab) {
  if (!f.find(key)) return -1;
  const int64_t id = f.get_int(key);
  LUM_CHECK(id >= 0 && static_cast<uint64_t>(id) < vocab)
      << f.path() << ": " << key << " is " << id << ", outside the vocabulary of " << vocab << " tokens";
  return static_cast<int32_t>(id);
}

}  // namespace luminal::models
