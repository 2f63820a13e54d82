// A byte-level BPE vocabulary from GGUF metadata, read as the tokenizer.json that would
// describe it, with llama.cpp's rules where the two references differ.
#include "luminal/models/gguf.hpp"
#include "luminal/models/hf_tokenizer.hpp"
#include "models/gguf_arrays.hpp"
#include "models/json.hpp"

namespace luminal::models {

namespace {

Json json_string(std::string s) {
  return Json{std::move(s)};
}
Json json_object(JsonObject members) {
  return Json{std::make_shared<JsonObject>(std::move(members))};
}
Json json_array(JsonArray items) {
  return Json{std::make_shared<JsonArray>(std::move(items))};
}

// llama.cpp's names for the pre-tokenizer regexes of byte-level BPE vocabularies.
const char* gguf_pre_split(const std::string& pre) {
  if (pre == "llama-bpe" || pre == "llama3")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pre == "qwen2")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return nullptr;
}

}  // namespace

HfTokenizer HfTokenizer::from_gguf(const GgufFile& f) {
  const std::string model =
      f.find("tokenizer.ggml.model") ? f.get_string("tokenizer.ggml.model") : "";
  LUM_CHECK(model == "gpt2")
      << f.path() << ": tokenizer model '" << model
      << "' is not byte-level BPE ('gpt2'); SentencePiece vocabularies load as SpmTokenizer";
  const std::string pre =
      f.find("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "default";
  const std::vector<std::string> tokens = gguf_array<std::string>(f, "tokenizer.ggml.tokens", true);
  const std::vector<std::string> merges = gguf_array<std::string>(f, "tokenizer.ggml.merges", true);
  const std::vector<int32_t> types = gguf_array<int32_t>(f, "tokenizer.ggml.token_type", false);
  // The same description a tokenizer.json would give.
  JsonObject vocab;
  JsonArray merge_list, added;
  for (size_t i = 0; i < tokens.size(); ++i) {
    vocab.emplace_back(tokens[i], Json{static_cast<int64_t>(i)});
    if (i < types.size() && gguf_token_type::matched_in_text(types[i]))
      added.push_back(json_object(
          {{"id", Json{static_cast<int64_t>(i)}}, {"content", json_string(tokens[i])}}));
  }
  for (const std::string& m : merges) merge_list.push_back(json_string(m));
  Json byte_level = json_object({{"type", json_string("ByteLevel")}, {"use_regex", Json{true}}});
  Json pre_tokenizer = byte_level;
  if (const char* split = gguf_pre_split(pre)) {
    byte_level = json_object({{"type", json_string("ByteLevel")}, {"use_regex", Json{false}}});
    pre_tokenizer = json_object(
        {{"type", json_string("Sequence")},
         {"pretokenizers",
          json_array({json_object({{"type", json_string("Split")},
                                   {"pattern", json_object({{"Regex", json_string(split)}})},
                                   {"behavior", json_string("Isolated")}}),
                      byte_level})}});
  } else {
    LUM_CHECK(pre == "default" || pre == "gpt-2" || pre == "gpt2")
        << f.path() << ": tokenizer.ggml.pre '" << pre
        << "' is not supported (supported: gpt-2, llama-bpe, qwen2)";
  }
  const Json j =
      json_object({{"model", json_object({{"type", json_string("BPE")},
                                          {"vocab", json_object(std::move(vocab))},
                                          {"merges", json_array(std::move(merge_list))}})},
                   {"added_tokens", json_array(std::move(added))},
                   {"pre_tokenizer", pre_tokenizer},
                   {"decoder", json_object({{"type", json_string("ByteLevel")}})}});
  HfTokenizer t;
  t.load(j, f.path());
  std::unordered_set<int32_t> silent;  // control tokens decode to nothing, as in llama.cpp
  for (size_t i = 0; i < tokens.size() && i < types.size(); ++i)
    if (gguf_token_type::control_in_llama_cpp(types[i], tokens[i])) silent.insert(static_cast<int32_t>(i));
  t.follow_llama_cpp(std::move(silent));
  const int32_t bos = gguf_token_id(f, "tokenizer.ggml.bos_token_id", tokens.size());
  if (f.get_flag("tokenizer.ggml.add_bos_token", false) && bos >= 0) t.template_prefix_.push_back(bos);
  return t;
}

}  // namespace luminal::models
