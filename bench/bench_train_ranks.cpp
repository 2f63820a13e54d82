// Data-parallel training steps of a GPT-2-shaped model over N GPUs, one process a GPU
// (launch_ranks): each rank trains on its share of the batch, the gradients averaged
// over the ranks in buckets (train::average_over_ranks) inside the step's executable.
// The data are runs counting up from a random start (a next token there is to learn), the
// same global batch for any N, so `--ranks 1 --batch 8` and `--ranks 2 --batch 4` take
// the same steps and print the same losses up to rounding.
//
//   bench_train_ranks --ranks 2 --batch 8 --steps 12
//
// Prints a line per step (the loss averaged over the ranks), then the median step's
// milliseconds, tokens a second over all ranks and rank 0's peak GPU memory.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/nn/gpt.hpp"
#include "luminal/ranks.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/data_parallel.hpp"
#include "luminal/train/optimizer.hpp"

using namespace luminal;

namespace {

constexpr const char* kUsage =
    "usage: bench_train_ranks [--ranks N] [--shape gpt2-small|tiny] [--batch N] [--seq N]\n"
    "                         [--steps N] [--warmup N] [--bucket-mib N] [--compute bf16|f32]\n"
    "Times AdamW steps of a GPT-2-shaped model trained data-parallel on N GPUs (--batch\n"
    "rows of --seq tokens a GPU), printing each step's loss and the median step time.\n";

struct Options {
  int64_t ranks = 1, batch = 8, seq = 1024, steps = 12, warmup = 3, bucket_mib = 25;
  std::string shape = "gpt2-small", compute = "bf16";
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "bench_train_ranks: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  const std::map<std::string, int64_t*> ints = {
      {"--ranks", &o.ranks}, {"--batch", &o.batch},   {"--seq", &o.seq},
      {"--steps", &o.steps}, {"--warmup", &o.warmup}, {"--bucket-mib", &o.bucket_mib}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) fail(arg + " needs a value");
    const std::string value = argv[++i];
    if (auto it = ints.find(arg); it != ints.end()) {
      char* end = nullptr;
      *it->second = std::strtoll(value.c_str(), &end, 10);
      if (*end || *it->second < (arg == "--warmup" ? 0 : 1)) fail("bad value for " + arg);
    } else if (arg == "--shape") {
      o.shape = value;
    } else if (arg == "--compute") {
      o.compute = value;
    } else {
      fail("unknown option " + arg);
    }
  }
  if (o.shape != "gpt2-small" && o.shape != "tiny") fail("--shape is gpt2-small or tiny");
  if (o.compute != "bf16" && o.compute != "f32") fail("--compute is bf16 or f32");
  return o;
}

// Every rank draws the same weights: the ranks start alike and stay alike.
void initialise(const nn::NamedTensors& params) {
  std::mt19937 rng(20);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (const auto& [name, t] : params) {
    int64_t count = 1;
    for (const Expr& d : t.shape()) count *= d.eval();
    std::vector<float> values(static_cast<size_t>(count), 0.0f);
    const bool norm = name.find("ln_") != std::string::npos;
    if (name.ends_with("weight")) {
      for (float& v : values) v = norm ? 1.0f : normal(rng);
    }
    Tensor(t).set(values);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  std::optional<RankOf> rank;
  try {
    rank = this_rank();
    if (o.ranks > 1 && !rank) {
      std::string why;
      if (!cuda_available(&why, static_cast<int>(o.ranks) - 1)) fail(why);
      return launch_ranks(static_cast<int>(o.ranks), argv);
    }
    const int me = rank ? rank->rank : 0;
    std::shared_ptr<Communicator> comm;
    if (rank) {
      omp_set_num_threads(std::max(1, omp_get_num_procs() / rank->size));
      comm = join_ranks(*rank);
    }
    CudaBackend backend(CudaOptions{.device = me});

    const DType compute = o.compute == "bf16" ? DType::BF16 : DType::F32;
    const nn::GptConfig config = o.shape == "tiny"
                                     ? nn::GptConfig{512, o.seq, 2, 4, 128, 1e-5, compute}
                                     : nn::GptConfig{50257, o.seq, 12, 12, 768, 1e-5, compute};
    Graph g;
    nn::Gpt model(g, "", config);
    const nn::NamedTensors params = model.named_parameters();
    initialise(params);
    std::vector<Tensor> weights;
    for (const auto& [name, t] : params) weights.push_back(t);
    Tensor ids = g.named_tensor("ids", {o.batch, o.seq}, DType::I32);
    Tensor targets = g.named_tensor("targets", {o.batch, o.seq}, DType::I32);
    Tensor loss =
        -model.forward(ids).log_softmax(-1).gather_axis(2, targets.unsqueeze(2)).mean({0, 1, 2});
    std::vector<Tensor> grads = train::gradients(loss, weights);
    if (comm) {
      const size_t bucket = static_cast<size_t>(o.bucket_mib) << 20;
      grads = train::average_over_ranks(grads, comm, bucket);
      loss = train::average_over_ranks({loss}, comm)[0];
    }
    train::Optimizer opt = train::adamw(weights, grads, train::constant_lr(3e-4));
    loss.retrieve();
    const auto start = std::chrono::steady_clock::now();
    g.compile(backend);
    report_progress();

    // The global batch of each step: ranks x batch rows, this rank's from batch x me on.
    const int64_t ranks = rank ? rank->size : 1, vocab = config.vocab;
    std::vector<int32_t> xs(static_cast<size_t>(o.batch * o.seq)), ys(xs.size());
    std::vector<double> ms;
    for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
      std::mt19937 rng(static_cast<uint32_t>(1000 + step));
      for (int64_t row = 0; row < ranks * o.batch; ++row) {
        const int64_t first = static_cast<int64_t>(rng() % static_cast<uint32_t>(vocab));
        if (row / o.batch != me) continue;
        for (int64_t t = 0; t < o.seq; ++t) {
          const size_t at = static_cast<size_t>((row % o.batch) * o.seq + t);
          xs[at] = static_cast<int32_t>((first + t) % vocab);
          ys[at] = static_cast<int32_t>((first + t + 1) % vocab);
        }
      }
      ids.set(xs);
      targets.set(ys);
      const auto t0 = std::chrono::steady_clock::now();
      g.execute();
      const float l = loss.to_f32()[0];  // waits for the step
      const double took =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      opt.advance();
      report_progress();
      if (step == 0 && me == 0)
        std::printf(
            "compile and first step: %.1f s\n",
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (step >= o.warmup) ms.push_back(took);
      if (me == 0)
        std::printf("step %lld loss %.6f ms %.2f\n", static_cast<long long>(step), l, took);
      std::fflush(stdout);
    }
    if (me == 0 && !ms.empty()) {
      std::sort(ms.begin(), ms.end());
      const double median = ms[ms.size() / 2];
      std::printf(
          "ranks %lld batch %lld x %lld: median step %.2f ms, %.0f tokens/s, peak %.0f MiB\n",
          static_cast<long long>(ranks), static_cast<long long>(o.batch),
          static_cast<long long>(o.seq), median,
          static_cast<double>(ranks * o.batch * o.seq) / (median / 1e3),
          static_cast<double>(g.last_run_stats().peak_bytes) / (1 << 20));
    }
    return 0;
  } catch (const Error& e) {
    if (rank)
      std::fprintf(stderr, "bench_train_ranks: rank %d: %s\n", rank->rank, e.what());
    else
      std::fprintf(stderr, "bench_train_ranks: %s\n", e.what());
    return 2;
  }
}
