// The `luminal` command-line program.
//   luminal generate --model PATH [--prompt TEXT] [--max-tokens N] [--temperature T]
//                    [--top-k K] [--top-p P] [--seed S] [--device cpu|reference|cuda]
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "luminal/cpu.hpp"
#include "luminal/error.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/reference.hpp"

namespace {

constexpr const char* kUsage =
    "usage: luminal <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate   generate text from a model\n"
    "\n"
    "Run 'luminal <command> --help' for the command's options.\n";

constexpr const char* kGenerateUsage =
    "usage: luminal generate --model PATH [options]\n"
    "\n"
    "Loads a GGUF model, compiles it (cached after the first run), streams the generated\n"
    "text and reports prompt tokens/s, time to first token, decode tokens/s and peak memory.\n"
    "\n"
    "options:\n"
    "  --model PATH        a .gguf file (architectures: gemma3)\n"
    "  --prompt TEXT       the prompt (default: \"The capital of France is\")\n"
    "  --max-tokens N      tokens to generate (default: 32)\n"
    "  --temperature T     0 for greedy decoding (default: 0)\n"
    "  --top-k K           sample from the K most likely tokens (default: off)\n"
    "  --top-p P           sample from the smallest set with probability P (default: 1)\n"
    "  --seed S            random seed for sampling (default: 0)\n"
    "  --device DEV        cpu (default) or reference; cuda when built with CUDA\n"
    "  -h, --help          this help\n";

// A usage error: one line on stderr, exit status 2.
[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "luminal: %s (see --help)\n", msg.c_str());
  std::exit(2);
}

double peak_memory_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

int generate(int argc, char** argv) {
  std::string model, prompt = "The capital of France is", device = "cpu";
  int64_t max_tokens = 32;
  luminal::models::SamplingOptions opts;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("option " + a + " needs a value");
      return argv[++i];
    };
    auto number = [&](const std::string& v) {
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      if (v.empty() || *end) usage_error("option " + a + " expects a number, got '" + v + "'");
      return d;
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kGenerateUsage, stdout);
      return 0;
    } else if (a == "--model") {
      model = value();
    } else if (a == "--prompt") {
      prompt = value();
    } else if (a == "--max-tokens") {
      max_tokens = static_cast<int64_t>(number(value()));
    } else if (a == "--temperature") {
      opts.temperature = number(value());
    } else if (a == "--top-k") {
      opts.top_k = static_cast<int64_t>(number(value()));
    } else if (a == "--top-p") {
      opts.top_p = number(value());
    } else if (a == "--seed") {
      opts.seed = static_cast<uint64_t>(number(value()));
    } else if (a == "--device") {
      device = value();
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (model.empty()) usage_error("generate needs --model PATH");
  if (max_tokens < 0) usage_error("--max-tokens must be non-negative");
  if (device == "cuda") usage_error("this build has no CUDA backend; use --device cpu");
  if (device != "cpu" && device != "reference") usage_error("unknown device '" + device + "'");
  const luminal::CpuBackend cpu_backend;
  const luminal::ReferenceBackend ref_backend;
  const luminal::Backend& backend = device == "cpu"
                                        ? static_cast<const luminal::Backend&>(cpu_backend)
                                        : static_cast<const luminal::Backend&>(ref_backend);
  try {
    luminal::models::TextGenerator gen(
        model, backend, [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); });
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
    const auto st = gen.generate(prompt, max_tokens, opts, [](const std::string& piece) {
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
    });
    std::fprintf(stdout, "\n");
    std::fprintf(
        stderr,
        "\nprompt: %zu tokens, %.1f tokens/s | time to first token: %.3f s | decode: %zu tokens, "
        "%.2f tokens/s | load %.1f s, compile %.1f s | peak memory %.0f MiB\n",
        st.prompt_tokens, st.prompt_tokens_per_second(), st.ttft_seconds, st.generated,
        st.decode_tokens_per_second(), st.load_seconds, st.compile_seconds, peak_memory_mib());
    return 0;
  } catch (const luminal::Error& e) {
    std::fprintf(stderr, "luminal: %s\n", e.what());
    return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "generate") return generate(argc - 2, argv + 2);
  usage_error("unknown command '" + cmd + "'");
}
