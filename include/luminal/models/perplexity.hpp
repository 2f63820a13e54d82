// How well a model predicts a text, as llama.cpp's llama-perplexity measures it: the text
// is cut into windows of `ctx` tokens (the first made BOS where the model wants one), and
// in each window the second half of the positions is scored, so every scored token has
// at least ctx/2 tokens of context. Perplexity is exp(mean negative log-likelihood).
//
// A run can also keep each scored position's distribution (its top entries and the rest's
// mass) as a base file, and a later run compare its own distributions with a base: mean
// and 99th-percentile KL divergence and top-1 agreement tell how far a fast path moves
// the model's output from an exact run of the same model.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "luminal/backend.hpp"
#include "luminal/dtype.hpp"

namespace luminal::models {

/// One scored position of a base run: the next token's log-probability and the
/// distribution's `kTop` most likely tokens (log-probabilities, descending); the rest of
/// the mass is 1 - sum(exp(top)).
struct BasePosition {
  static constexpr int kTop = 32;
  float actual_logprob = 0;
  int32_t top_ids[kTop];
  float top_logprobs[kTop];
};

/// A base position from a run's log-softmax at one position and the token that followed.
BasePosition base_position(std::span<const float> logprobs, int32_t next);

/// KL(base || run) over the base's top tokens plus one bucket for all others (a lower
/// bound of the full divergence, by the log-sum inequality, and equal to it as the
/// others' mass vanishes). `logprobs`: the run's log-softmax over the vocabulary.
double kl_divergence(const BasePosition& base, std::span<const float> logprobs);

/// log-softmax of `logits` into `out` (resized), in double precision sums.
void log_softmax(std::span<const float> logits, std::vector<float>& out);

/// The distributions of a base run, with what identifies its windows.
struct PerplexityBase {
  int64_t ctx = 0;
  uint64_t tokens_hash = 0;  // FNV-1a of the text's token ids: the same text and tokenizer
  std::vector<BasePosition> positions;
  /// Writes atomically (a temporary file renamed), so a failed run leaves no half file.
  void save(const std::string& path) const;
  /// Reads a file save() wrote; a malformed one is an error naming it.
  static PerplexityBase load(const std::string& path);
};

struct PerplexityOptions {
  int64_t ctx = 512;
  int64_t max_windows = 0;  // 0: every whole window of the text
  DType kv_cache = DType::F16;
  /// Score through the one-token decode steps a generation runs (each window's first
  /// half as a prompt, then one token at a time through the KV cache) instead of one
  /// pass over the window: the decode kernels' numbers, slower.
  bool decode = false;
};

struct PerplexityReport {
  int64_t windows = 0, scored = 0;
  double perplexity = 0, perplexity_error = 0;  // error: one standard error, propagated
  // Against a base run (has_base):
  bool has_base = false;
  double base_perplexity = 0, mean_kl = 0, kl_p99 = 0, top1_agreement = 0;
};

class PerplexityRunner {
 public:
  /// Opens the model (a GGUF file or a Hugging Face folder; see open_language_model) and
  /// compiles it for `backend` to return every position's logits.
  PerplexityRunner(const std::string& model, const Backend& backend,
                   const PerplexityOptions& options = {});
  ~PerplexityRunner();

  /// The text's token ids as scored (BOS first where the model adds one).
  std::vector<int32_t> tokenize(const std::string& text) const;

  /// Scores `text`. `progress(done, total)` is called after each window. With `base`,
  /// the run is compared with it; with `keep`, the run's own distributions are kept
  /// there (to save as a base).
  PerplexityReport run(const std::string& text,
                       const std::function<void(int64_t, int64_t)>& progress = {},
                       const PerplexityBase* base = nullptr, PerplexityBase* keep = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace luminal::models
