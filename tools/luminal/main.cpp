// The `luminal` command-line program.
//   luminal generate --model PATH [--prompt TEXT] [--max-tokens N] [--temperature T]
//                    [--top-k K] [--top-p P] [--seed S] [--device cpu|reference|cuda]
//                    [--threads N] [--kv-cache f32|f16] [--tp N] [--random-weights]
//   luminal chat --model PATH [...]
//   luminal perplexity --model PATH --file TEXT [...]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "luminal/cpu.hpp"
#include "luminal/cuda.hpp"
#include "luminal/error.hpp"
#include "luminal/models/chat_template.hpp"
#include "luminal/models/generate.hpp"
#include "luminal/ranks.hpp"

namespace {

constexpr const char* kUsage =
    "usage: luminal <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate   generate text from a model\n"
    "  chat       talk with a model, using its chat template\n"
    "  perplexity how well a model predicts a text (and how far fast kernels move it)\n"
    "\n"
    "Run 'luminal <command> --help' for the command's options.\n";

// The options generate and chat share, after their own: a macro, so that each usage
// stays one string literal.
#define LUMINAL_SHARED_OPTIONS                                                            \
  "  --kv-cache TYPE     the KV cache's element type: f16 (default; half the memory)\n"   \
  "                      or f32\n"                                                        \
  "  --residual WHICH    the products that carry a second int8 term for each\n"           \
  "                      activation's rounding error: sensitive (default: next to\n"      \
  "                      the attentions, and the feed-forward's down projections),\n"     \
  "                      all (the f32-activation model's outputs; prompts slower)\n"      \
  "                      or none (fastest; llama.cpp's rounding). On the CPU; the\n"      \
  "                      GPU's int8 products carry one term (none)\n"                     \
  "  --search MODE       time equivalent kernels on this machine and keep the fastest:\n" \
  "                      off, fast (default) or full; winners are cached\n"               \
  "  --search-budget S   seconds the search may spend timing (default 10; full: 120)\n"   \
  "  -h, --help          this help\n"

constexpr const char* kChatUsage =
    "usage: luminal chat --model PATH [options]\n"
    "\n"
    "An interactive conversation: type a message and press enter; /reset starts over and\n"
    "/quit (or end of input) leaves. The conversation is formatted with the model\n"
    "family's chat template.\n"
    "\n"
    "options:\n"
    "  --model PATH        a .gguf file or a Hugging Face model folder (see generate --help)\n"
    "  --system TEXT       a system message\n"
    "  --max-tokens N      the longest reply (default: 256)\n"
    "  --temperature T     0 for greedy decoding (default: 0.7)\n"
    "  --top-k K           (default: 40)\n"
    "  --top-p P           (default: 0.95)\n"
    "  --seed S            (default: 0)\n"
    "  --device DEV        cpu (default), cuda (an NVIDIA GPU) or reference\n"
    "  --threads N         CPU threads (default: one per core)\n"
    LUMINAL_SHARED_OPTIONS;

constexpr const char* kGenerateUsage =
    "usage: luminal generate --model PATH [options]\n"
    "\n"
    "Loads a model, compiles it (cached after the first run), streams the generated text\n"
    "and reports prompt tokens/s, time to first token, decode tokens/s and peak memory.\n"
    "\n"
    "options:\n"
    "  --model PATH        a .gguf file (architectures gemma3, llama, qwen2, qwen3), or a\n"
    "                      Hugging Face model folder: config.json, model.safetensors (or\n"
    "                      sharded) and tokenizer.json (Gemma 1-3, Llama, Mistral, Mixtral,\n"
    "                      Phi-3, Qwen 2/3, Qwen3-MoE)\n"
    "  --prompt TEXT       the prompt (default: \"The capital of France is\")\n"
    "  --max-tokens N      tokens to generate (default: 32)\n"
    "  --temperature T     0 for greedy decoding (default: 0)\n"
    "  --top-k K           sample from the K most likely tokens (default: off)\n"
    "  --top-p P           sample from the smallest set with probability P (default: 1)\n"
    "  --seed S            random seed for sampling (default: 0)\n"
    "  --device DEV        cpu (default), cuda (an NVIDIA GPU) or reference\n"
    "  --threads N         CPU threads (default: one per core; fewer on a busy machine)\n"
    "  --ignore-eos        generate all --max-tokens tokens, past end-of-sequence tokens\n"
    "                      (for benchmarks)\n"
    "  --warmup            run the prompt and a decode step once, untimed and unshown,\n"
    "                      before the timed generation (for benchmarks)\n"
    "  --print-ids         print token ids instead of text: the prompt's on one line,\n"
    "                      then --max-tokens greedy ones (past end-of-sequence tokens)\n"
    "  --tp N              split the model over N GPUs (tensor parallelism; --device\n"
    "                      cuda, Llama-family models): one process a GPU, joined\n"
    "                      through NCCL (default: 1)\n"
    "  --random-weights    random weights of the shapes in the folder's config.json,\n"
    "                      which then needs only config.json and tokenizer.json (for\n"
    "                      benchmarks of models one has no checkpoint of; the text is\n"
    "                      noise)\n" LUMINAL_SHARED_OPTIONS;

using luminal::cli::check_device;
using luminal::cli::usage_error;

double peak_memory_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

struct Options {
  std::string model, prompt = "The capital of France is", device = "cpu", system;
  int64_t max_tokens = 32;
  int tp = 1;
  bool ignore_eos = false, warmup = false, print_ids = false, threads_set = false,
       random_weights = false;
  luminal::models::SamplingOptions sampling;
  luminal::DType kv_cache = luminal::DType::F16;
  luminal::CpuOptions::Residual residual = luminal::CpuOptions{}.residual;
};

// Parses the options both commands share; `usage` is printed for --help.
Options parse(int argc, char** argv, const char* usage, bool chat) {
  Options o;
  if (chat) {
    o.max_tokens = 256;
    o.sampling = {0.7, 40, 0.95, 0};
  }
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error("option " + a + " needs a value");
      return argv[++i];
    };
    auto number = [&](const std::string& v) { return luminal::cli::number(a, v); };
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      std::exit(0);
    } else if (a == "--model") {
      o.model = value();
    } else if (a == "--ignore-eos" && !chat) {
      o.ignore_eos = true;
    } else if (a == "--warmup" && !chat) {
      o.warmup = true;
    } else if (a == "--print-ids" && !chat) {
      o.print_ids = true;
    } else if (a == "--random-weights" && !chat) {
      o.random_weights = true;
    } else if (a == "--tp" && !chat) {
      const double n = number(value());
      if (n < 1 || n != static_cast<int>(n)) usage_error("--tp must be a positive integer");
      o.tp = static_cast<int>(n);
    } else if (a == "--prompt" && !chat) {
      o.prompt = value();
    } else if (a == "--system" && chat) {
      o.system = value();
    } else if (a == "--max-tokens") {
      o.max_tokens = static_cast<int64_t>(number(value()));
    } else if (a == "--temperature") {
      o.sampling.temperature = number(value());
    } else if (a == "--top-k") {
      o.sampling.top_k = static_cast<int64_t>(number(value()));
    } else if (a == "--top-p") {
      o.sampling.top_p = number(value());
    } else if (a == "--seed") {
      o.sampling.seed = static_cast<uint64_t>(number(value()));
    } else if (a == "--device") {
      o.device = value();
    } else if (a == "--residual") {
      o.residual = luminal::cli::residual_term(value());
    } else if (a == "--kv-cache") {
      const std::string t = value();
      if (t != "f32" && t != "f16") usage_error("--kv-cache must be f32 or f16, got '" + t + "'");
      o.kv_cache = t == "f32" ? luminal::DType::F32 : luminal::DType::F16;
    } else if (luminal::cli::search_option(a, value)) {
    } else if (a == "--threads") {
      const double n = number(value());
      if (n < 1 || n != static_cast<int>(n)) usage_error("--threads must be a positive integer");
      omp_set_num_threads(static_cast<int>(n));
      o.threads_set = true;
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (o.model.empty()) usage_error(std::string(chat ? "chat" : "generate") + " needs --model PATH");
  if (o.max_tokens < 0) usage_error("--max-tokens must be non-negative");
  if (o.print_ids && o.sampling.temperature != 0)
    usage_error("--print-ids prints greedy decoding's ids: --temperature must be 0");
  check_device(o.device);
  if (o.tp > 1 && o.device != "cuda")
    usage_error("--tp splits the model over GPUs: it needs --device cuda");
  return o;
}

void progress(const std::string& s) {
  std::fprintf(stderr, "%s\n", s.c_str());
}

// On a GPU, the peak of device memory follows the host's (weights and caches live there).
void print_stats(const luminal::models::GenerationStats& st, const std::string& device) {
  char gpu[64] = "";
  if (device == "cuda")
    std::snprintf(gpu, sizeof gpu, ", GPU %.0f MiB",
                  static_cast<double>(luminal::cuda_peak_memory_bytes()) / (1 << 20));
  std::fprintf(
      stderr,
      "prompt: %zu tokens, %.1f tokens/s | time to first token: %.3f s | decode: %zu tokens, "
      "%.2f tokens/s | load %.1f s, compile %.1f s, prepare %.1f s | peak memory %.0f MiB%s\n",
      st.prompt_tokens, st.prompt_tokens_per_second(), st.ttft_seconds, st.generated,
      st.decode_tokens_per_second(), st.load_seconds, st.compile_seconds, st.prepare_seconds,
      peak_memory_mib(), gpu);
  // Where a decode step's time goes: the rest of a token is sampling and streaming text.
  if (st.generated > 1 && std::getenv("LUMINAL_LOG")) {
    const double steps = static_cast<double>(st.generated - 1);
    std::fprintf(stderr,
                 "decode step: %.3f ms in the model's run (%.3f ms queuing GPU work, %.3f ms "
                 "of it on the device), %.3f ms per token in all\n",
                 st.decode_run_seconds / steps * 1e3, st.decode_issue_seconds / steps * 1e3,
                 st.decode_device_seconds / steps * 1e3, st.decode_seconds / steps * 1e3);
    if (st.decode_graph_steps)
      std::fprintf(stderr, "decode steps as one CUDA graph: %zu of %zu, %.1f nodes updated a step\n",
                   st.decode_graph_steps, st.generated - 1,
                   static_cast<double>(st.decode_graph_updates) /
                       static_cast<double>(st.decode_graph_steps));
  }
}

// `whole_argv`: the program's, for --tp to start its ranks with.
int generate(int argc, char** argv, char** whole_argv) {
  const Options o = parse(argc, argv, kGenerateUsage, false);
  std::optional<luminal::RankOf> rank;
  try {
    rank = luminal::this_rank();
    if (o.tp > 1 && !rank) {
      std::string why;
      if (!luminal::cuda_available(&why, o.tp - 1)) {
        std::fprintf(stderr, "luminal: --tp %d: %s\n", o.tp, why.c_str());
        return 2;
      }
      return luminal::launch_ranks(o.tp, whole_argv);
    }
    // A rank: its GPU, its part of the model; only rank 0 reports, and every rank tells
    // the launcher it is getting on (each stage, each piece of text).
    const bool reports = !rank || rank->rank == 0;
    const auto say = [&](const std::string& s) {
      luminal::report_progress();
      if (reports) progress(s);
    };
    const auto backend =
        rank ? std::make_unique<luminal::CudaBackend>(luminal::CudaOptions{.device = rank->rank})
             : luminal::cli::backend_for(o.device, {.residual = o.residual});
    std::shared_ptr<luminal::Communicator> ranks;
    if (rank) {
      // The host's cores shared among the ranks: a rank's parallel loops (the next token's
      // argmax) would otherwise wait on threads the others' keep busy.
      if (!o.threads_set) omp_set_num_threads(std::max(1, omp_get_num_procs() / rank->size));
      say("tensor parallel over " + std::to_string(rank->size) + " GPUs: joining the ranks");
      ranks = luminal::join_ranks(*rank);
    }
    luminal::models::TextGenerator gen(o.model, *backend, say, o.kv_cache, ranks,
                                       o.random_weights ? luminal::models::WeightsFrom::Random
                                                        : luminal::models::WeightsFrom::Files);
    if (o.print_ids) {  // the prompt's ids, then the generated ones, a line each
      const std::vector<int32_t> prompt = gen.encode(o.prompt);
      for (const auto& ids : {prompt, gen.greedy_ids(prompt, o.max_tokens)}) {
        for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
        std::printf("\n");
      }
      return 0;
    }
    if (o.warmup) gen.generate(o.prompt, 2, o.sampling, {}, true);
    std::fputs(o.prompt.c_str(), stdout);
    std::fflush(stdout);
    const auto st = gen.generate(
        o.prompt, o.max_tokens, o.sampling,
        [](const std::string& piece) {
          luminal::report_progress();
          std::fputs(piece.c_str(), stdout);
          std::fflush(stdout);
        },
        o.ignore_eos);
    std::fputs("\n", stdout);
    if (reports) {
      std::fputs("\n", stderr);
      print_stats(st, o.device);
    }
    return 0;
  } catch (const luminal::Error& e) {
    if (rank)
      std::fprintf(stderr, "luminal: rank %d: %s\n", rank->rank, e.what());
    else
      std::fprintf(stderr, "luminal: %s\n", e.what());
    return 2;
  }
}

int chat(int argc, char** argv) {
  const Options o = parse(argc, argv, kChatUsage, true);
  try {
    const auto backend = luminal::cli::backend_for(o.device, {.residual = o.residual});
    luminal::models::TextGenerator gen(o.model, *backend, progress, o.kv_cache);
    const auto format = gen.chat_format();
    std::vector<luminal::models::ChatMessage> history;
    if (!o.system.empty()) history.push_back({"system", o.system});
    std::fputs("type a message; /reset starts over, /quit leaves\n", stderr);
    for (std::string line;;) {
      std::fputs("> ", stdout);
      std::fflush(stdout);
      if (!std::getline(std::cin, line) || line == "/quit") break;
      if (line == "/reset") {
        history.resize(o.system.empty() ? 0 : 1);
        continue;
      }
      if (line.empty()) continue;
      history.push_back({"user", line});
      std::string reply;
      const auto st = gen.generate(luminal::models::render_chat(format, history), o.max_tokens,
                                   o.sampling, [&](const std::string& piece) {
                                     reply += piece;
                                     std::fputs(piece.c_str(), stdout);
                                     std::fflush(stdout);
                                   });
      std::fputs("\n", stdout);
      history.push_back({"assistant", reply});
      if (std::getenv("LUMINAL_LOG")) print_stats(st, o.device);
    }
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
  if (cmd == "generate") return generate(argc - 2, argv + 2, argv);
  if (cmd == "chat") return chat(argc - 2, argv + 2);
  if (cmd == "perplexity") return luminal::cli::perplexity(argc - 2, argv + 2);
  usage_error("unknown command '" + cmd + "'");
}
