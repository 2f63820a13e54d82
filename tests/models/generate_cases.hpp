// The generator end to end on tiny models in each form `luminal generate --model` opens
// — a Hugging Face folder, a GGUF llama (q/k rows permuted as llama.cpp's converter
// writes them, Q8_0), a GGUF qwen2 (biases, tied embeddings, Q4_0) and a GGUF llama in
// llama.cpp's Q4_K_M mix (Q4_K and Q6_K), and a wider GGUF llama that splits over two
// ranks in whole Q8_0 blocks — against Hugging
// Face transformers (tools/fixtures/make_generate.py): the prompt's ids with the model's
// special tokens, the greedy ids, and the streamed text up to the stop token. Shared by
// the CPU tests and the GPU ones.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "luminal/models/generate.hpp"
#include "models/json.hpp"

namespace luminal::models {

inline const std::string kGenerateDir = std::string(LUMINAL_FIXTURE_DIR) + "/generate/";

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<int32_t> ids_of(const Json& j) {
  std::vector<int32_t> out;
  for (const Json& v : j.array()) out.push_back(static_cast<int32_t>(v.integer()));
  return out;
}

struct GenerateForm {
  const char* name;
  const char* model;
  const char* expected;
  friend void PrintTo(const GenerateForm& f, std::ostream* os) { *os << f.model; }
};

inline const GenerateForm kGenerateForms[] = {
    {"hf_folder", "llama_folder", "expected_llama_folder.json"},
    {"gguf_llama_q8_0", "llama.gguf", "expected_llama_gguf.json"},
    {"gguf_qwen2_q4_0", "qwen2.gguf", "expected_qwen2_gguf.json"},
    {"gguf_llama_q4_k_m", "llama_kquant.gguf", "expected_llama_kquant_gguf.json"},
    {"gguf_llama_wide_q8_0", "llama_tp.gguf", "expected_llama_tp_gguf.json"}};

// `tensor_parallel`: the generator is one rank of a tensor-parallel run.
inline void expect_generation_matches_transformers(
    const GenerateForm& form, const Backend& backend,
    std::shared_ptr<Communicator> tensor_parallel = nullptr) {
  TextGenerator gen(kGenerateDir + form.model, backend, {}, DType::F32, tensor_parallel);
  const std::string path = kGenerateDir + form.expected;
  const Json cases = parse_json(read_file(path), path);
  ASSERT_TRUE(cases.is_array() && !cases.array().empty());
  for (const Json& c : cases.array()) {
    const std::string prompt = c.find("prompt")->string();
    const std::vector<int32_t> prompt_ids = ids_of(*c.find("prompt_ids"));
    const std::vector<int32_t> want = ids_of(*c.find("greedy_ids"));
    EXPECT_EQ(gen.encode(prompt), prompt_ids) << prompt;
    EXPECT_EQ(gen.greedy_ids(prompt_ids, static_cast<int64_t>(want.size())), want) << prompt;
    std::string streamed;
    gen.generate(prompt, static_cast<int64_t>(want.size()), {},
                 [&](const std::string& piece) { streamed += piece; });
    EXPECT_EQ(streamed, c.find("text")->string()) << prompt;
  }
}

}  // namespace luminal::models
