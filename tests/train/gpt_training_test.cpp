// A tiny GPT-2-style language model (nn::Gpt) trained by AdamW for 20 steps on the CPU
// gives PyTorch's losses step for step (goldens from tools/fixtures/make_training.py,
// the same architecture, weights and token batches in torch), also when the batch is
// shared among ranks that average their gradients (data parallelism).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <thread>

#include "hlops/fixture.hpp"
#include "luminal/luminal.hpp"
#include "luminal/nn/gpt.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/data_parallel.hpp"
#include "luminal/train/loss_scale.hpp"
#include "luminal/train/optimizer.hpp"
#include "testing/products_left_as_reductions.hpp"

namespace luminal {
namespace {

// The 20 steps' losses of the fixture's model trained in `compute` on `backend`, checked
// against PyTorch's (f32) at `tolerance` relative. With `comm`, this is one rank of
// several, trained on its share of each batch with the gradients (in buckets of
// `bucket_bytes`) and the loss averaged over the ranks.
void train_and_compare(DType compute, const Backend& backend, double tolerance,
                       const std::shared_ptr<Communicator>& comm = nullptr,
                       size_t bucket_bytes = size_t{25} << 20) {
  const auto cases = testing::load_fixture(std::string(LUMINAL_FIXTURE_DIR) + "/train/gpt.lfx");
  ASSERT_EQ(cases.size(), 1u);
  const testing::ParityCase& c = cases[0];
  const testing::Params p(c.params);
  const nn::GptConfig config{p.i("vocab"), p.i("context"), p.i("layers"), p.i("heads"),
                             p.i("dim"),   1e-5,           compute};

  Graph g;
  nn::Gpt model(g, "", config);
  const nn::NamedTensors params = model.named_parameters();
  // The fixture's weights come in torch's named_parameters() order, which must be ours.
  std::vector<std::string> names;
  std::stringstream list(p.str("names"));
  for (std::string n; std::getline(list, n, ',');) names.push_back(n);
  ASSERT_EQ(names.size(), params.size());
  ASSERT_EQ(c.inputs.size(), params.size() + 1);
  std::vector<Tensor> weights;
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].first, names[i]);
    Tensor(params[i].second).set_buffer(c.inputs[i].base.data);
    weights.push_back(params[i].second);
  }
  const testing::FixtureTensor& tokens = c.inputs.back().base;  // [steps, batch, context + 1]
  const int64_t steps = tokens.shape[0], span = tokens.shape[2];
  const int64_t ranks = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
  ASSERT_EQ(tokens.shape[1] % ranks, 0) << "the batch does not share out";
  const int64_t batch = tokens.shape[1] / ranks;  // this rank's rows, from batch * rank on
  const std::vector<int64_t> all = tokens.data.to_i64();

  Tensor ids = g.named_tensor("ids", {batch, span - 1}, DType::I64);
  Tensor targets = g.named_tensor("targets", {batch, span - 1}, DType::I64);
  const Tensor logits = model.forward(ids);
  const Tensor own_loss =
      -logits.log_softmax(-1).gather_axis(2, targets.unsqueeze(2)).mean({0, 1, 2});
  // f16 needs its gradients scaled (and overflowing steps skipped); the others do not.
  std::optional<train::LossScale> scaler;
  if (compute == DType::F16) scaler.emplace(g, train::LossScaleOptions{.initial = 1024});
  std::vector<Tensor> grads =
      scaler ? scaler->gradients(own_loss, weights) : train::gradients(own_loss, weights);
  Tensor loss = own_loss;
  if (comm) {
    grads = train::average_over_ranks(grads, comm, bucket_bytes);
    loss = train::average_over_ranks({own_loss}, comm)[0];
  }
  train::Optimizer opt = train::adamw(
      weights, grads, train::constant_lr(p.f("lr")),
      {.weight_decay = p.f("weight_decay"), .apply_if = scaler ? scaler->finite() : Tensor()});
  loss.retrieve();
  EXPECT_EQ(testing::products_left_as_reductions(g), std::vector<std::string>{});
  g.compile(backend);
  const std::vector<float> want = c.expected.data.to_f32();
  ASSERT_EQ(want.size(), static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int64_t> in, out;
    for (int64_t b = batch * rank; b < batch * (rank + 1); ++b)
      for (int64_t t = 0; t < span - 1; ++t) {
        in.push_back(all[static_cast<size_t>((s * batch * ranks + b) * span + t)]);
        out.push_back(all[static_cast<size_t>((s * batch * ranks + b) * span + t + 1)]);
      }
    ids.set(in);
    targets.set(out);
    g.execute();
    if (comm && backend.name() == "cuda") {  // the exchanges ran on the device
      EXPECT_EQ(g.last_run_stats().host_fallbacks, 0u) << "step " << s;
    }
    EXPECT_NEAR(loss.to_f32()[0], want[static_cast<size_t>(s)],
                tolerance * std::abs(want[static_cast<size_t>(s)]))
        << "step " << s << " in " << dtype_name(compute) << " on rank " << rank << " of " << ranks;
    const bool counted = scaler ? scaler->update() : true;
    ASSERT_TRUE(counted) << "step " << s << " overflowed at scale " << scaler->scale();
    opt.advance(counted);
  }
  EXPECT_LT(want.back(), want.front() * 0.9f) << "the goldens' loss falls";
  // Mixed precision keeps f32 master weights.
  for (const Tensor& w : weights)
    EXPECT_EQ(g.data(w.id()) ? g.data(w.id())->dtype() : w.dtype(), DType::F32);
}

#ifdef LUMINAL_PARITY_ON_GPU
// The same on the GPU (cuda_tests, label gpu): f32 products there may run on TF32.
TEST(CudaGptTraining, TwentyStepsMatchPyTorch) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  train_and_compare(DType::F32, cuda(), 5e-3);
}

TEST(CudaGptTraining, MixedPrecisionFollowsWithinBf16Precision) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  train_and_compare(DType::BF16, cuda(), 3e-2);
}
// Data parallelism on this GPU through NCCL, as one rank of one: the buckets' exchanges
// run on the device, inside the recorded graphs.
TEST(CudaGptTraining, DataParallelBucketsRunThroughNccl) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no GPU here: " << why;
  std::shared_ptr<Communicator> one;
  try {
    one = nccl_communicator(nccl_unique_id(), 0, 1, 0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no NCCL here: " << e.what();
  }
  train_and_compare(DType::F32, cuda(), 5e-3, one, 4096);
}
#else
// The fixture's batches shared among `ranks` threads of this process.
void train_on_ranks(int ranks, const Backend& backend, size_t bucket_bytes) {
  std::vector<std::shared_ptr<Communicator> > group = local_group(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, comm = group[static_cast<size_t>(r)]] {
      train_and_compare(DType::F32, backend, 1e-4, comm, bucket_bytes);
    });
  for (std::thread& t : threads) t.join();
}

TEST(GptTraining, TwentyStepsMatchPyTorch) {
  train_and_compare(DType::F32, cpu(), 1e-4);
}

// Each step's batch shared out among ranks (threads here) that average their gradients:
// the losses PyTorch's whole-batch steps give. Buckets of 4 KB make several exchanges;
// on the reference interpreter, which runs the graph as written, too.
TEST(GptTraining, DataParallelRanksMatchPyTorch) {
  train_on_ranks(2, cpu(), 4096);
  train_on_ranks(4, cpu(), size_t{25} << 20);
  train_on_ranks(2, ReferenceBackend(), 4096);
}

// bf16 products and activations with f32 master weights: PyTorch's f32 losses to bf16's
// precision.
TEST(GptTraining, MixedPrecisionFollowsWithinBf16Precision) {
  train_and_compare(DType::BF16, cpu(), 3e-2);
}

// f16 products with dynamic loss scaling.
TEST(GptTraining, F16WithLossScalingFollows) {
  train_and_compare(DType::F16, cpu(), 1e-2);
}
#endif

}  // namespace
}  // namespace luminal
