// Model files that lie: mutants of real GGUF headers (counts, lengths, types, offsets,
// renamed keys, duplicate names, truncations) run through `luminal generate` in a child
// process under a memory bound and a time limit. Each must either generate (a model that
// still works) or exit 2 with one error line naming the file, a key or a tensor; a crash,
// a signal, a hang or memory growth past the bound fails. The tiny fixture GGUF is mutated
// every way; Gemma 3 270M's header (scripts/get_model.sh) a sample of ways. The
// mixture-of-experts fixtures (no tokenizer: `generate` would refuse them for that alone)
// are loaded by the library in the child instead, config, model and weights.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "luminal/error.hpp"
#include "luminal/models/gemma.hpp"
#include "luminal/models/gguf.hpp"
#include "luminal/models/llama.hpp"

namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Where each field of a GGUF header lies, found by a reader of its own (independent of the
// loader under test).
struct Layout {
  struct Kv {
    std::string key;
    size_t key_at, type_at, value_at;
    uint32_t type;
    uint64_t count = 0;  // arrays: elements
  };
  struct Tensor {
    std::string name;
    size_t name_at, rank_at, dims_at, type_at, offset_at;
    uint32_t rank;
  };
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  size_t header_end = 0;
};

Layout scan(const std::string& b) {
  Layout l;
  size_t at = 8;
  const auto u32 = [&](size_t p) { uint32_t v; std::memcpy(&v, b.data() + p, 4); return v; };
  const auto u64 = [&](size_t p) { uint64_t v; std::memcpy(&v, b.data() + p, 8); return v; };
  const uint64_t n_tensors = u64(at), n_kv = u64(at + 8);
  at += 16;
  const size_t scalar[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  std::function<void(uint32_t)> skip = [&](uint32_t type) {
    if (type == 8) {
      at += 8 + u64(at);
    } else if (type == 9) {
      const uint32_t elem = u32(at);
      const uint64_t n = u64(at + 4);
      at += 12;
      for (uint64_t i = 0; i < n; ++i) skip(elem);
    } else {
      at += scalar[type];
    }
  };
  for (uint64_t i = 0; i < n_kv; ++i) {
    Layout::Kv kv;
    kv.key_at = at;
    kv.key = b.substr(at + 8, u64(at));
    at += 8 + kv.key.size();
    kv.type_at = at;
    kv.type = u32(at);
    at += 4;
    kv.value_at = at;
    if (kv.type == 9) kv.count = u64(at + 4);
    skip(kv.type);
    l.kvs.push_back(kv);
  }
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Layout::Tensor t;
    t.name_at = at;
    t.name = b.substr(at + 8, u64(at));
    at += 8 + t.name.size();
    t.rank_at = at;
    t.rank = u32(at);
    t.dims_at = at + 4;
    at += 4 + 8 * t.rank;
    t.type_at = at;
    t.offset_at = at + 4;
    at += 12;
    l.tensors.push_back(t);
  }
  l.header_end = at;
  return l;
}

// A mutant as a patch of the original (so a sample of a 250 MB file's mutants costs no
// copies until one is written): bytes written at `at`, then the file cut at `keep`.
struct Mutant {
  std::string what;
  size_t at = 0;
  std::string patch;
  size_t keep = std::string::npos;
  std::string apply(const std::string& b) const {
    std::string out = b.substr(0, keep);
    if (at < out.size()) out.replace(at, std::min(patch.size(), out.size() - at), patch);
    return out;
  }
};

template <class T>
Mutant put(std::string what, size_t at, T v) {
  std::string bytes(sizeof v, '\0');
  std::memcpy(bytes.data(), &v, sizeof v);
  return {std::move(what), at, bytes};
}

std::vector<Mutant> mutants(const std::string& b, size_t sample, uint32_t seed) {
  const Layout l = scan(b);
  std::vector<Mutant> out;
  for (const auto& kv : l.kvs) {
    const std::string k = kv.key;
    if (kv.type == 4 || kv.type == 5)  // 32-bit integers: counts, sizes, ids
      for (uint32_t v : {0u, 1u, 3u, 1000000u, 0x7FFFFFFFu, 0xFFFFFFFFu})
        out.push_back(put(k + " = " + std::to_string(v), kv.value_at, v));
    if (kv.type == 10 || kv.type == 11)
      for (uint64_t v : {0ull, 1000000ull, ~0ull}) out.push_back(put(k + " = " + std::to_string(v), kv.value_at, v));
    if (kv.type == 6)  // f32
      for (float v : {0.0f, -1.0f, 1e30f, std::numeric_limits<float>::quiet_NaN()})
        out.push_back(put(k + " = " + std::to_string(v), kv.value_at, v));
    if (kv.type == 8) {  // string: its length
      out.push_back(put(k + " length huge", kv.value_at, uint64_t{1} << 40));
      out.push_back(put(k + " length 0", kv.value_at, uint64_t{0}));
    }
    if (kv.type == 9) {  // array: its element count and type
      out.push_back(put(k + " count - 1", kv.value_at + 4, kv.count - 1));
      out.push_back(put(k + " count + 1", kv.value_at + 4, kv.count + 1));
      out.push_back(put(k + " count huge", kv.value_at + 4, uint64_t{1} << 40));
      out.push_back(put(k + " element type 99", kv.value_at, uint32_t{99}));
    }
    for (uint32_t t : {uint32_t{4}, uint32_t{8}, uint32_t{13}})
      if (t != kv.type) out.push_back(put(k + " type " + std::to_string(t), kv.type_at, t));
    const size_t last = kv.key_at + 8 + kv.key.size() - 1;
    out.push_back({k + " renamed", last, std::string(1, static_cast<char>(b[last] ^ 0x20))});
  }
  for (size_t i = 0; i < l.tensors.size(); ++i) {
    const auto& t = l.tensors[i];
    uint64_t dim0;
    std::memcpy(&dim0, b.data() + t.dims_at, 8);
    uint64_t offset;
    std::memcpy(&offset, b.data() + t.offset_at, 8);
    out.push_back(put(t.name + " rank 0", t.rank_at, uint32_t{0}));
    out.push_back(put(t.name + " rank 9", t.rank_at, uint32_t{9}));
    out.push_back(put(t.name + " dim 0", t.dims_at, uint64_t{0}));
    out.push_back(put(t.name + " dim doubled", t.dims_at, 2 * dim0));
    out.push_back(put(t.name + " dim huge", t.dims_at, uint64_t{1} << 40));
    out.push_back(put(t.name + " type 99", t.type_at, uint32_t{99}));
    out.push_back(put(t.name + " type f32", t.type_at, uint32_t{0}));
    out.push_back(put(t.name + " offset + 32", t.offset_at, offset + 32));
    out.push_back(put(t.name + " offset huge", t.offset_at, uint64_t{1} << 50));
    if (i > 0 && l.tensors[i - 1].name.size() == t.name.size())  // a duplicate name
      out.push_back({t.name + " renamed to " + l.tensors[i - 1].name, t.name_at + 8, l.tensors[i - 1].name});
  }
  for (size_t cut : {size_t{4}, size_t{20}, l.header_end / 2, l.header_end - 1, l.header_end + 7,
                     b.size() - 1})
    out.push_back({"truncated at " + std::to_string(cut), 0, "", cut});
  if (sample && sample < out.size()) {
    std::mt19937 rng(seed);
    std::shuffle(out.begin(), out.end(), rng);
    out.resize(sample);
  }
  return out;
}

struct Outcome {
  int status = -1;  // exit status, or -signal
  std::string stderr_text;
};

// What a child does with a model file: its exit status.
using ChildRun = std::function<int(const std::string& model)>;

// `run` on `model` in a child limited to `memory` bytes and `seconds`, its stderr to `err`.
Outcome run_child(const ChildRun& run, const std::string& model, size_t memory, unsigned seconds,
                  const std::string& err) {
  const pid_t pid = fork();
  if (pid == 0) {
    rlimit mem{memory, memory};
    setrlimit(RLIMIT_AS, &mem);
    rlimit cpu{seconds, seconds};
    setrlimit(RLIMIT_CPU, &cpu);
    alarm(seconds * 2);  // wall-clock bound too: a child blocked without using CPU
    if (!freopen(err.c_str(), "w", stderr) || !freopen("/dev/null", "w", stdout)) _exit(120);
    _exit(run(model));
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), slurp(err)};
}

// `luminal generate` on the model.
int generate(const std::string& model) {
  execl(LUMINAL_CLI, LUMINAL_CLI, "generate", "--model", model.c_str(), "--max-tokens", "2",
        "--threads", "1", "--prompt", "Hi", static_cast<char*>(nullptr));
  return 121;
}

// The library's Llama-family GGUF loading (config, model, weights), its error printed as
// the CLI prints one.
int load_llama(const std::string& model) {
  try {
    const luminal::models::GgufFile f(model);
    const luminal::models::LlamaConfig c = luminal::models::LlamaConfig::from_gguf(f);
    luminal::Graph g;
    const luminal::models::Llama llama(g, c, luminal::DType::F32);
    luminal::models::load_gguf_weights(llama, f, f.get_string("general.architecture"));
    return 0;
  } catch (const luminal::Error& e) {
    std::fprintf(stderr, "luminal: %s\n", e.what());
    std::fflush(stderr);  // (the child ends with _exit, which flushes nothing)
    return 2;
  }
}

void check_mutants(const std::string& original, size_t sample, size_t memory, unsigned seconds,
                   const ChildRun& run = generate) {
  const fs::path dir = fs::temp_directory_path() / ("luminal_mutants_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string bytes = slurp(original);
  ASSERT_GT(bytes.size(), 32u) << original;
  int loaded = 0, refused = 0;
  for (const Mutant& m : mutants(bytes, sample, 11)) {
    const std::string path = (dir / "mutant.gguf").string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << m.apply(bytes);
    const Outcome o = run_child(run, path, memory, seconds, (dir / "err.txt").string());
    if (o.status == 0) {
      ++loaded;
      continue;
    }
    ++refused;
    // The last line of stderr is the error; it names the file, a key or a tensor.
    std::string last = o.stderr_text;
    while (!last.empty() && last.back() == '\n') last.pop_back();
    last = last.substr(last.find_last_of('\n') == std::string::npos ? 0 : last.find_last_of('\n') + 1);
    EXPECT_EQ(o.status, 2) << m.what << ": exit " << o.status << " (negative: signal)\n" << o.stderr_text;
    EXPECT_TRUE(last.rfind("luminal: ", 0) == 0 && last.find(path) != std::string::npos)
        << m.what << ": the error does not name the file: " << last;
  }
  std::printf("%s: %d mutants ran, %d refused with an error\n", original.c_str(), loaded, refused);
  std::fflush(stdout);  // (else the next mutants' children write the buffer out again)
  EXPECT_GT(refused, 0);
  fs::remove_all(dir);
}

TEST(ModelMutants, TinyGgufEveryWay) {
  check_mutants(std::string(LUMINAL_FIXTURE_DIR) + "/generate/llama.gguf", 0, size_t{2} << 30, 20);
}

TEST(ModelMutants, MixtureOfExpertsGgufEveryWay) {
  for (const char* file : {"mixtral.gguf", "qwen3_moe_f16.gguf"})
    check_mutants(std::string(LUMINAL_FIXTURE_DIR) + "/gguf/" + file, 0, size_t{2} << 30, 20,
                  load_llama);
}

TEST(ModelMutants, GemmaHeaderSample) {
  const std::string gemma = std::string(LUMINAL_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (!fs::exists(gemma)) GTEST_SKIP() << gemma << " is not installed (scripts/get_model.sh)";
  check_mutants(gemma, 16, size_t{4} << 30, 60);
}

}  // namespace
