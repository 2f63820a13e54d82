// Model loading for the generator: the file format and the architecture pick the
// decoder, the weight loader and the tokenizer.
#include "luminal/models/language_model.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

#include "luminal/error.hpp"
#include "luminal/models/chat_template.hpp"
#include "luminal/models/gemma.hpp"
#include "luminal/models/gguf.hpp"
#include "luminal/models/llama.hpp"
#include "luminal/models/random_weights.hpp"
#include "luminal/models/safetensors.hpp"
#include "models/gguf_arrays.hpp"
#include "models/json.hpp"
#include "models/size_checks.hpp"

namespace luminal::models {
namespace {

namespace fs = std::filesystem;

bool is_gemma(const std::string& model_type) {
  return model_type == "gemma" || model_type == "gemma2" || model_type == "gemma3_text";
}
bool is_llama_family(const std::string& model_type) {
  static const std::set<std::string> kTypes{"llama",   "mistral",   "qwen2", "qwen3",
                                            "mixtral", "qwen3_moe", "phi3"};
  return kTypes.count(model_type) > 0;
}

std::string summary(const std::string& arch, int64_t layers, int64_t hidden, int64_t vocab) {
  return arch + ": " + std::to_string(layers) + " layers, hidden " + std::to_string(hidden) +
         ", vocab " + std::to_string(vocab);
}

void add_stop(std::vector<int32_t>& stops, int64_t id) {
  if (id >= 0 && std::find(stops.begin(), stops.end(), id) == stops.end())
    stops.push_back(static_cast<int32_t>(id));
}

// The end-of-turn markers of the chat formats we render, where the vocabulary has them:
// a chat model ends its reply with one even when its EOS is another token.
void add_end_of_turn_stops(LanguageModel& lm) {
  for (ChatFormat f : {ChatFormat::Gemma, ChatFormat::ChatML, ChatFormat::Llama3})
    add_stop(lm.stop_ids, lm.tokenizer->find(end_of_turn(f)));
}

void check_all_used(const std::vector<std::string>& unused, const std::string& path,
                    const std::string& arch) {
  LUM_CHECK(unused.empty()) << path << ": the " << arch << " model does not use tensor '"
                            << unused.front() << "' (an unsupported variant?)";
}

LanguageModel open_gguf(const std::string& path, Graph& g, DType kv_cache,
                        std::shared_ptr<Communicator> tensor_parallel) {
  const GgufFile f(path);
  LanguageModel lm;
  lm.architecture = f.get_string("general.architecture");
  LUM_CHECK(!tensor_parallel || lm.architecture != "gemma3")
      << path << ": tensor parallelism runs Llama-family models; gemma3 is not split yet";
  nn::Sharding sharding;
  if (lm.architecture == "gemma3") {
    const GemmaConfig c = GemmaConfig::from_gguf(f);
    lm.summary = summary(lm.architecture, c.layers, c.hidden, c.vocab);
    lm.model = std::make_unique<Gemma>(g, c, kv_cache);
  } else if (lm.architecture == "llama" || lm.architecture == "qwen2" ||
             lm.architecture == "qwen3" || lm.architecture == "qwen3moe") {
    const LlamaConfig c = LlamaConfig::from_gguf(f);
    lm.summary = summary(lm.architecture, c.layers, c.hidden, c.vocab);
    auto llama = std::make_unique<Llama>(g, c, kv_cache, std::move(tensor_parallel));
    sharding = llama->sharding();
    lm.model = std::move(llama);
  } else {
    LUM_FAIL() << path << ": unsupported architecture '" << lm.architecture
               << "' (supported in GGUF: gemma3, llama, qwen2, qwen3, qwen3moe)";
  }
  lm.tokenizer = gguf_text_tokenizer(f);
  check_all_used(load_gguf_weights(*lm.model, f, lm.architecture, sharding), path, lm.architecture);
  const size_t vocab = lm.tokenizer->vocab_size();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
    if (const int32_t id = gguf_token_id(f, key, vocab); id >= 0) add_stop(lm.stop_ids, id);
  for (const char* key : {"tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"})
    gguf_token_id(f, key, vocab);  // checked, so a lying file is refused here
  add_end_of_turn_stops(lm);
  return lm;
}

// num_hidden_layers must be exactly the model.layers.N groups the weight files hold.
void check_hf_layers(const std::vector<std::string>& weights, const std::string& config,
                     int64_t layers) {
  std::set<int64_t> present;
  for (const std::string& path : weights) {
    const SafetensorsFile file(path);
    for (const auto& t : file.tensors())
      if (const std::optional<int64_t> n = layer_index(t.name, "model.layers."); n && *n >= 0)
        present.insert(*n);
  }
  LUM_CHECK(layers > 0 && static_cast<size_t>(layers) == present.size() &&
            *present.rbegin() == layers - 1)
      << config << ": num_hidden_layers is " << layers << ", but the weights hold "
      << present.size() << " layers";
}

// Every parameter random (random_weights), each rank taking its part where the model is
// split.
void load_random_weights(const nn::Module& model) {
  const auto* llama = dynamic_cast<const Llama*>(&model);
  nn::load_parameters(model, random_weights(0, llama && llama->tensor_parallel ? llama->sharding()
                                                                               : nn::Sharding{}));
}

// eos_token_id in a config: an id or a list of them.
void add_eos_ids(const Json& j, std::vector<int32_t>& stops) {
  const Json* eos = j.find("eos_token_id");
  if (!eos) return;
  if (eos->is_int()) add_stop(stops, eos->integer());
  if (eos->is_array())
    for (const Json& id : eos->array())
      if (id.is_int()) add_stop(stops, id.integer());
}

// The checkpoint's safetensors files: one, or the shards its index names.
std::vector<std::string> weight_files(const fs::path& dir) {
  if (fs::exists(dir / "model.safetensors")) return {(dir / "model.safetensors").string()};
  const fs::path index = dir / "model.safetensors.index.json";
  LUM_CHECK(fs::exists(index)) << dir.string()
                               << ": no model.safetensors or model.safetensors.index.json";
  const Json j = read_json_object(index.string(), "safetensors index");
  const Json* map = j.find("weight_map");
  LUM_CHECK(map && map->is_object()) << index.string() << ": no weight_map object";
  std::set<std::string> shards;
  for (const auto& [tensor, file] : map->object()) {
    LUM_CHECK(file.is_string() && fs::path(file.string()).filename() == file.string())
        << index.string() << ": tensor '" << tensor << "' maps to a bad file name";
    shards.insert((dir / file.string()).string());
  }
  return {shards.begin(), shards.end()};
}

LanguageModel open_hf_folder(const fs::path& dir, Graph& g, DType kv_cache,
                             std::shared_ptr<Communicator> tensor_parallel,
                             WeightsFrom weights_from) {
  const fs::path config_path = dir / "config.json";
  LUM_CHECK(fs::exists(config_path)) << dir.string()
                                     << ": no config.json (a Hugging Face model "
                                        "folder needs config.json, weights and "
                                        "tokenizer.json)";
  const Json config = read_json_object(config_path.string(), "model config");
  const Json* type = config.find("model_type");
  LanguageModel lm;
  lm.architecture = type && type->is_string() ? type->string() : "";
  LUM_CHECK(is_gemma(lm.architecture) || is_llama_family(lm.architecture))
      << config_path.string() << ": unsupported model_type '" << lm.architecture
      << "' (supported: gemma, gemma2, gemma3_text, llama, mistral, mixtral, phi3, qwen2, "
         "qwen3, qwen3_moe)";
  const fs::path tokenizer = dir / "tokenizer.json";
  LUM_CHECK(fs::exists(tokenizer)) << dir.string() << ": no tokenizer.json";
  lm.tokenizer = hf_text_tokenizer(tokenizer.string());
  const bool random = weights_from == WeightsFrom::Random;
  const std::vector<std::string> weights = random ? std::vector<std::string>{} : weight_files(dir);
  // The config's counts against what the folder holds, before a model of that size is built.
  const auto check_sizes = [&](int64_t layers, int64_t vocab) {
    if (!random) check_hf_layers(weights, config_path.string(), layers);
    LUM_CHECK(static_cast<int64_t>(lm.tokenizer->vocab_size()) <= vocab)
        << tokenizer.string() << ": the tokenizer has " << lm.tokenizer->vocab_size()
        << " tokens, more than the model's vocab_size " << vocab << " (" << config_path.string() << ")";
  };
  LUM_CHECK(!tensor_parallel || !is_gemma(lm.architecture))
      << dir.string() << ": tensor parallelism runs Llama-family models; " << lm.architecture
      << " is not split yet";
  if (is_gemma(lm.architecture)) {
    const GemmaConfig c = GemmaConfig::from_hf_json(config_path.string());
    check_sizes(c.layers, c.vocab);
    lm.summary = summary(lm.architecture, c.layers, c.hidden, c.vocab);
    lm.model = std::make_unique<Gemma>(g, c, kv_cache);
  } else {
    const LlamaConfig c = LlamaConfig::from_hf_json(config_path.string());
    check_sizes(c.layers, c.vocab);
    lm.summary = summary(lm.architecture, c.layers, c.hidden, c.vocab);
    lm.model = std::make_unique<Llama>(g, c, kv_cache, std::move(tensor_parallel));
  }
  if (random)
    load_random_weights(*lm.model);
  else
    check_all_used(load_safetensors_weights(*lm.model, weights), dir.string(), lm.architecture);
  add_eos_ids(config, lm.stop_ids);
  if (const fs::path gen = dir / "generation_config.json"; fs::exists(gen))
    add_eos_ids(read_json_object(gen.string(), "generation config"), lm.stop_ids);
  add_end_of_turn_stops(lm);
  return lm;
}

}  // namespace

LanguageModel open_language_model(const std::string& path, Graph& g, DType kv_cache,
                                  std::shared_ptr<Communicator> tensor_parallel,
                                  WeightsFrom weights) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  LUM_CHECK(fs::exists(status)) << path << ": no such file or folder";
  if (fs::is_directory(status))
    return open_hf_folder(path, g, kv_cache, std::move(tensor_parallel), weights);
  LUM_CHECK(path.size() > 5 && path.substr(path.size() - 5) == ".gguf")
      << path << ": not a model (expected a .gguf file or a Hugging Face model folder)";
  LUM_CHECK(weights == WeightsFrom::Files)
      << path << ": random weights take a Hugging Face folder's config.json, not a GGUF file";
  return open_gguf(path, g, kv_cache, std::move(tensor_parallel));
}

}  // namespace luminal::models
