// Perplexity over windows, base distributions and KL divergence against them.
#include "luminal/models/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "luminal/error.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/models/language_model.hpp"

namespace luminal::models {
namespace {

constexpr char kMagic[8] = {'L', 'U', 'M', 'P', 'P', 'L', 'B', '1'};

uint64_t fnv1a(const std::vector<int32_t>& ids) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int32_t id : ids)
    for (int k = 0; k < 4; ++k) h = (h ^ ((static_cast<uint32_t>(id) >> (8 * k)) & 0xFF)) * 0x100000001B3ull;
  return h;
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

BasePosition base_position(std::span<const float> logprobs, int32_t next) {
  BasePosition p;
  p.actual_logprob = logprobs[static_cast<size_t>(next)];
  std::vector<int32_t> order(logprobs.size());
  std::iota(order.begin(), order.end(), 0);
  const auto by_prob = [&](int32_t a, int32_t b) {
    return logprobs[static_cast<size_t>(a)] > logprobs[static_cast<size_t>(b)] ||
           (logprobs[static_cast<size_t>(a)] == logprobs[static_cast<size_t>(b)] && a < b);
  };
  const size_t k = std::min<size_t>(BasePosition::kTop, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), by_prob);
  for (size_t i = 0; i < static_cast<size_t>(BasePosition::kTop); ++i) {
    p.top_ids[i] = i < k ? order[i] : -1;
    p.top_logprobs[i] = i < k ? logprobs[static_cast<size_t>(order[i])] : -INFINITY;
  }
  return p;
}

void log_softmax(std::span<const float> logits, std::vector<float>& out) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x - max));
  const auto log_sum = static_cast<float>(std::log(sum)) + max;
  out.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_sum;
}

double kl_divergence(const BasePosition& base, std::span<const float> logprobs) {
  double kl = 0, base_top = 0, run_top = 0;
  for (int i = 0; i < BasePosition::kTop && base.top_ids[i] >= 0; ++i) {
    const double p = std::exp(static_cast<double>(base.top_logprobs[i]));
    const double q_log = logprobs[static_cast<size_t>(base.top_ids[i])];
    kl += p * (base.top_logprobs[i] - q_log);
    base_top += p;
    run_top += std::exp(q_log);
  }
  const double base_rest = std::max(0.0, 1.0 - base_top), run_rest = std::max(1e-30, 1.0 - run_top);
  if (base_rest > 1e-12) kl += base_rest * std::log(base_rest / run_rest);
  return std::max(0.0, kl);
}

void PerplexityBase::save(const std::string& path) const {
  const std::string tmp = path + ".partial";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    LUM_CHECK(f) << path << ": cannot write the base distributions";
    const uint64_t header[4] = {static_cast<uint64_t>(ctx), tokens_hash, positions.size(),
                                static_cast<uint64_t>(BasePosition::kTop)};
    f.write(kMagic, sizeof kMagic);
    f.write(reinterpret_cast<const char*>(header), sizeof header);
    f.write(reinterpret_cast<const char*>(positions.data()),
            static_cast<std::streamsize>(positions.size() * sizeof(BasePosition)));
    LUM_CHECK(f.flush()) << path << ": writing the base distributions failed";
  }
  std::filesystem::rename(tmp, path);
}

PerplexityBase PerplexityBase::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  LUM_CHECK(f) << path << ": cannot read the base distributions";
  char magic[sizeof kMagic];
  uint64_t header[4] = {};
  f.read(magic, sizeof magic);
  f.read(reinterpret_cast<char*>(header), sizeof header);
  LUM_CHECK(f && std::memcmp(magic, kMagic, sizeof kMagic) == 0)
      << path << ": not a base file written by `luminal perplexity --save-base`";
  LUM_CHECK(header[3] == static_cast<uint64_t>(BasePosition::kTop) && header[2] < (1ull << 32))
      << path << ": base file of another layout (top " << header[3] << ")";
  const auto size = std::filesystem::file_size(path);
  LUM_CHECK(size == sizeof kMagic + sizeof header + header[2] * sizeof(BasePosition))
      << path << ": truncated or padded base file (" << size << " bytes for " << header[2]
      << " positions)";
  PerplexityBase b;
  b.ctx = static_cast<int64_t>(header[0]);
  b.tokens_hash = header[1];
  b.positions.resize(header[2]);
  f.read(reinterpret_cast<char*>(b.positions.data()),
         static_cast<std::streamsize>(b.positions.size() * sizeof(BasePosition)));
  LUM_CHECK(f) << path << ": cannot read the base distributions";
  return b;
}

struct PerplexityRunner::Impl {
  PerplexityOptions options;
  // One pass over a window: every position's logits.
  Graph graph;
  LanguageModel lm;
  Tensor tokens, logits;
  // Or the decode steps of a generator (options.decode).
  std::unique_ptr<TextGenerator> generator;

  std::vector<int32_t> encode(const std::string& text) const {
    return generator ? generator->encode(text) : lm.tokenizer->encode(text);
  }

  // The logits predicting window[j + 1] for each scored position j = from .. ctx - 2.
  void score_window(const std::vector<int32_t>& window, int64_t from,
                    const std::function<void(int64_t, std::span<const float>)>& row) {
    const int64_t ctx = static_cast<int64_t>(window.size());
    if (generator) {
      const std::vector<int32_t> prompt(window.begin(), window.begin() + from + 1);
      const std::vector<int32_t> rest(window.begin() + from + 1, window.end() - 1);
      const auto rows = generator->forced_logits(prompt, rest);
      for (int64_t j = from; j + 1 < ctx; ++j) row(j, rows[static_cast<size_t>(j - from)]);
      return;
    }
    graph.set_dim("seq", ctx);
    graph.set_dim("past", 0);
    tokens.set(window);
    graph.execute();
    const Buffer* data = graph.data(logits.id());
    LUM_CHECK(data) << "the model produced no logits";
    std::vector<float> widened;
    if (data->dtype() != DType::F32) widened = data->to_f32();
    const std::span<const float> all = widened.empty() ? data->span<float>() : widened;
    const size_t vocab = all.size() / static_cast<size_t>(ctx);
    for (int64_t j = from; j + 1 < ctx; ++j)
      row(j, all.subspan(static_cast<size_t>(j) * vocab, vocab));
  }
};

PerplexityRunner::PerplexityRunner(const std::string& model, const Backend& backend,
                                   const PerplexityOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = options;
  LUM_CHECK(options.ctx >= 4) << "perplexity: the window (--ctx) must be at least 4 tokens";
  if (options.decode) {
    m.generator = std::make_unique<TextGenerator>(model, backend, nullptr, options.kv_cache);
    return;
  }
  m.lm = open_language_model(model, m.graph, options.kv_cache);
  m.tokens = m.graph.named_tensor("tokens", {"seq"}, DType::I32);
  // Every position's logits, each window from an empty cache.
  m.logits = m.lm.model->forward(m.tokens, "seq", "past", /*last_only=*/false).logits.retrieve();
  for (auto& c : m.lm.model->cache_inputs) {
    c.k.set_buffer(Buffer(c.k.dtype(), 0));
    c.v.set_buffer(Buffer(c.v.dtype(), 0));
  }
  m.graph.compile(backend);
}

PerplexityRunner::~PerplexityRunner() = default;

std::vector<int32_t> PerplexityRunner::tokenize(const std::string& text) const {
  return impl_->encode(text);
}

PerplexityReport PerplexityRunner::run(const std::string& text,
                                       const std::function<void(int64_t, int64_t)>& progress,
                                       const PerplexityBase* base, PerplexityBase* keep) {
  Impl& m = *impl_;
  const int64_t ctx = m.options.ctx;
  const std::vector<int32_t> ids = tokenize(text);
  // As llama.cpp: a model that starts its input with BOS gets it at every window's start.
  const std::vector<int32_t> prefix = m.encode("");
  const int32_t bos = prefix.size() == 1 ? prefix[0] : -1;
  int64_t windows = static_cast<int64_t>(ids.size()) / ctx;
  if (m.options.max_windows > 0) windows = std::min(windows, m.options.max_windows);
  LUM_CHECK(windows > 0) << "perplexity: the text has " << ids.size()
                         << " tokens, fewer than one window of " << ctx << " (--ctx)";
  const uint64_t hash = fnv1a(ids);
  if (base) {
    LUM_CHECK(base->ctx == ctx && base->tokens_hash == hash)
        << "perplexity: the base distributions were made with another text, tokenizer or --ctx ("
        << base->ctx << ")";
  }
  if (keep) *keep = PerplexityBase{ctx, hash, {}};

  PerplexityReport r;
  r.windows = windows;
  r.has_base = base != nullptr;
  double nll = 0, nll_sq = 0, base_nll = 0, kl_sum = 0;
  int64_t agree = 0;
  std::vector<double> kls;
  std::vector<float> logprobs;
  size_t at_base = 0;
  for (int64_t w = 0; w < windows; ++w) {
    std::vector<int32_t> window(ids.begin() + w * ctx, ids.begin() + (w + 1) * ctx);
    if (bos >= 0) window[0] = bos;
    m.score_window(window, ctx / 2, [&](int64_t j, std::span<const float> row) {
      log_softmax(row, logprobs);
      const int32_t next = ids[static_cast<size_t>(w * ctx + j + 1)];
      const double lp = logprobs[static_cast<size_t>(next)];
      nll -= lp;
      nll_sq += lp * lp;
      ++r.scored;
      if (keep) keep->positions.push_back(base_position(logprobs, next));
      if (base) {
        LUM_CHECK(at_base < base->positions.size()) << "perplexity: the base has fewer positions";
        const BasePosition& b = base->positions[at_base++];
        base_nll -= b.actual_logprob;
        const double kl = kl_divergence(b, logprobs);
        kl_sum += kl;
        kls.push_back(kl);
        agree += argmax(logprobs) == b.top_ids[0];
      }
    });
    if (progress) progress(w + 1, windows);
  }
  const double n = static_cast<double>(r.scored);
  const double mean = nll / n;
  r.perplexity = std::exp(mean);
  // The standard error of the mean NLL, carried through exp (as llama.cpp reports it).
  const double var = std::max(0.0, nll_sq / n - mean * mean);
  r.perplexity_error = r.perplexity * std::sqrt(var / std::max(1.0, n - 1));
  if (base) {
    r.base_perplexity = std::exp(base_nll / n);
    r.mean_kl = kl_sum / n;
    std::sort(kls.begin(), kls.end());
    r.kl_p99 = kls[std::min(kls.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(kls.size())))];
    r.top1_agreement = static_cast<double>(agree) / n;
  }
  return r;
}

}  // namespace luminal::models
