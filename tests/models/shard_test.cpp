// The sharding pass: a graph written for one device, its weights annotated as Megatron
// cuts them, run as 2 and 4 ranks (threads) on the reference interpreter and the CPU
// gives the whole graph's values, with the collectives Megatron's layout needs (one
// all-reduce a block); values read across the cut are gathered; bad annotations refused.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "luminal/luminal.hpp"
#include "luminal/models/llama.hpp"
#include "luminal/models/safetensors.hpp"
#include "luminal/nn/attention.hpp"
#include "luminal/shard.hpp"
#include "models/model_parity.hpp"
#include "testing/expect_error.hpp"

namespace luminal {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A model's graph: its inputs (random data set), how each is placed, and its output.
struct Model {
  Graph g;
  std::vector<std::pair<Tensor, Placement>> placed;
  Tensor y;

  Tensor input(const std::string& name, const std::vector<Expr>& shape, Placement p,
               uint32_t seed) {
    Tensor t = g.named_tensor(name, shape);
    int64_t n = 1;
    for (Expr d : shape) n *= d.eval(g.dims());
    t.set(random_values(static_cast<size_t>(n), seed));
    placed.emplace_back(t, p);
    return t;
  }
};

// Builds the model on every rank, shards it, and checks each rank's output against the
// whole graph's on the reference interpreter; returns the collectives rank 0 inserted.
size_t expect_sharded_matches_whole(const std::function<void(Model&)>& build, int ranks,
                                    const Backend& backend) {
  Model whole;
  build(whole);
  whole.y.retrieve();
  whole.g.compile(ReferenceBackend());
  whole.g.execute();
  const std::vector<float> want = whole.y.to_f32();

  std::vector<std::shared_ptr<Communicator>> group = local_group(ranks);
  std::vector<size_t> collectives(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        Model m;
        build(m);
        m.y.retrieve();
        ShardedGraph sg = shard(m.g, m.placed, group[static_cast<size_t>(r)]);
        collectives[static_cast<size_t>(r)] = sg.collectives();
        for (const auto& [t, p] : m.placed) {  // each rank holds its part of a split input
          if (p.kind == Placement::Kind::Split) {
            EXPECT_EQ(sg.tensor(t).dim(p.axis), t.dim(p.axis) / ranks);
          }
        }
        sg.graph().compile(backend);
        sg.graph().execute();
        const Tensor y = sg.tensor(m.y);
        EXPECT_EQ(y.shape(), m.y.shape());
        const std::vector<float> got = y.to_f32();
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
              << backend.name() << ", rank " << r << " of " << ranks << ", element " << i;
      } catch (const Error& e) {
        ADD_FAILURE() << backend.name() << ", rank " << r << " of " << ranks << ": " << e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  return collectives[0];
}

// Megatron's MLP: the first product's weight cut by rows (its outputs), the second's by
// columns (its inputs); the second product's partial sums are made whole once, before
// the bias and the residual.
void mlp(Model& m) {
  m.g.set_dim("t", 3);
  const int64_t e = 8, f = 16;
  Tensor x = m.input("x", {"t", e}, Placement::replicated(), 1);
  Tensor w1 = m.input("w1", {f, e}, Placement::split(0), 2);
  Tensor b1 = m.input("b1", {f}, Placement::split(0), 3);
  Tensor w2 = m.input("w2", {e, f}, Placement::split(1), 4);
  Tensor b2 = m.input("b2", {e}, Placement::replicated(), 5);
  Tensor h = (x.matmul(w1.transpose(0, 1)) + b1).gelu();
  m.y = h.matmul(w2.transpose(0, 1)) + b2 + x;
}

TEST(Shard, MegatronMlpTakesOneAllReduce) {
  for (int ranks : {2, 4}) {
    EXPECT_EQ(expect_sharded_matches_whole(mlp, ranks, ReferenceBackend()), 1u) << ranks;
    EXPECT_EQ(expect_sharded_matches_whole(mlp, ranks, cpu()), 1u) << ranks;
  }
}

// Causal multi-head attention split by heads: q, k and v's weights by rows, the output
// projection's by columns; heads are a reshape of the cut dim, then permuted.
void attention(Model& m) {
  m.g.set_dim("t", 5);
  const int64_t e = 16, heads = 4, dh = e / heads;
  Tensor x = m.input("x", {"t", e}, Placement::replicated(), 11);
  Tensor wq = m.input("wq", {e, e}, Placement::split(0), 12);
  Tensor wk = m.input("wk", {e, e}, Placement::split(0), 13);
  Tensor wv = m.input("wv", {e, e}, Placement::split(0), 14);
  Tensor wo = m.input("wo", {e, e}, Placement::split(1), 15);
  const auto per_head = [&](const Tensor& w) {
    return x.matmul(w.transpose(0, 1)).reshape({"t", heads, dh}).permute({1, 0, 2});
  };
  const Tensor q = per_head(wq), k = per_head(wk), v = per_head(wv);
  Tensor scores = q.matmul(k.transpose(1, 2)) * (1.0 / std::sqrt(double(dh)));
  scores = where(nn::causal_mask(m.g, "t", 0), scores, -1e9);
  const Tensor out = scores.softmax(-1).matmul(v).permute({1, 0, 2}).reshape({"t", e});
  m.y = out.matmul(wo.transpose(0, 1)) + x;
}

TEST(Shard, AttentionSplitByHeadsTakesOneAllReduce) {
  for (int ranks : {2, 4})
    EXPECT_EQ(expect_sharded_matches_whole(attention, ranks, ReferenceBackend()), 1u) << ranks;
}

// A value read across its cut: a softmax over the split dim, whose max gathers each
// rank's max and whose sum all-reduces each rank's sum (a value a row each, not the
// row), and the split result as the output, gathered.
void read_across(Model& m) {
  Tensor x = m.input("x", {3, 8}, Placement::replicated(), 21);
  Tensor w = m.input("w", {12, 8}, Placement::split(0), 22);
  const Tensor h = x.matmul(w.transpose(0, 1));  // [3, 12], split along dim 1
  m.y = h.softmax(-1) * h;
}

TEST(Shard, ValuesReadAcrossTheCutAreGathered) {
  EXPECT_EQ(expect_sharded_matches_whole(read_across, 2, ReferenceBackend()), 3u);
  EXPECT_EQ(expect_sharded_matches_whole(read_across, 3, cpu()), 3u);
  // What each exchange carries: the maxima and the sums a row each; the row only for
  // the output.
  Model m;
  read_across(m);
  m.y.retrieve();
  ShardedGraph sg = shard(m.g, m.placed, local_group(2)[0]);
  std::vector<std::string> sent;
  for (uint32_t i = 0; i < sg.graph().num_nodes(); ++i) {
    const Node& n = sg.graph().node(NodeId{i});
    if (n.op == Op::Custom)
      sent.push_back(n.custom->name() + " " + to_string(n.inputs[0].view.shape()));
  }
  EXPECT_EQ(sent, (std::vector<std::string>{"AllGather [3]", "AllReduce [3]", "AllGather [3, 6]"}));
}

// A whole model's graph (the Llama fixture: 4 query heads over 2 key-value heads, 2
// layers) sharded by its weights' names, as Megatron cuts them, and its KV cache by
// heads: on 2 ranks, the logits of the prompt and of three decode steps (each rank's
// part of the cache fed back) are transformers', for one all-reduce after the attention
// and one after the feed-forward network in each layer.
TEST(Shard, LlamaByWeightNamesGivesTransformersLogits) {
  const std::string dir = models::model_fixture_dir("llama");
  const models::LlamaConfig cfg = models::LlamaConfig::from_hf_json(dir + "/config.json");
  const models::SafetensorsFile expected(dir + "/expected.safetensors");
  const std::vector<int64_t> all = expected.read("tokens").to_i64();
  const size_t prompt = all.size() - 3;
  std::vector<std::shared_ptr<Communicator>> group = local_group(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        Graph g;
        models::Llama model(g, cfg, DType::F32);
        Tensor tokens = g.named_tensor("tokens", {"seq"}, DType::I32);
        models::Llama::Output out = model.forward(tokens);
        out.logits.retrieve();
        std::vector<Tensor> caches;
        for (auto& c : out.cache) caches.insert(caches.end(), {c.k.retrieve(), c.v.retrieve()});
        ASSERT_TRUE(models::load_safetensors_weights(model, dir + "/model.safetensors").empty());
        std::vector<std::pair<Tensor, Placement>> placed;
        for (const auto& [name, w] : model.named_parameters()) {
          for (const char* rows : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})
            if (name.find(rows) != std::string::npos) placed.emplace_back(w, Placement::split(0));
          for (const char* columns : {"o_proj", "down_proj"})
            if (name.find(columns) != std::string::npos)
              placed.emplace_back(w, Placement::split(1));
        }
        ASSERT_EQ(placed.size(), 14u);
        for (auto& c : model.cache_inputs) {  // [positions, key-value heads, head dim]
          placed.emplace_back(c.k, Placement::split(1));
          placed.emplace_back(c.v, Placement::split(1));
        }
        ShardedGraph sg = shard(g, placed, group[static_cast<size_t>(r)], caches);
        for (const auto& [w, p] : placed) EXPECT_EQ(sg.tensor(w).dim(p.axis), w.dim(p.axis) / 2);
        EXPECT_EQ(sg.collectives(), 2u * static_cast<size_t>(cfg.layers));
        sg.graph().compile(CpuBackend());
        for (auto& c : model.cache_inputs) {
          sg.tensor(c.k).set(std::vector<float>{});
          sg.tensor(c.v).set(std::vector<float>{});
        }
        int64_t past = 0;
        for (size_t s = 0; s < 4; ++s) {
          const size_t from = s == 0 ? 0 : prompt + s - 1, to = s == 0 ? prompt : from + 1;
          sg.graph().set_dim("seq", static_cast<int64_t>(to - from));
          sg.graph().set_dim("past", past);
          sg.tensor(tokens).set(
              std::vector<int32_t>(all.begin() + static_cast<std::ptrdiff_t>(from),
                                   all.begin() + static_cast<std::ptrdiff_t>(to)));
          sg.graph().execute();
          past += static_cast<int64_t>(to - from);
          const std::string step = s == 0 ? "prefill" : "step" + std::to_string(s - 1);
          models::expect_logits(sg.tensor(out.logits).to_f32(), expected.read(step + "_logits"),
                                step + " on rank " + std::to_string(r));
          for (size_t l = 0; l < out.cache.size(); ++l) {  // this rank's part, fed back
            sg.tensor(model.cache_inputs[l].k)
                .set_buffer(*sg.graph().data(sg.tensor(out.cache[l].k).id()));
            sg.tensor(model.cache_inputs[l].v)
                .set_buffer(*sg.graph().data(sg.tensor(out.cache[l].v).id()));
            EXPECT_EQ(sg.placement(out.cache[l].k), Placement::split(1));
          }
        }
      } catch (const Error& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (std::thread& t : threads) t.join();
}

TEST(Shard, BadAnnotationsAreRefusedByName) {
  std::vector<std::shared_ptr<Communicator>> two = local_group(2);
  Graph g;
  Tensor w = g.named_tensor("w", {3, 4});
  Tensor y = (w * 2.0f).retrieve();
  testing::expect_error(
      [&] {
        shard(g, {{w, Placement::split(0)}}, two[0]);
      },
      {"'w'", "dim 0 of size 3", "2 ranks"});
  testing::expect_error(
      [&] {
        shard(g, {{w, Placement::partial()}}, two[0]);
      },
      {"'w'", "partial sum"});
  testing::expect_error(
      [&] {
        shard(g, {{y, Placement::split(1)}}, two[0]);
      },
      {"only inputs are placed"});
  testing::expect_error(
      [&] {
        shard(g, {{w, Placement::split(1)}}, nullptr);
      },
      {"no communicator"});
}

}  // namespace
}  // namespace luminal
