// The search over extraction choices: planted programs (slow, wrong, failing to
// compile, fast) through the compile callback, when a program is searched and when not,
// the cache round trip, the budget; and on the CPU, the choices the e-graph offers and a
// searched program against the reference interpreter.
#include "runtime/program_search.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "testing/extraction_search.hpp"
#include "testing/scoped_env.hpp"

namespace luminal::runtime {
namespace {

// Values kept on a pretend device comparing them there, as a GPU backend's do: its data
// is host memory, its copies back to the host are counted.
struct PretendComparison final : DeviceComparison {
  PretendComparison(std::vector<float> k, double t, int& compared)
      : kept(std::move(k)), tolerance(t), comparisons(compared) {}
  std::vector<float> kept;
  double tolerance;
  int& comparisons;
  std::string mismatch(const DeviceData& got) const override {
    ++comparisons;
    return output_mismatch(static_cast<const float*>(got.data()), kept, tolerance);
  }
};
struct PretendStorage final : DeviceStorage {
  std::vector<float> values;
  int& copies_back;
  int& comparisons;
  PretendStorage(std::vector<float> v, int& copies, int& compared)
      : values(std::move(v)), copies_back(copies), comparisons(compared) {}
  void* data() const override { return const_cast<float*>(values.data()); }
  size_t capacity() const override { return values.size() * sizeof(float); }
  int device() const override { return 0; }
  void copy_to_host(void* dst, size_t bytes) const override {
    ++copies_back;
    std::memcpy(dst, values.data(), bytes);
  }
  std::unique_ptr<DeviceComparison> kept_for_comparison(DType, size_t numel,
                                                        double tolerance) const override {
    return std::make_unique<PretendComparison>(
        std::vector<float>(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(numel)),
        tolerance, comparisons);
  }
};
struct Pretend {
  int copies_back = 0, comparisons = 0;
};

// y = 2x written by hand: `factor` 3 plants a wrong program, `pause` a slow one; with a
// pretend device, y is left there.
class Doubling final : public Executable {
 public:
  Doubling(NodeId x, NodeId y, double factor, std::chrono::milliseconds pause, int& runs,
           Pretend* device)
      : x_(x), y_(y), factor_(factor), pause_(pause), runs_(runs), device_(device) {}
  void run(Graph& g) override {
    ++runs_;
    std::this_thread::sleep_for(pause_);
    // A donated input is consumed, as a KV cache grown in place is.
    const std::optional<Buffer> x =
        g.is_donated(x_) ? g.take_data(x_) : std::optional<Buffer>(*g.data(x_));
    if (!x) throw Error("planted: x was consumed by an earlier run");
    std::vector<double> y;
    for (float v : x->to_f32()) y.push_back(factor_ * v);
    const Buffer b = Buffer::from_doubles(y, DType::F32);
    if (!device_) return g.set_data(y_, b);
    g.set_device_data(y_, DeviceData(std::make_shared<PretendStorage>(
                                         b.to_f32(), device_->copies_back, device_->comparisons),
                                     DType::F32, y.size()));
  }

 private:
  NodeId x_, y_;
  double factor_;
  std::chrono::milliseconds pause_;
  int& runs_;
  Pretend* device_;
};

// Programs for y = 2x, one per extraction: as extracted 20 ms a run, without MatMulAdd
// 2 ms, 5 ms otherwise; wrong without Attention; failing to compile without QMatMulAdd.
struct Planted {
  std::map<std::string, int> compiles, runs;  // by the kinds avoided, space-separated
  std::mutex mu;                              // (programs are compiled side by side)
  std::vector<std::string> offered = {"Attention", "MatMulAdd", "QMatMulAdd"};
  Pretend* device = nullptr;  // where the programs leave y

  CompileAvoiding compile(NodeId x, NodeId y) {
    return [this, x, y](const Graph&, const std::vector<std::string>& avoid,
                        std::vector<std::string>& choices) -> std::unique_ptr<Executable> {
      std::string key;
      for (const std::string& kind : avoid) key += (key.empty() ? "" : " ") + kind;
      const auto has = [&](const char* kind) {
        return std::find(avoid.begin(), avoid.end(), kind) != avoid.end();
      };
      const std::lock_guard<std::mutex> lock(mu);
      ++compiles[key];
      choices = avoid.empty() ? offered : std::vector<std::string>{};
      if (has("QMatMulAdd")) throw Error("planted: this program does not compile");
      const auto pause = std::chrono::milliseconds(has("MatMulAdd") ? 2 : avoid.empty() ? 20 : 5);
      return std::make_unique<Doubling>(x, y, has("Attention") ? 3 : 2, pause, runs[key], device);
    };
  }
};

class ProgramSearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    x_ = g_.named_tensor("x", {4});
    y_ = (x_ * 2.0).retrieve();
    x_.set_buffer(Buffer::from_doubles({1, -2, 3, 0.5}, DType::F32));
  }
  // Compiles through the search and runs `runs` times, checking y = 2x each time.
  void run(Planted& planted, int runs) {
    std::unique_ptr<Executable> e =
        compile_searching_extractions(g_, planted.compile(x_.id(), y_.id()), "test machine");
    for (int i = 0; i < runs; ++i) {
      e->run(g_);
      EXPECT_EQ(y_.to_f32(), (std::vector<float>{2, -4, 6, 1})) << "run " << i;
    }
  }
  luminal::testing::ScopedCacheDir cache_{"program-search"};
  luminal::testing::ScopedEnv mode_{"LUMINAL_SEARCH", "fast"};
  Graph g_;
  Tensor x_, y_;
};

TEST_F(ProgramSearchTest, TheFastestCorrectProgramRunsFromTheSecondRunOn) {
  Planted p;
  run(p, 1);
  EXPECT_EQ(p.compiles.size(), 1u) << "a program run once is not searched";
  run(p, 5);  // (a fresh compile: its second run searches)
  // The pick: the first runs of each compile, then one checked and five timed runs. The
  // wrong programs and those that do not compile are judged once each, never timed. The
  // first round's winner, without MatMulAdd, checked and timed 6 times, is the second
  // round's reference (6 more) against itself also without Attention (wrong) or also
  // without QMatMulAdd (no program); it stays, and makes the second run and the three
  // after it.
  EXPECT_EQ(p.runs[""], 1 + 1 + 6);
  EXPECT_EQ(p.runs["Attention"], 1);
  EXPECT_EQ(p.runs["MatMulAdd Attention"], 1);
  EXPECT_EQ(p.compiles["QMatMulAdd"], 1);
  EXPECT_EQ(p.compiles["MatMulAdd QMatMulAdd"], 1);
  EXPECT_EQ(p.runs["MatMulAdd"], 6 + 6 + 4);

  // Compiled again, the winner comes from the cache: only it and the pick are compiled.
  Planted again;
  run(again, 4);
  EXPECT_EQ(again.compiles, (std::map<std::string, int>{{"", 1}, {"MatMulAdd", 1}}));
  EXPECT_EQ(again.runs["MatMulAdd"], 3);
}

// Outputs left on a device that compares values there are compared there: the search
// reads none back (a language model's logits took about a second a candidate), and still
// finds the wrong program wrong.
TEST_F(ProgramSearchTest, OutputsLeftOnTheDeviceAreComparedThere) {
  Pretend device;
  Planted p;
  p.device = &device;
  run(p, 3);  // (each check of y reads it back: three)
  EXPECT_EQ(device.copies_back, 3);
  // Two rounds: the first compares the two other programs that ran (one wrong; the third
  // does not compile), the second its one (wrong).
  EXPECT_EQ(device.comparisons, 2 + 1);
  EXPECT_EQ(p.runs["Attention"], 1);
  EXPECT_EQ(p.runs["MatMulAdd Attention"], 1);
  EXPECT_EQ(p.runs["MatMulAdd"], 6 + 6 + 2);
}

TEST_F(ProgramSearchTest, CallsOrderedOnAStreamAreSearchedAfterTheirInputsAreReady) {
  // A call in order with a caller's stream (torch.compile's) runs the pick first, so that
  // the inputs the caller's stream writes are there, then searches.
  Planted p;
  std::unique_ptr<Executable> e =
      compile_searching_extractions(g_, p.compile(x_.id(), y_.id()), "test machine");
  for (int i = 0; i < 3; ++i) {
    e->queue_on(g_, nullptr);  // (a host program: run)
    e->wait();
    EXPECT_EQ(y_.to_f32(), (std::vector<float>{2, -4, 6, 1})) << "call " << i;
  }
  EXPECT_EQ(p.runs[""], 1 + 1 + 6);
  EXPECT_EQ(p.runs["MatMulAdd"], 6 + 6 + 2);
}

TEST_F(ProgramSearchTest, ARoundBegunIsFinishedPastTheBudgetAndNoneBeginsAfter) {
  // 50 ms: less than the pick's six runs of 20 ms. The first round still judges every
  // candidate (so it is cached whole); the second does not begin.
  luminal::testing::ScopedEnv budget("LUMINAL_SEARCH_BUDGET", "0.05");
  Planted p;
  run(p, 3);
  EXPECT_EQ(p.runs["MatMulAdd"], 6 + 2);  // judged, won, and made the second and third runs
  EXPECT_EQ(p.compiles["QMatMulAdd"], 1);
  EXPECT_EQ(p.compiles.count("MatMulAdd Attention"), 0u);
  // The next process, its budget spent as soon as it begins: the first round comes from
  // the cache, and the second is not begun.
  luminal::testing::ScopedEnv none("LUMINAL_SEARCH_BUDGET", "0");
  Planted again;
  run(again, 2);
  EXPECT_EQ(again.compiles, (std::map<std::string, int>{{"", 1}, {"MatMulAdd", 1}}));
}

TEST_F(ProgramSearchTest, NotSearchedWhenOff) {
  luminal::testing::ScopedEnv off("LUMINAL_SEARCH", "off");
  Planted p;
  run(p, 3);
  EXPECT_EQ(p.compiles, (std::map<std::string, int>{{"", 1}}));
}

// A run consumes a donated input (a decode step's KV cache): under LUMINAL_SEARCH=full
// every trial run of the search gets it as the caller set it, and so does the run the
// search came before; the input is consumed after that run, as without a search.
TEST_F(ProgramSearchTest, EveryTrialGetsTheDonatedInputsAsTheCallerSetThem) {
  g_.donate(x_.id());
  {
    Planted p;  // by default not searched: no trial runs
    std::unique_ptr<Executable> e =
        compile_searching_extractions(g_, p.compile(x_.id(), y_.id()), "test machine");
    for (int i = 0; i < 2; ++i) {
      x_.set_buffer(Buffer::from_doubles({1, -2, 3, 0.5}, DType::F32));
      e->run(g_);
    }
    EXPECT_EQ(p.compiles, (std::map<std::string, int>{{"", 1}}));
    EXPECT_EQ(p.runs[""], 2);
  }
  luminal::testing::ScopedEnv full("LUMINAL_SEARCH", "full");
  Planted p;
  std::unique_ptr<Executable> e =
      compile_searching_extractions(g_, p.compile(x_.id(), y_.id()), "test machine");
  for (int i = 0; i < 3; ++i) {
    x_.set_buffer(Buffer::from_doubles({1, -2, 3, 0.5}, DType::F32));
    e->run(g_);
    EXPECT_EQ(y_.to_f32(), (std::vector<float>{2, -4, 6, 1})) << "run " << i;
    EXPECT_EQ(g_.data(x_.id()), nullptr) << "run " << i;
  }
  EXPECT_EQ(p.runs[""], 1 + 16);  // its first run, then one checked and 15 timed (full)
  EXPECT_EQ(p.runs["MatMulAdd"], 16 + 16 + 2);
}

TEST_F(ProgramSearchTest, TheSignatureCoversTheGraphAndItsDimsByPowersOfTwo) {
  const std::string before = program_signature(g_);
  Graph other;
  Tensor x = other.named_tensor("x", {4});
  (x * 3.0).retrieve();
  EXPECT_NE(program_signature(other), before);
  Graph symbolic;
  Tensor s = symbolic.named_tensor("x", {"n"});
  (s * 2.0).retrieve();
  symbolic.set_dim("n", 4);
  const std::string four = program_signature(symbolic);
  symbolic.set_dim("n", 5);
  const std::string five = program_signature(symbolic);
  EXPECT_NE(five, four);
  // Dims within one power of two share a winner (a prompt a token longer is not searched
  // again); the next power of two does not.
  symbolic.set_dim("n", 8);
  EXPECT_EQ(program_signature(symbolic), five);
  symbolic.set_dim("n", 1101);
  const std::string long_prompt = program_signature(symbolic);
  symbolic.set_dim("n", 2048);
  EXPECT_EQ(program_signature(symbolic), long_prompt);
  symbolic.set_dim("n", 2049);
  EXPECT_NE(program_signature(symbolic), long_prompt);
  EXPECT_EQ(dim_bucket(0), 0);
  EXPECT_EQ(dim_bucket(1), 1);
  EXPECT_EQ(dim_bucket(3), 4);
}

bool has_attention_kernel(const Graph& g) {
  for (uint32_t i = 0; i < g.num_nodes(); ++i)
    if (dynamic_cast<const compiler::AttentionOp*>(g.node(NodeId{i}).custom.get())) return true;
  return false;
}

TEST(ExtractionChoices, FusedAttentionOrItsComposite) {
  // Causal attention as nn::Attention writes it.
  Graph cx;
  Tensor q = cx.named_tensor("q", {2, 24, 16}), k = cx.named_tensor("k", {2, 24, 16}),
         v = cx.named_tensor("v", {2, 24, 16});
  where(nn::causal_mask(cx, 24, 0), q.matmul(k.transpose(-1, -2)) * 0.25,
        -std::numeric_limits<double>::infinity())
      .softmax(-1)
      .matmul(v)
      .retrieve();
  const compiler::Optimized fused = compiler::optimize(cx);
  EXPECT_EQ(fused.choices, (std::vector<std::string>{"Attention"}));
  EXPECT_TRUE(has_attention_kernel(*fused.graph));
  const compiler::Optimized composite = compiler::optimize(cx, {.avoid = {"Attention"}});
  EXPECT_TRUE(composite.choices.empty());
  EXPECT_FALSE(has_attention_kernel(*composite.graph)) << composite.graph->to_text();
  // A graph without a fused kernel offers nothing.
  Graph plain;
  Tensor x = plain.named_tensor("x", {3, 5});
  x.softmax(-1).retrieve();
  EXPECT_TRUE(compiler::optimize(plain).choices.empty());
}

TEST(ExtractionChoices, TheCpuTimesAttentionFusedAndUnfused) {
  // (The CPU has no product epilogues: the bias is added by a kernel of its own.)
  luminal::testing::expect_judged(luminal::testing::search_extractions_on(cpu()),
                                  {"as extracted", "without Attention"});
}

}  // namespace
}  // namespace luminal::runtime
