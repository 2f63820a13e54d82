// Text generation.
#include "luminal/models/generate.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <span>

#include "luminal/device_data.hpp"
#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/models/language_model.hpp"
#include "luminal/tensor.hpp"
#include "models/device_sampling.hpp"
#include "models/utf8.hpp"

namespace luminal::models {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

// Streams generated text: the ids not yet shown are decoded together (so multi-byte
// characters split across tokens come out whole), after the last token already shown
// (at first the prompt's last), which gives them their left context for decoders that
// handle spaces by position. Text is held back while it ends inside a UTF-8 sequence,
// until flush(); what comes out is valid UTF-8 (bytes that form no character, which a
// tokenizer's decode may keep as llama.cpp's does, become U+FFFD). Each step decodes a
// few tokens, not everything generated so far.
class TextStream {
 public:
  TextStream(const TextTokenizer& t, const std::vector<int32_t>& prompt) : t_(t) {
    if (!prompt.empty()) ids_.push_back(prompt.back());
    shown_ = t_.decode(ids_).size();
  }
  std::string push(int32_t id) {
    ids_.push_back(id);
    return take(false);
  }
  std::string flush() { return take(true); }

 private:
  std::string take(bool all) {
    const std::string text = t_.decode(ids_);
    if (text.size() <= shown_ || (!all && ends_inside_character(text))) return "";
    std::string piece = utf8_lossy(text.substr(shown_));
    ids_.erase(ids_.begin(), ids_.end() - 1);  // the last token becomes the context
    shown_ = t_.decode(ids_).size();
    return piece;
  }

  static bool ends_inside_character(const std::string& s) {
    if (s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0) return true;  // U+FFFD
    // Walk back over continuation bytes to the lead byte and compare lengths.
    size_t i = s.size(), cont = 0;
    while (i > 0 && cont < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i, ++cont;
    if (i == 0) return cont > 0;
    const size_t length = utf8_length(static_cast<unsigned char>(s[i - 1]));
    return length > 0 && cont < length - 1;
  }

  const TextTokenizer& t_;
  std::vector<int32_t> ids_;
  size_t shown_ = 0;
};

struct TextGenerator::Impl {
  Graph graph;
  LanguageModel lm;
  Tensor tokens, logits;
  // On a backend with memory of its own (a GPU's): the logits' argmax, computed and kept
  // there as a token id (i32, the tokens' type, so it can be the next step's token), and
  // the logits left there, so a greedy token costs one id copied instead of the
  // vocabulary's logits (half a megabyte for 128k) and a scan of them on the host.
  std::optional<Tensor> device_argmax;
  // There too, sampled tokens: drawn from the logits where they lie by a graph of its own
  // (DeviceSampler, over the kSampled most likely), run after each step.
  struct Sampling {
    Graph graph;
    Tensor logits;
    std::optional<DeviceSampler> sampler;
  };
  static constexpr int64_t kSampled = 1024;
  std::unique_ptr<Sampling> sampling;
  int64_t vocab = 0;
  std::vector<nn::KVCache> cache_out;
  int64_t past = 0;
  double load_seconds = 0, compile_seconds = 0, prepare_seconds = 0;
  std::shared_ptr<Communicator> ranks;  // of a tensor-parallel run; null: one

  // The ranks' logits may differ in their last bits (each times and picks its own
  // kernels for the parts every rank computes): rank 0's token is every rank's, so none
  // goes on from another.
  int32_t agreed(int32_t token) const {
    if (!ranks || ranks->size() == 1) return token;
    Buffer b(DType::I32, 1);
    b.set_i64(0, ranks->rank() == 0 ? token : 0);
    ranks->all_reduce(b);
    return static_cast<int32_t>(b.get_i64(0));
  }

  void reset_cache() {
    past = 0;
    for (auto& c : lm.model->cache_inputs) {
      c.k.set_buffer(Buffer(c.k.dtype(), 0));
      c.v.set_buffer(Buffer(c.v.dtype(), 0));
    }
  }

  // Runs the model on `ids` after the cached positions.
  void step(const std::vector<int32_t>& ids) {
    tokens.set(ids);
    run(static_cast<int64_t>(ids.size()), /*queued=*/false);
  }

  // Decoding one step ahead (Graph::execute_queued): each step's token is picked from the
  // last one's logits where they lie on the device (their argmax, or a draw), so the host
  // prepares a step while the GPU runs the one before, and reads that one's token after
  // queuing the next. (Not for tensor-parallel ranks, which agree on each token on the
  // host.)
  bool pipelines(const SamplingOptions& opts) const {
    if (ranks && ranks->size() > 1) return false;
    if (opts.temperature <= 0) return device_argmax.has_value();
    return sampling && sampling->sampler->follows(opts);
  }
  // The token after the last step, where it lies on the device: its argmax, or (sampled)
  // draw `draw`, queued on its logits.
  DeviceData device_token(bool sampled = false, int64_t draw = 0) {
    if (!sampled) return *graph.device_data(device_argmax->id());
    Graph& g = sampling->graph;
    g.set_device_data(sampling->logits.id(), *graph.device_data(logits.id()));
    g.set_dim("draw", draw);
    g.execute_queued();
    return *g.device_data(sampling->sampler->token.id());
  }
  // Queues a one-token step on `token`.
  void step_on(const DeviceData& token) {
    graph.set_device_data(tokens.id(), token);
    run(1, /*queued=*/true);
  }
  static int32_t token_of(const DeviceData& d) {
    return static_cast<int32_t>(d.to_host().get_i64(0));  // (waits for its step alone)
  }

  void run(int64_t n, bool queued) {
    graph.set_dim("seq", n);
    graph.set_dim("past", past);
    if (queued)
      graph.execute_queued();
    else
      graph.execute();
    past += n;
    // Straight into the graph: the caches are plain contiguous inputs of the right dtype,
    // so Tensor::set_buffer's checks (a view built and compared per call, 36 calls a
    // token) have nothing to catch. A GPU backend left them on the device.
    auto feed_back = [&](const Tensor& out, const Tensor& in) {
      if (std::optional<DeviceData> d = graph.take_device_data(out.id()))
        graph.set_device_data(in.id(), std::move(*d));
      else
        graph.set_data(in.id(), graph.take_data(out.id()).value());
    };
    for (size_t l = 0; l < cache_out.size(); ++l) {
      feed_back(cache_out[l].k, lm.model->cache_inputs[l].k);
      feed_back(cache_out[l].v, lm.model->cache_inputs[l].v);
    }
  }

  // The last step's last-position logits on the host, valid until the next step (on the
  // CPU they are the graph's output buffer: a copy of a 262k vocabulary's logits per
  // token is a megabyte written and read).
  std::span<const float> last_logits() {
    const Buffer* data = graph.data(logits.id());
    if (const DeviceData* d = graph.device_data(logits.id())) {
      copied = d->to_host();
      data = &copied;
    }
    LUM_CHECK(data) << "the model produced no logits";
    if (data->dtype() == DType::F32) return data->span<float>();
    widened = data->to_f32();
    return widened;
  }
  Buffer copied;               // logits copied from the device
  std::vector<float> widened;  // logits of another dtype, as f32

  // The next token after the last step: greedy ones from the device's argmax where there
  // is one (the same token: the lowest index among equal largest logits), the rest from
  // the logits on the host.
  int32_t next_token(const SamplingOptions& opts, uint64_t& rng) {
    if (device_argmax && opts.temperature <= 0)
      if (const DeviceData* d = graph.device_data(device_argmax->id())) return token_of(*d);
    return sample(last_logits(), opts, rng);
  }
};

TextGenerator::TextGenerator(const std::string& path, const Backend& backend,
                             const std::function<void(const std::string&)>& progress,
                             DType kv_cache, std::shared_ptr<Communicator> tensor_parallel,
                             WeightsFrom weights)
    : impl_(std::make_unique<Impl>()) {
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  const auto start = Clock::now();
  Impl& m = *impl_;
  m.ranks = tensor_parallel;
  m.lm = open_language_model(path, m.graph, kv_cache, std::move(tensor_parallel), weights);
  say("loaded " + m.lm.summary);
  m.tokens = m.graph.named_tensor("tokens", {"seq"}, DType::I32);
  // Only the last position's logits are needed to pick the next token.
  CausalLM::Output out = m.lm.model->forward(m.tokens, "seq", "past", /*last_only=*/true);
  m.logits = out.logits.retrieve();
  m.vocab = out.logits.shape().back().as_const().value_or(0);
  if (backend.device_memory() && m.vocab > 0) {
    m.logits.keep_on_device();
    // (Logits that are all NaN have no largest: the argmax is then `vocab`, clamped to an
    // id the next step can read.)
    m.device_argmax =
        out.logits.argmax(-1).clamp(0, static_cast<double>(m.vocab - 1)).cast(DType::I32);
    m.device_argmax->keep_on_device();
    const std::vector<Expr> shape = out.logits.shape();
    if (std::all_of(shape.begin(), shape.end(), [](Expr d) { return d.as_const().has_value(); })) {
      m.sampling = std::make_unique<Impl::Sampling>();
      Impl::Sampling& s = *m.sampling;
      s.logits = s.graph.named_tensor("logits", shape, out.logits.dtype());
      s.sampler.emplace(s.logits, m.vocab, Impl::kSampled);
      s.sampler->token.keep_on_device();
    }
  }
  m.cache_out = out.cache;
  // A GPU backend keeps the caches in device memory between steps.
  for (auto& c : m.cache_out) {
    c.k.keep_on_device();
    c.v.keep_on_device();
  }
  // Each step's cache replaces the last, so the run may grow the old one in place.
  for (auto& c : m.lm.model->cache_inputs) {
    m.graph.donate(c.k.id());
    m.graph.donate(c.v.id());
  }
  m.load_seconds = since(start);
  say("compiling for " + backend.name() + " (cached after the first run)...");
  const auto compile_start = Clock::now();
  m.graph.compile(backend);
  if (m.sampling) m.sampling->graph.compile(backend);
  m.compile_seconds = since(compile_start);
  // Decoding runs one token at a time; its kernels are specialised for that.
  const auto prepare_start = Clock::now();
  Bindings decode_dims;
  decode_dims.set("seq", 1);
  decode_dims.set("past", 2);  // any length but 1, which would specialise too
  m.graph.prepare(decode_dims);
  m.prepare_seconds = since(prepare_start);
}

TextGenerator::~TextGenerator() = default;

std::vector<int32_t> TextGenerator::encode(const std::string& text) const {
  return impl_->lm.tokenizer->encode(text);
}
std::string TextGenerator::architecture() const {
  return impl_->lm.architecture;
}

ChatFormat TextGenerator::chat_format() const {
  // Llama 2 and Llama 3 checkpoints share the architecture name; the vocabulary tells.
  if (architecture() == "llama")
    return impl_->lm.tokenizer->find("<|start_header_id|>") >= 0 ? ChatFormat::Llama3
                                                                 : ChatFormat::Llama2;
  return chat_format_for(architecture());
}

std::string TextGenerator::decode(const std::vector<int32_t>& ids) const {
  return impl_->lm.tokenizer->decode(ids);
}

GenerationStats TextGenerator::generate(const std::string& prompt, int64_t max_tokens,
                                        const SamplingOptions& opts,
                                        const std::function<void(const std::string&)>& on_text,
                                        bool ignore_eos) {
  Impl& m = *impl_;
  GenerationStats st;
  st.load_seconds = m.load_seconds;
  st.compile_seconds = m.compile_seconds;
  st.prepare_seconds = m.prepare_seconds;
  m.reset_cache();
  const std::vector<int32_t> ids = m.lm.tokenizer->encode(prompt);
  LUM_CHECK(!ids.empty()) << "the prompt is empty and the model adds no start token";
  st.prompt_tokens = ids.size();
  TextStream stream(*m.lm.tokenizer, ids);
  uint64_t rng = opts.seed;
  const auto start = Clock::now();
  m.step(ids);
  st.prefill_seconds = since(start);
  const auto decode_start = Clock::now();
  const bool pipelined = m.pipelines(opts), sampled = opts.temperature > 0;
  if (pipelined && sampled) m.sampling->sampler->set_draws(opts, max_tokens, rng);
  // Runs the step after `token` (queued on `on_device` where pipelined).
  auto timed_step = [&](int32_t token, const DeviceData* on_device) {
    const auto step_start = Clock::now();
    if (on_device)
      m.step_on(*on_device);
    else
      m.step({token});
    st.decode_run_seconds += since(step_start);
    const RunStats run = m.graph.last_run_stats();
    st.decode_issue_seconds += run.issue_seconds;
    st.decode_device_seconds += run.device_seconds;
    st.decode_graph_steps += run.replayed;
    st.decode_graph_updates += run.graph_nodes_updated;
  };
  bool step_ahead = false;  // a pipelined step queued past the last token taken
  for (int64_t i = 0; i < max_tokens; ++i) {
    const bool more = i + 1 < max_tokens;
    int32_t next = 0;
    if (pipelined) {
      // The step after this token is queued before the token is read, save after the
      // prompt (its token is read at once, for the time to it).
      const DeviceData token = m.device_token(sampled, i);
      if (i == 0) next = Impl::token_of(token), st.ttft_seconds = since(start);
      if ((step_ahead = more)) timed_step(0, &token);
      if (i > 0) next = Impl::token_of(token);
    } else {
      next = m.agreed(m.next_token(opts, rng));
      if (i == 0) st.ttft_seconds = since(start);
    }
    if (!ignore_eos &&
        std::find(m.lm.stop_ids.begin(), m.lm.stop_ids.end(), next) != m.lm.stop_ids.end())
      break;
    ++st.generated;
    if (const std::string piece = stream.push(next); on_text && !piece.empty()) on_text(piece);
    if (more && !pipelined) timed_step(next, nullptr);
    step_ahead = false;
  }
  // The last queued step settled: its time counted unless it ran past the last token.
  if (pipelined) {
    m.graph.wait();
    if (!step_ahead) st.decode_device_seconds += m.graph.last_run_stats().device_seconds;
    if (sampled) m.sampling->graph.wait();
  }
  if (const std::string rest = stream.flush(); on_text && !rest.empty()) on_text(rest);
  st.decode_seconds = since(decode_start);
  return st;
}

std::vector<std::vector<float>> TextGenerator::forced_logits(const std::vector<int32_t>& prompt,
                                                             const std::vector<int32_t>& tokens) {
  Impl& m = *impl_;
  m.reset_cache();
  auto copy = [](std::span<const float> x) { return std::vector<float>(x.begin(), x.end()); };
  m.step(prompt);
  std::vector<std::vector<float>> out{copy(m.last_logits())};
  for (int32_t t : tokens) {
    m.step({t});
    out.push_back(copy(m.last_logits()));
  }
  return out;
}

std::vector<int32_t> TextGenerator::greedy_ids(const std::vector<int32_t>& prompt, int64_t steps,
                                               std::vector<std::vector<float>>* all_logits) {
  Impl& m = *impl_;
  m.reset_cache();
  std::vector<int32_t> out;
  m.step(prompt);
  if (!all_logits && m.pipelines({})) {
    for (int64_t i = 0; i < steps; ++i) {
      const DeviceData token = m.device_token();
      if (i + 1 < steps) m.step_on(token);
      out.push_back(Impl::token_of(token));
    }
    m.graph.wait();
    return out;
  }
  for (int64_t i = 0; i < steps; ++i) {
    if (all_logits) {
      const std::span<const float> logits = m.last_logits();
      all_logits->emplace_back(logits.begin(), logits.end());
    }
    uint64_t rng = 0;
    const int32_t next = m.agreed(m.next_token({}, rng));
    out.push_back(next);
    if (i + 1 < steps) m.step({next});
  }
  return out;
}

}  // namespace luminal::models
