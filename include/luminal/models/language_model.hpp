// Opening a model for text generation from a GGUF file or a Hugging Face model folder:
// the decoder graph with its weights set, its tokenizer, and the tokens that end a reply.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "luminal/collective.hpp"
#include "luminal/graph.hpp"
#include "luminal/models/causal_lm.hpp"
#include "luminal/models/text_tokenizer.hpp"

namespace luminal::models {

struct LanguageModel {
  /// GGUF general.architecture ("gemma3", "llama", "qwen2", "qwen3") or config.json
  /// model_type ("gemma3_text", "llama", "mistral", "qwen2", "phi3", ...).
  std::string architecture;
  std::unique_ptr<CausalLM> model;
  std::unique_ptr<TextTokenizer> tokenizer;
  /// End of sequence, and the end-of-turn tokens of chat formats the vocabulary has.
  std::vector<int32_t> stop_ids;
  /// One line for progress output: "gemma3: 18 layers, hidden 640, vocab 262144".
  std::string summary;
};

/// Where a model's weights come from: its files, or random_weights (a Hugging Face folder
/// then needs config.json and tokenizer.json alone).
enum class WeightsFrom { Files, Random };

/// `path`: a .gguf file, or a folder with config.json, model.safetensors (or shards
/// listed in model.safetensors.index.json) and tokenizer.json. The model's parameters
/// and KV-cache inputs are created in `g`. An unsupported architecture, a missing file
/// or tensor, or a tensor the model does not use is an error naming it. `kv_cache` is the
/// KV cache's element type, f32 or f16. `tensor_parallel`: `g` is this rank's part of the
/// model (Llama-family Hugging Face folders; see Llama).
LanguageModel open_language_model(const std::string& path, Graph& g, DType kv_cache = DType::F32,
                                  std::shared_ptr<Communicator> tensor_parallel = nullptr,
                                  WeightsFrom weights = WeightsFrom::Files);

}  // namespace luminal::models
