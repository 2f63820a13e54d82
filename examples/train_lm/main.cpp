// Trains a character-level GPT (nn::Gpt) on a text file with luminal, then writes a
// sample of what it learned. Forward pass, gradients and the AdamW step compile into
// one executable run once per batch; the sampler is a second executable over the same
// weights whose sequence length is a symbolic dim, so it grows without recompiling.
//
//   build/examples/train_lm docs/architecture.md --steps 300
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include "luminal/luminal.hpp"
#include "luminal/nn/gpt.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/optimizer.hpp"
#include "luminal/train/progress.hpp"

using namespace luminal;

namespace {

constexpr const char* kUsage =
    "usage: train_lm TEXT [--steps N] [--batch N] [--context N] [--layers N] [--heads N]\n"
    "                [--dim N] [--lr RATE] [--seed N] [--sample N] [--log-every N]\n"
    "                [--device cpu|cuda]\n"
    "Trains a character-level GPT on TEXT (AdamW, warm-up then cosine decay), printing\n"
    "the loss every --log-every steps, then samples --sample characters from it.\n";

struct Options {
  std::string text, device = "cpu";
  int64_t steps = 300, batch = 16, context = 64, layers = 2, heads = 4, dim = 64, sample = 200,
          log_every = 50;
  double lr = 3e-3;
  uint64_t seed = 0;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "train_lm: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  const std::map<std::string, int64_t*> ints = {
      {"--steps", &o.steps},   {"--batch", &o.batch},        {"--context", &o.context},
      {"--layers", &o.layers}, {"--heads", &o.heads},        {"--dim", &o.dim},
      {"--sample", &o.sample}, {"--log-every", &o.log_every}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "-h" || arg == "--help") {
        std::fputs(kUsage, stdout);
        std::exit(0);
      } else if (auto it = ints.find(arg); it != ints.end()) {
        *it->second = std::stoll(value());
        if (*it->second < (arg == "--sample" ? 0 : 1)) fail(arg + " must be positive");
      } else if (arg == "--lr") {
        o.lr = std::stod(value());
      } else if (arg == "--seed") {
        o.seed = std::stoull(value());
      } else if (arg == "--device") {
        o.device = value();
      } else if (!arg.empty() && arg[0] == '-') {
        fail("unknown option " + arg);
      } else if (o.text.empty()) {
        o.text = arg;
      } else {
        fail("more than one text file");
      }
    } catch (const std::logic_error&) {
      fail("bad value for " + arg);
    }
  }
  if (o.text.empty()) fail("no text file");
  if (o.device != "cpu" && o.device != "cuda") fail("--device is cpu or cuda, not " + o.device);
  if (o.dim % o.heads != 0) fail("--dim must be a multiple of --heads");
  return o;
}

// GPT-2's initialisation: weights normal(0, 0.02) (the residual projections scaled by
// 1/sqrt(2 layers)), biases zero, LayerNorms one and zero.
void initialise(const nn::NamedTensors& params, int64_t layers, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (const auto& [name, t] : params) {
    size_t count = 1;
    for (const Expr& d : t.shape()) count *= static_cast<size_t>(d.eval());
    std::vector<float> values(count, 0.0f);
    const bool norm = name.find("ln_") != std::string::npos;
    if (norm && name.ends_with("weight")) {
      std::fill(values.begin(), values.end(), 1.0f);
    } else if (!norm && name.ends_with("weight")) {
      const bool residual = name.ends_with("c_proj.weight");
      std::normal_distribution<float> d(
          0.0f, residual ? 0.02f / std::sqrt(2.0f * static_cast<float>(layers)) : 0.02f);
      for (float& v : values) v = d(rng);
    }
    Tensor(t).set(values);
  }
}

Buffer host_value(const Graph& g, NodeId id) {
  return g.data(id) ? *g.data(id) : g.device_data(id)->to_host();
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::ifstream in(o.text, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "train_lm: cannot read %s\n", o.text.c_str());
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  if (text.size() < static_cast<size_t>(o.context) + 2) {
    std::fprintf(stderr, "train_lm: %s has %zu characters; it needs more than --context (%lld)\n",
                 o.text.c_str(), text.size(), static_cast<long long>(o.context));
    return 1;
  }
  // The vocabulary: the bytes the text uses.
  std::vector<int> id_of(256, -1);
  std::string chars;
  for (unsigned char c : text)
    if (id_of[c] < 0) id_of[c] = 0, chars.push_back(static_cast<char>(c));
  std::sort(chars.begin(), chars.end());
  for (size_t i = 0; i < chars.size(); ++i)
    id_of[static_cast<unsigned char>(chars[i])] = static_cast<int>(i);

  try {
    const std::unique_ptr<Backend> backend = o.device == "cuda"
                                                 ? std::unique_ptr<Backend>(new CudaBackend())
                                                 : std::unique_ptr<Backend>(new CpuBackend());
    const nn::GptConfig config{static_cast<int64_t>(chars.size()), o.context, o.layers, o.heads,
                               o.dim};
    std::printf(
        "%zu characters, vocabulary %zu, %lld layers of %lld dims, %lld steps of %lld x %lld\n",
        text.size(), chars.size(), static_cast<long long>(o.layers), static_cast<long long>(o.dim),
        static_cast<long long>(o.steps), static_cast<long long>(o.batch),
        static_cast<long long>(o.context));

    Graph g;
    nn::Gpt model(g, "", config);
    const nn::NamedTensors params = model.named_parameters();
    initialise(params, o.layers, o.seed + 1);
    std::vector<Tensor> weights;
    for (const auto& [name, t] : params) weights.push_back(t);
    Tensor ids = g.named_tensor("ids", {o.batch, o.context}, DType::I32);
    Tensor targets = g.named_tensor("targets", {o.batch, o.context}, DType::I32);
    Tensor loss =
        -model.forward(ids).log_softmax(-1).gather_axis(2, targets.unsqueeze(2)).mean({0, 1, 2});
    train::Optimizer opt =
        train::adamw(weights, train::clip_grad_norm(train::gradients(loss, weights), 1.0),
                     train::warmup_cosine(
                         o.lr, std::min<int64_t>(o.steps - 1, std::max<int64_t>(1, o.steps / 10)),
                         o.steps, o.lr / 10),
                     {.weight_decay = 0.1});
    loss.retrieve();
    const auto start = std::chrono::steady_clock::now();
    g.compile(*backend);
    std::fprintf(stderr, "compiled in %.1f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

    std::mt19937_64 rng(o.seed + 2);
    std::uniform_int_distribution<size_t> offset(0,
                                                 text.size() - static_cast<size_t>(o.context) - 1);
    std::vector<int32_t> xb(static_cast<size_t>(o.batch * o.context)), yb(xb.size());
    train::ProgressBar bar(o.steps, o.batch * o.context, "tokens");
    double recent = 0;
    for (int64_t step = 0; step < o.steps; ++step) {
      for (int64_t b = 0; b < o.batch; ++b) {
        const size_t at = offset(rng);
        for (int64_t t = 0; t < o.context; ++t) {
          xb[static_cast<size_t>(b * o.context + t)] =
              id_of[static_cast<unsigned char>(text[at + static_cast<size_t>(t)])];
          yb[static_cast<size_t>(b * o.context + t)] =
              id_of[static_cast<unsigned char>(text[at + static_cast<size_t>(t) + 1])];
        }
      }
      ids.set(xb);
      targets.set(yb);
      g.execute();
      opt.advance();
      const double l = loss.to_f32()[0];
      recent += l;
      bar.step(l);
      if ((step + 1) % o.log_every == 0) {
        bar.finish();
        std::printf("step %lld: loss %.4f\n", static_cast<long long>(step + 1),
                    recent / static_cast<double>(o.log_every));
        std::fflush(stdout);
        recent = 0;
      }
    }
    bar.finish();

    // Sampling: the same model over a growing sequence, weights copied from training.
    Graph s;
    nn::Gpt sampler(s, "", config);
    const nn::NamedTensors trained = sampler.named_parameters();
    for (size_t i = 0; i < params.size(); ++i)
      Tensor(trained[i].second).set_buffer(host_value(g, params[i].second.id()));
    Tensor prompt = s.named_tensor("prompt", {1, "seq"}, DType::I32);
    const Tensor next = sampler.forward(prompt).slice(1, Expr("seq") - 1, "seq").retrieve();
    std::vector<int32_t> context = {id_of[static_cast<unsigned char>(text[0])]};
    std::string sample(1, text[0]);
    s.set_dim("seq", 1);
    prompt.set(context);
    s.compile(*backend);
    for (int64_t i = 0; i < o.sample; ++i) {
      const int64_t n = static_cast<int64_t>(context.size());
      s.set_dim("seq", n);
      prompt.set(context);
      s.execute();
      std::vector<float> logits = next.to_f32();
      const float top = *std::max_element(logits.begin(), logits.end());
      std::vector<double> p;
      for (float l : logits) p.push_back(std::exp((l - top) / 0.8));  // temperature 0.8
      const int c = std::discrete_distribution<int>(p.begin(), p.end())(rng);
      sample.push_back(chars[static_cast<size_t>(c)]);
      context.push_back(c);
      if (static_cast<int64_t>(context.size()) > o.context) context.erase(context.begin());
    }
    std::printf("sample:\n%s\n", sample.c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "train_lm: %s\n", e.what());
    return 1;
  }
  return 0;
}
