// A/B timing of `luminal generate`'s decode inside one process, for changes smaller than
// the drift between separate runs on a shared machine (the same binary moves by 10% within
// minutes there; alternating generations in one process cancel that drift).
//
// Two generators load the same model. B is compiled with $COMPILE_ENV=1 (or the value
// given after '=') and A without it (for a change the compiler reads at compile time), and
// $RUN_ENV=1 is set during B's generations only (for a switch read at run time). They then take
// turns over short greedy generations, in alternating order, and the median of the per-pair decode
// time ratios B/A is printed. With neither option it is an A/A run: the noise floor.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/models/generate.hpp"

namespace {

const char* kUsage =
    "usage: ab_generate --model PATH [--pairs N] [--tokens N] [--prompt TEXT]\n"
    "                   [--compile-env VAR] [--run-env VAR]\n"
    "  --pairs N          generations per side (default 30)\n"
    "  --tokens N         tokens per generation (default 48)\n"
    "  --compile-env VAR[=VALUE]\n"
    "                     compile B with VAR=VALUE (default 1) and A without\n"
    "  --run-env VAR      set VAR=1 while B generates, unset while A does\n";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, prompt = "The capital of France is", compile_env, run_env;
  int pairs = 30;
  int64_t tokens = 48;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "ab_generate: %s needs a value\n%s", a.c_str(), kUsage);
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--model") {
      model = v;
    } else if (a == "--pairs") {
      pairs = std::atoi(v);
    } else if (a == "--tokens") {
      tokens = std::atoll(v);
    } else if (a == "--prompt") {
      prompt = v;
    } else if (a == "--compile-env") {
      compile_env = v;
    } else if (a == "--run-env") {
      run_env = v;
    } else {
      std::fprintf(stderr, "ab_generate: unknown option %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (model.empty() || pairs < 1 || tokens < 2) {
    std::fprintf(stderr, "ab_generate: a model, at least one pair and two tokens are needed\n%s",
                 kUsage);
    return 2;
  }
  try {
    using luminal::models::TextGenerator;
    const size_t eq = compile_env.find('=');
    const std::string compile_var = compile_env.substr(0, eq),
                      compile_value = eq == std::string::npos ? "1" : compile_env.substr(eq + 1);
    if (!compile_var.empty()) unsetenv(compile_var.c_str());
    TextGenerator a(model, luminal::cpu(), {}, luminal::DType::F16);
    if (!compile_var.empty()) setenv(compile_var.c_str(), compile_value.c_str(), 1);
    TextGenerator b(model, luminal::cpu(), {}, luminal::DType::F16);
    if (!compile_var.empty()) unsetenv(compile_var.c_str());
    luminal::models::SamplingOptions greedy;
    greedy.temperature = 0;
    auto seconds_per_token = [&](TextGenerator& g) {
      if (!run_env.empty()) {
        if (&g == &b) {
          setenv(run_env.c_str(), "1", 1);
        } else {
          unsetenv(run_env.c_str());
        }
      }
      const auto st = g.generate(prompt, tokens, greedy, {});
      return 1.0 / st.decode_tokens_per_second();
    };
    seconds_per_token(a);  // warm-up: first-use work, caches
    seconds_per_token(b);
    std::vector<double> ta, tb, ratio;
    for (int i = 0; i < pairs; ++i) {
      double x = 0, y = 0;
      if (i % 2) {
        y = seconds_per_token(b);
        x = seconds_per_token(a);
      } else {
        x = seconds_per_token(a);
        y = seconds_per_token(b);
      }
      ta.push_back(x);
      tb.push_back(y);
      ratio.push_back(y / x);
    }
    std::printf("A %.3f ms/token, B %.3f ms/token (medians), median B/A %.4f over %d pairs\n",
                1e3 * median(ta), 1e3 * median(tb), median(ratio), pairs);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ab_generate: %s\n", e.what());
    return 2;
  }
  return 0;
}
