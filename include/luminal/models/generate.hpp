// Text generation with a loaded model: prefill, then one token per step through the KV
// cache, with greedy or temperature / top-k / top-p sampling.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "luminal/backend.hpp"
#include "luminal/collective.hpp"
#include "luminal/dtype.hpp"
#include "luminal/models/chat_template.hpp"
#include "luminal/models/language_model.hpp"
#include "luminal/models/sampling.hpp"

namespace luminal::models {

struct GenerationStats {
  size_t prompt_tokens = 0, generated = 0;
  double load_seconds = 0, compile_seconds = 0, ttft_seconds = 0, prefill_seconds = 0,
         decode_seconds = 0;
  // Backend::prepare after compiling: the weights uploaded to a GPU, or re-laid out and
  // decode kernels specialised on the CPU.
  double prepare_seconds = 0;
  // Summed over the decode steps: the backend's runs (RunStats: the runs' wall time, the
  // host's time queuing GPU work, the device's time running it).
  double decode_run_seconds = 0, decode_issue_seconds = 0, decode_device_seconds = 0;
  // Decode steps run as one CUDA graph, and the graph nodes they gave new parameters.
  size_t decode_graph_steps = 0, decode_graph_updates = 0;
  double prompt_tokens_per_second() const {
    return prefill_seconds > 0 ? prompt_tokens / prefill_seconds : 0;
  }
  double decode_tokens_per_second() const {
    return decode_seconds > 0 && generated > 1 ? (generated - 1) / decode_seconds : 0;
  }
};

class TextGenerator {
 public:
  /// Loads a model (see open_language_model: a GGUF file or a Hugging Face folder) and
  /// compiles it for `backend`. `progress` receives status lines. `kv_cache`: the KV
  /// cache's element type, f32 or f16. `tensor_parallel`: this generator is one rank of a
  /// tensor-parallel run (every rank generates the same tokens; see open_language_model).
  TextGenerator(const std::string& path, const Backend& backend,
                const std::function<void(const std::string&)>& progress = {},
                DType kv_cache = DType::F32,
                std::shared_ptr<Communicator> tensor_parallel = nullptr,
                WeightsFrom weights = WeightsFrom::Files);
  ~TextGenerator();

  /// Generates up to `max_tokens` after `prompt`, calling `on_text` with each piece as
  /// it is produced; stops early at an end-of-sequence token unless `ignore_eos` (for
  /// benchmarks that must run a fixed number of steps).
  GenerationStats generate(const std::string& prompt, int64_t max_tokens,
                           const SamplingOptions& opts,
                           const std::function<void(const std::string&)>& on_text,
                           bool ignore_eos = false);
  /// Greedy token ids and the logits of every generated step (for tests).
  std::vector<int32_t> greedy_ids(const std::vector<int32_t>& prompt, int64_t steps,
                                  std::vector<std::vector<float>>* logits = nullptr);
  /// Teacher forcing: the logits after `prompt` and after each of `tokens` fed in turn
  /// (row i predicts tokens[i]; the last row follows the last token).
  std::vector<std::vector<float>> forced_logits(const std::vector<int32_t>& prompt,
                                                const std::vector<int32_t>& tokens);
  std::vector<int32_t> encode(const std::string& text) const;
  /// The loaded model's architecture (GGUF general.architecture or HF model_type).
  std::string architecture() const;
  /// The chat format its conversations are rendered in (an error if none is known).
  ChatFormat chat_format() const;
  std::string decode(const std::vector<int32_t>& ids) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace luminal::models
