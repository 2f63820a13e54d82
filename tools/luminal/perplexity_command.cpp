// `luminal perplexity`: perplexity of a model over a text file, optionally against the
// distributions of an exact run (KL divergence, top-1 agreement).
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "cli.hpp"
#include "luminal/cpu.hpp"
#include "luminal/error.hpp"
#include "luminal/models/perplexity.hpp"

namespace luminal::cli {
namespace {

constexpr const char* kUsage =
    "usage: luminal perplexity --model PATH --file TEXT [options]\n"
    "\n"
    "Perplexity of a model over a text file, as llama.cpp's llama-perplexity computes it:\n"
    "the tokens are cut into windows of --ctx, each starting afresh (with BOS where the\n"
    "model uses one), and the second half of every window is scored.\n"
    "\n"
    "options:\n"
    "  --model PATH          a .gguf file or a Hugging Face model folder\n"
    "  --file TEXT           the text to score\n"
    "  --ctx N               window length in tokens (default: 512)\n"
    "  --chunks N            score only the first N windows (default: all)\n"
    "  --exact               f32 activations and KV cache, weights decoded exactly: the\n"
    "                        model's own numbers (slower); default: the fast kernels\n"
    "                        `generate` uses (int8 activations, f16 KV cache)\n"
    "  --residual WHICH      the fast kernels' products that carry a second int8 term\n"
    "                        for each activation's rounding error: sensitive (default),\n"
    "                        all or none (generate --help)\n"
    "  --decode              score through one-token decode steps, as `generate` runs\n"
    "                        (each window's first half as the prompt): the decode\n"
    "                        kernels' numbers; slower\n"
    "  --kv-cache TYPE       the KV cache's element type, f16 or f32 (default: f32 with\n"
    "                        --exact, else f16)\n"
    "  --save-base FILE      keep every scored position's distribution (its top 32 tokens)\n"
    "                        in FILE, to compare later runs with (usually with --exact)\n"
    "  --kl-divergence FILE  compare with a base saved by --save-base on the same text and\n"
    "                        --ctx: mean and 99th-percentile KL divergence, top-1 agreement\n"
    "  --device DEV          cpu (default), cuda (an NVIDIA GPU) or reference\n"
    "  --threads N           CPU threads (default: one per core)\n"
    "  --search MODE         time equivalent kernels on this machine and keep the\n"
    "                        fastest: off, fast (default) or full; winners are cached\n"
    "  --search-budget S     seconds the search may spend timing (default 10; full: 120)\n"
    "  -h, --help            this help\n";

struct Options {
  std::string model, file, save_base, kl_base, device = "cpu";
  models::PerplexityOptions run;
  bool exact = false;
  CpuOptions::Residual residual = CpuOptions{}.residual;
  std::string kv_cache;  // empty: f32 with --exact, else f16
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("option " + a + " needs a value");
      return argv[++i];
    };
    auto positive = [&](const std::string& v) {
      const double n = number(a, v);
      if (n < 1 || n != static_cast<double>(static_cast<int64_t>(n)))
        usage_error(a + " must be a positive integer, got '" + v + "'");
      return static_cast<int64_t>(n);
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--model") {
      o.model = value();
    } else if (a == "--file") {
      o.file = value();
    } else if (a == "--ctx") {
      o.run.ctx = positive(value());
    } else if (a == "--chunks") {
      o.run.max_windows = positive(value());
    } else if (a == "--exact") {
      o.exact = true;
    } else if (a == "--residual") {
      o.residual = residual_term(value());
    } else if (a == "--decode") {
      o.run.decode = true;
    } else if (a == "--kv-cache") {
      o.kv_cache = value();
      if (o.kv_cache != "f32" && o.kv_cache != "f16")
        usage_error("--kv-cache must be f32 or f16, got '" + o.kv_cache + "'");
    } else if (a == "--save-base") {
      o.save_base = value();
    } else if (a == "--kl-divergence") {
      o.kl_base = value();
    } else if (a == "--device") {
      o.device = value();
    } else if (search_option(a, value)) {
    } else if (a == "--threads") {
      omp_set_num_threads(static_cast<int>(positive(value())));
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (o.model.empty()) usage_error("perplexity needs --model PATH");
  if (o.file.empty()) usage_error("perplexity needs --file TEXT");
  if (o.run.ctx < 4) usage_error("--ctx must be at least 4");
  check_device(o.device);
  o.run.kv_cache = (o.kv_cache.empty() ? o.exact : o.kv_cache == "f32") ? DType::F32 : DType::F16;
  return o;
}

// A one-line bar on stderr, redrawn in place on a terminal and once per tenth otherwise.
class ProgressBar {
 public:
  void operator()(int64_t done, int64_t total) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    const double left =
        done > 0 ? seconds / static_cast<double>(done) * static_cast<double>(total - done) : 0;
    const int width = 30, filled = static_cast<int>(width * done / total);
    if (!tty_ && done != total && done * 10 / total == (done - 1) * 10 / total) return;
    std::fprintf(stderr, "%s[%s%s] %lld/%lld windows, %.0f s, %.0f s left%s", tty_ ? "\r" : "",
                 std::string(static_cast<size_t>(filled), '=').c_str(),
                 std::string(static_cast<size_t>(width - filled), ' ').c_str(),
                 static_cast<long long>(done), static_cast<long long>(total), seconds, left,
                 tty_ && done != total ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_ = Clock::now();
  bool tty_ = isatty(STDERR_FILENO);
};

}  // namespace

int perplexity(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    std::ifstream f(o.file, std::ios::binary);
    LUM_CHECK(f) << o.file << ": cannot read the text";
    const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    std::optional<models::PerplexityBase> base;
    if (!o.kl_base.empty()) base = models::PerplexityBase::load(o.kl_base);
    const std::unique_ptr<Backend> owned =
        backend_for(o.device, {.int8_activations = !o.exact, .residual = o.residual});
    const Backend& backend = *owned;
    std::fprintf(stderr, "loading and compiling %s for %s%s...\n", o.model.c_str(),
                 backend.name().c_str(), o.exact ? " (exact)" : "");
    models::PerplexityRunner runner(o.model, backend, o.run);
    models::PerplexityBase keep;
    ProgressBar bar;
    const models::PerplexityReport r = runner.run(
        text, [&](int64_t done, int64_t total) { bar(done, total); }, base ? &*base : nullptr,
        o.save_base.empty() ? nullptr : &keep);
    if (!o.save_base.empty()) keep.save(o.save_base);
    std::printf("model: %s (%s%s)\n", o.model.c_str(),
                o.exact ? "exact"
                : o.residual == CpuOptions::Residual::all
                    ? "fast kernels, residual term on every product"
                : o.residual == CpuOptions::Residual::sensitive
                    ? "fast kernels, residual term on the sensitive products"
                    : "fast kernels, one int8 term",
                o.run.decode ? ", decode steps" : "");
    std::printf("text: %s, %lld windows of %lld tokens, %lld tokens scored\n", o.file.c_str(),
                static_cast<long long>(r.windows), static_cast<long long>(o.run.ctx),
                static_cast<long long>(r.scored));
    std::printf("perplexity: %.4f +/- %.4f\n", r.perplexity, r.perplexity_error);
    if (r.has_base) {
      std::printf("base perplexity: %.4f (ratio %.4f)\n", r.base_perplexity,
                  r.perplexity / r.base_perplexity);
      std::printf("mean KL divergence: %.6f\n", r.mean_kl);
      std::printf("99th percentile KL divergence: %.6f\n", r.kl_p99);
      std::printf("top-1 agreement: %.2f%%\n", 100.0 * r.top1_agreement);
    }
    if (!o.save_base.empty()) std::printf("base distributions saved to %s\n", o.save_base.c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "luminal: %s\n", e.what());
    return 2;
  }
}

}  // namespace luminal::cli
