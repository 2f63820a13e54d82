// Times encoding one text with luminal's tokenizers: for each vocabulary given (a .gguf
// file or a tokenizer.json), the text is encoded `--repeat` times after one warm-up and
// a JSON line gives the median milliseconds and the token count. bench/compare_tokenizers.py
// runs it next to HF tokenizers and llama.cpp on the same text.
//
//   bench_tokenizer --text FILE [--repeat N] VOCAB...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "luminal/error.hpp"
#include "luminal/models/gguf.hpp"
#include "luminal/models/text_tokenizer.hpp"

int main(int argc, char** argv) {
  std::string text_path;
  int repeat = 10;
  std::vector<std::string> vocabularies;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--text") && i + 1 < argc)
      text_path = argv[++i];
    else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc)
      repeat = std::max(1, std::atoi(argv[++i]));
    else
      vocabularies.push_back(argv[i]);
  }
  if (text_path.empty() || vocabularies.empty()) {
    std::fprintf(stderr, "usage: bench_tokenizer --text FILE [--repeat N] VOCAB...\n");
    return 2;
  }
  std::ifstream f(text_path, std::ios::binary);
  const std::string text{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  try {
    for (const std::string& v : vocabularies) {
      std::unique_ptr<luminal::models::GgufFile> gguf;
      std::unique_ptr<luminal::models::TextTokenizer> tok;
      if (v.size() > 5 && v.compare(v.size() - 5, 5, ".gguf") == 0) {
        gguf = std::make_unique<luminal::models::GgufFile>(v);
        tok = luminal::models::gguf_text_tokenizer(*gguf);
      } else {
        tok = luminal::models::hf_text_tokenizer(v);
      }
      size_t tokens = tok->encode(text).size();  // warm-up
      std::vector<double> ms;
      for (int r = 0; r < repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        tokens = tok->encode(text).size();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      std::printf("{\"vocabulary\": \"%s\", \"median_ms\": %.3f, \"tokens\": %zu}\n", v.c_str(),
                  ms[ms.size() / 2], tokens);
      std::fflush(stdout);
    }
  } catch (const luminal::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 2;
  }
  return 0;
}
