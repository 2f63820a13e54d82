// Collectives between ranks (threads of this process) and tensor-parallel Llama models:
// each rank's part, summed over the ranks, gives transformers' logits.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "luminal/collective.hpp"
#include "luminal/compiler/plan.hpp"
#include "luminal/models/language_model.hpp"
#include "luminal/nn/tensor_parallel.hpp"
#include "models/generate_cases.hpp"
#include "models/model_parity.hpp"
#include "runtime/liveness.hpp"

namespace luminal {
namespace {

// Runs `body(rank, communicator)` on `size` threads, one per rank, and waits for them.
void on_ranks(int size, const std::function<void(int, std::shared_ptr<Communicator>)>& body,
              std::chrono::milliseconds timeout = std::chrono::minutes(5)) {
  std::vector<std::shared_ptr<Communicator>> group = local_group(size, timeout);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r, comm = std::move(group[static_cast<size_t>(r)])]() mutable {
      body(r, std::move(comm));
    });
  for (auto& t : threads) t.join();
}

TEST(Collective, LocalGroupSumsOverRanksAlike) {
  constexpr int kRanks = 3;
  std::vector<Buffer> results(kRanks);
  on_ranks(kRanks, [&](int r, std::shared_ptr<Communicator> comm) {
    EXPECT_EQ(comm->rank(), r);
    EXPECT_EQ(comm->size(), kRanks);
    for (int round = 0; round < 4; ++round) {  // the group is used again and again
      Buffer b(DType::F32, 5);
      for (size_t i = 0; i < 5; ++i) b.set_f64(i, 0.1 * (r + 1) * static_cast<double>(i + round));
      comm->all_reduce(b);
      results[static_cast<size_t>(r)] = b;
    }
  });
  for (size_t i = 0; i < 5; ++i) {
    const float want = static_cast<float>(0.1 * (1 + 2 + 3) * static_cast<double>(i + 3));
    for (const Buffer& b : results) {
      EXPECT_NEAR(b.get_f64(i), want, 1e-6);
      EXPECT_EQ(b.span<float>()[i], results[0].span<float>()[i]);  // the same bits everywhere
    }
  }
}

TEST(Collective, MismatchedRanksRaiseInsteadOfHanging) {
  // Lengths that differ: every rank raises the same error.
  std::vector<std::string> errors(2);
  on_ranks(2, [&](int r, std::shared_ptr<Communicator> comm) {
    Buffer b(DType::F32, static_cast<size_t>(3 + r));
    try {
      comm->all_reduce(b);
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (const std::string& e : errors)
    EXPECT_NE(e.find("rank 1 gave 4 f32 values"), std::string::npos) << e;

  // A rank that leaves without taking part: the other is told, not left waiting.
  std::string left;
  on_ranks(2, [&](int r, std::shared_ptr<Communicator> comm) {
    if (r == 1) return;
    Buffer b(DType::F32, 2);
    try {
      comm->all_reduce(b);
    } catch (const Error& e) {
      left = e.what();
    }
  });
  EXPECT_NE(left.find("left the group"), std::string::npos) << left;

  // A rank that never comes: the wait ends at the timeout.
  std::string late;
  std::vector<std::shared_ptr<Communicator>> group = local_group(2, std::chrono::milliseconds(50));
  Buffer b(DType::F32, 2);
  try {
    group[0]->all_reduce(b);
  } catch (const Error& e) {
    late = e.what();
  }
  EXPECT_NE(late.find("did not arrive within 50 ms"), std::string::npos) << late;
}

// An all_reduce node between other ops, against the sum computed here.
void expect_graph_sums(const Backend& backend) {
  constexpr int kRanks = 2;
  std::vector<std::vector<float>> got(kRanks);
  const auto values = [](int r, int64_t n) {
    std::vector<float> v(static_cast<size_t>(4 * n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + 1) * 0.5 + 0.25 * i);
    return v;
  };
  on_ranks(kRanks, [&](int r, std::shared_ptr<Communicator> comm) {
    Graph g;
    Tensor x = g.named_tensor("x", {4, "n"});
    Tensor y = (all_reduce(x * 2.0f, comm) + 1.0f).retrieve();
    g.compile(backend);
    for (int64_t n : {3, 5}) {  // a dim bound anew
      g.set_dim("n", n);
      x.set(values(r, n));
      g.execute();
      got[static_cast<size_t>(r)] = y.to_f32();
    }
  });
  const std::vector<float> a = values(0, 5), b = values(1, 5);
  for (const auto& rank : got) {
    ASSERT_EQ(rank.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(rank[i], 2 * (a[i] + b[i]) + 1);
  }
}

TEST(Collective, AllReduceNodeOnTheReferenceInterpreter) {
  expect_graph_sums(ReferenceBackend());
}
TEST(Collective, AllReduceNodeOnTheCpu) {
  expect_graph_sums(cpu());
}

// An all_gather node: every rank's [2, n] values stacked in rank order, then read through
// a permuted view (as a vocabulary-split output projection reads its logits).
void expect_graph_gathers(const Backend& backend) {
  constexpr int kRanks = 3;
  const auto values = [](int r) {
    std::vector<float> v(2 * 5);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(10 * r + i);
    return v;
  };
  on_ranks(kRanks, [&](int r, std::shared_ptr<Communicator> comm) {
    Graph g;
    Tensor x = g.named_tensor("x", {2, "n"});
    Tensor y = all_gather(x + 1.0f, comm).permute({1, 0, 2}).contiguous().retrieve();
    g.compile(backend);
    g.set_dim("n", 5);
    x.set(values(r));
    g.execute();
    const std::vector<float> got = y.to_f32();
    ASSERT_EQ(got.size(), size_t{2 * kRanks * 5});
    for (size_t row = 0; row < 2; ++row)
      for (int q = 0; q < kRanks; ++q)
        for (size_t i = 0; i < 5; ++i)
          EXPECT_EQ(got[(row * kRanks + static_cast<size_t>(q)) * 5 + i],
                    values(q)[row * 5 + i] + 1)
              << backend.name() << " rank " << r;
  });
}

TEST(Collective, AllGatherNodeOnTheReferenceInterpreter) {
  expect_graph_gathers(ReferenceBackend());
}
TEST(Collective, AllGatherNodeOnTheCpu) {
  expect_graph_gathers(cpu());
}

// A collective's kernel comes right after the kernel of its operand, not where the graph
// made it (after unrelated reductions); a bucket of several values gives each one's sums
// in turn.
TEST(Collective, IssuedAsSoonAsTheirOperandsAreReady) {
  std::vector<std::shared_ptr<Communicator>> one = local_group(1);
  Graph g;
  Tensor x = g.named_tensor("x", {4, 3});
  const Tensor a = x * 2.0f;
  Tensor later = x;
  for (int i = 0; i < 4; ++i) later = later.sum({1}).expand(1, 3) + x;  // kernels
  const Tensor first = all_reduce(a, one[0]);
  Tensor bucket = all_reduce_flat({later, x.sum({0})}, one[0]);
  Tensor y = (first + later).retrieve();
  Tensor z = bucket.retrieve();
  const compiler::KernelPlan plan = compiler::plan_kernels(g);
  std::vector<std::string> order;
  std::vector<size_t> collectives, a_at;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    const Node& n = g.node(plan.kernels[k].root);
    if (n.op == Op::Custom) collectives.push_back(k);
    if (plan.kernels[k].root == plan.canon(a.id())) a_at.push_back(k);
  }
  ASSERT_EQ(collectives.size(), 2u);
  ASSERT_EQ(a_at.size(), 1u);
  EXPECT_EQ(collectives[0], a_at[0] + 1) << plan.to_text(g);
  EXPECT_EQ(g.node(plan.kernels[collectives[1]].root).custom->name(), "BucketAllReduce");
  // Its operand is held until its value is first read, not released after it: the
  // exchange may still be reading it while the kernels between run.
  const runtime::Liveness live = runtime::plan_liveness(g, plan);
  std::optional<size_t> released, first_reader;
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    for (uint32_t i = live.frees_begin[k]; i < live.frees_begin[k + 1]; ++i)
      if (live.frees[i] == live.slot_of[plan.canon(a.id()).value]) released = k;
    for (NodeId r : plan.kernels[k].reads)
      if (r == plan.canon(first.id()) && !first_reader) first_reader = k;
  }
  ASSERT_TRUE(first_reader.has_value());
  EXPECT_EQ(released, first_reader);
  EXPECT_GT(*first_reader, collectives[0] + 1);

  std::vector<float> xs(12);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.5f * static_cast<float>(i) - 2.0f;
  const CpuBackend on_cpu = cpu();
  const ReferenceBackend interpreter;
  for (const Backend* backend : std::vector<const Backend*>{&on_cpu, &interpreter}) {
    g.compile(*backend);
    x.set(xs);
    g.execute();
    // The bucket is `later` flattened, then x's column sums.
    Graph want;
    Tensor wx = want.named_tensor("x", {4, 3});
    Tensor wl = wx;
    for (int i = 0; i < 4; ++i) wl = wl.sum({1}).expand(1, 3) + wx;
    Tensor wy = (wx * 2.0f + wl).retrieve();
    Tensor wz = concat({wl.reshape({12}), wx.sum({0})}, 0).retrieve();
    want.compile(interpreter);
    wx.set(xs);
    want.execute();
    EXPECT_EQ(y.to_f32(), wy.to_f32()) << backend->name();
    EXPECT_EQ(z.to_f32(), wz.to_f32()) << backend->name();
  }
}

// A rank's communicator that counts the all-reduces it is asked for.
class Counting final : public Communicator {
 public:
  explicit Counting(std::shared_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce(Buffer& data) override {
    ++calls;
    inner_->all_reduce(data);
  }
  void all_gather(const Buffer& mine, Buffer& all) override { inner_->all_gather(mine, all); }
  int calls = 0;

 private:
  std::shared_ptr<Communicator> inner_;
};

// x + (sum_r a_r + sum_r b_r): the compiler's rules make it one all-reduce of a + b; the
// interpreter, which runs the graph as written, makes two. The same values either way.
TEST(Collective, PartialSumsAddedTogetherAreReducedOnce) {
  constexpr int kRanks = 2;
  const auto values = [](int r) {
    std::vector<float> v(8);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(0.25 * i - r);
    return v;
  };
  const ReferenceBackend reference;
  const CpuBackend cpu_backend;
  for (const auto& [backend, reductions] :
       std::vector<std::pair<const Backend*, int>>{{&reference, 2}, {&cpu_backend, 1}}) {
    on_ranks(kRanks, [&](int r, std::shared_ptr<Communicator> comm) {
      auto counting = std::make_shared<Counting>(std::move(comm));
      Graph g;
      Tensor x = g.named_tensor("x", {8});
      Tensor y = (x + (all_reduce(x * 2.0f, counting) + all_reduce(x.exp2(), counting))).retrieve();
      g.compile(*backend);
      x.set(values(r));
      g.execute();
      EXPECT_EQ(counting->calls, reductions) << backend->name() << " rank " << r;
      const std::vector<float> mine = values(r), got = y.to_f32();
      for (size_t i = 0; i < mine.size(); ++i) {
        double sum = 0;
        for (int q = 0; q < kRanks; ++q) sum += 2.0 * values(q)[i] + std::exp2(values(q)[i]);
        EXPECT_NEAR(got[i], mine[i] + sum, 1e-5) << backend->name() << " rank " << r << " element " << i;
      }
    });
  }
}

TEST(TensorParallel, ShardSourceHandsEachRankItsPart) {
  // A [2, 6] tensor split on dimension 1 over 3 ranks: columns 2r, 2r + 1 of each row.
  const nn::WeightSource full = [](const std::string&,
                                   const std::vector<int64_t>& shape) -> std::optional<Buffer> {
    EXPECT_EQ(shape, (std::vector<int64_t>{2, 6}));
    Buffer b(DType::F32, 12);
    for (size_t i = 0; i < 12; ++i) b.set_f64(i, static_cast<double>(i));
    return b;
  };
  for (int r = 0; r < 3; ++r) {
    const auto part =
        nn::shard_source(full, {[](const std::string&) { return 1; }, r, 3})("w", {2, 2});
    ASSERT_TRUE(part);
    const std::vector<float> want{float(2 * r), float(2 * r + 1), float(6 + 2 * r),
                                  float(7 + 2 * r)};
    EXPECT_EQ(part->to_f32(), want) << "rank " << r;
  }
}

// Each rank's part of a tiny model, over two ranks, against transformers' logits (the
// parity harness's goldens: prefill and three decode steps through the KV cache).
class TensorParallelParity : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallelParity, TwoRanksMatchTransformers) {
  const ReferenceBackend reference;
  const CpuBackend cpu_backend;
  for (const Backend* backend : std::vector<const Backend*>{&reference, &cpu_backend}) {
    SCOPED_TRACE(backend->name());
    on_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
      models::run_parity<models::Llama, models::LlamaConfig>(GetParam(), *backend,
                                                             models::Weights::F32, comm);
    });
  }
}

// Dense Llama-family fixtures of both transformers generations: biases (qwen2), q/k norms
// (qwen3), a sliding window, fused projections (phi3), RoPE scalings.
INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallelParity,
                         ::testing::Values("llama", "qwen2", "qwen3_tf5", "mistral_window",
                                           "phi3_tf5", "llama3_rope_tf5", "qwen2_yarn"));

// A GGUF file split on load (Q8_0 blocks: q/k/v and gate/up by rows, o and down by whole
// blocks of each row), generating as transformers does on its dequantised weights.
TEST(TensorParallel, GgufTwoRanksGenerateAsTransformers) {
  const models::GenerateForm wide{"gguf_llama_wide_q8_0", "llama_tp.gguf",
                                  "expected_llama_tp_gguf.json"};
  on_ranks(2, [&](int, std::shared_ptr<Communicator> comm) {
    models::expect_generation_matches_transformers(wide, CpuBackend(), comm);
  });
}

TEST(TensorParallel, UnevenSplitsAreErrors) {
  const models::LlamaConfig cfg =
      models::LlamaConfig::from_hf_json(models::model_fixture_dir("llama") + "/config.json");
  Graph g;
  auto three = local_group(3);
  try {
    models::Llama model(g, cfg, DType::F32, three[0]);
    ADD_FAILURE() << "4 heads split over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must all divide by 3"), std::string::npos) << e.what();
  }
  // 32-wide rows of Q8_0 (one block) cannot be halved.
  Graph h;
  auto two = local_group(2);
  try {
    models::open_language_model(models::kGenerateDir + "llama.gguf", h, DType::F32, two[0]);
    ADD_FAILURE() << "one Q8_0 block split over 2 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rows of 1 blocks of 32 do not divide by 2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace luminal
