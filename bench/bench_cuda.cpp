// luminal's CUDA backend on the benchmark shapes: prints one line per case,
// "<case> <median ms>", the kernels alone timed by device events (RunStats::device_seconds)
// after warm-up, on the device alone (Graph::time_device_alone: a run starts once the host
// has queued it, as compare_cuda.py times PyTorch's peers with the GPU kept busy meanwhile).
// bench/compare_cuda.py runs it beside PyTorch and prints the ratios.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "luminal/nn/gpt.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/optimizer.hpp"
#include "random_blocks.hpp"

using namespace luminal;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
  return v;
}

// random_floats(n, seed) stored as `type`.
Buffer random_buffer(size_t n, uint32_t seed, DType type) {
  const std::vector<float> v = random_floats(n, seed);
  return Buffer::from_doubles(std::vector<double>(v.begin(), v.end()), type);
}

// Median device time of `runs` executions after `warmup` ones.
double median_ms(Graph& cx, int warmup, int runs) {
  for (int i = 0; i < warmup; ++i) cx.execute();
  cx.time_device_alone(true);
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    cx.execute();
    t.push_back(cx.last_run_stats().device_seconds * 1e3);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const char* name, double ms) {
  std::printf("%s %.4f\n", name, ms);
  std::fflush(stdout);
}

// y = the 8-op chain compare_cuda.py gives PyTorch: mul, add, sin, mul, add, sqrt-of-square
// plus one, recip, mul.
void elementwise_chain() {
  const int64_t n = int64_t{256} << 20;
  Graph cx;
  Tensor x = cx.named_tensor("x", {n});
  x.set(random_floats(static_cast<size_t>(n), 1));
  Tensor y = ((((x * 1.5 + 0.25).sin() * x) + 2.0) * 0.5).recip() * x;
  y.retrieve();
  cx.compile(cuda());
  report("chain8_f32_256M", median_ms(cx, 3, 10));
}

void gemm(int64_t n, DType t, const char* name) {
  Graph cx;
  Tensor a = cx.named_tensor("a", {n, n}, t);
  Tensor b = cx.named_tensor("b", {n, n}, t);
  a.set(random_floats(static_cast<size_t>(n * n), 2));
  b.set(random_floats(static_cast<size_t>(n * n), 3));
  a.matmul(b).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 20));
}

// A linear layer's output added to the residual stream, y = x + (h W^T + b), bf16: a
// transformer block's down projection over 32 x 256 tokens (h [8192, 4096], W [1024,
// 4096]). One product adding both as it stores, where the epilogue rules are on.
void linear_residual() {
  const int64_t m = 8192, k = 4096, n = 1024;
  Graph cx;
  Tensor h = cx.named_tensor("h", {m, k}, DType::BF16);
  Tensor w = cx.named_tensor("w", {n, k}, DType::BF16);
  Tensor b = cx.named_tensor("b", {n}, DType::BF16);
  Tensor x = cx.named_tensor("x", {m, n}, DType::BF16);
  h.set(random_floats(static_cast<size_t>(m * k), 7));
  w.set(random_floats(static_cast<size_t>(n * k), 8));
  b.set(random_floats(static_cast<size_t>(n), 9));
  x.set(random_floats(static_cast<size_t>(m * n), 10));
  (x + (h.matmul(w.permute({1, 0})) + b)).retrieve();
  cx.compile(cuda());
  report("linear_residual_bf16_8192x4096x1024", median_ms(cx, 3, 20));
}

// A ResNet basic block's 3x3 convolution, bf16: x [32, 64, 56, 56] and w [64, 64, 3, 3],
// padding 1, then ReLU (resnet18's first stage at batch 32, NCHW as torch lays it out).
void conv3x3() {
  const int64_t n = 32, c = 64, hw = 56;
  Graph cx;
  Tensor x = cx.named_tensor("x", {n, c, hw, hw}, DType::BF16);
  Tensor w = cx.named_tensor("w", {c, c, 3, 3}, DType::BF16);
  x.set(random_floats(static_cast<size_t>(n * c * hw * hw), 11));
  w.set(random_floats(static_cast<size_t>(c * c * 9), 12));
  ConvOptions o;
  o.padding = 1;
  conv2d(x, w, {}, o).relu().retrieve();
  cx.compile(cuda());
  report("conv3x3_relu_bf16_32x64x56x56", median_ms(cx, 3, 20));
}

// One row against a weight: y[1, N] = x[1, K] W^T, W [N, K] in bf16 (a decode step's
// projection).
void gemv(int64_t k, int64_t n, const char* name) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {1, k}, DType::BF16);
  Tensor w = cx.named_tensor("w", {n, k}, DType::BF16);
  x.set(random_floats(static_cast<size_t>(k), 5));
  w.set(random_floats(static_cast<size_t>(n * k), 6));
  x.matmul(w.permute({1, 0})).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 50));
}

// A decode step's projections one after another: `layers` pairs of an up (4096 ->
// 14336) and a down (14336 -> 4096) product, each over weights of its own (117 MB each,
// 1.9 GB in all: none stays in the L2), bf16 (the values grow by about 50 a product:
// 10^27 at the end, within bf16's range). Prints the time a product.
void gemv_layers(int layers, const char* name) {
  const int64_t d = 4096, f = 14336;
  Graph cx;
  Tensor h = cx.named_tensor("x", {1, d}, DType::BF16);
  h.set(random_floats(static_cast<size_t>(d), 5));
  const std::vector<float> w = random_floats(static_cast<size_t>(d * f), 6);
  for (int l = 0; l < layers; ++l) {
    Tensor up = cx.named_tensor("up" + std::to_string(l), {f, d}, DType::BF16);
    Tensor down = cx.named_tensor("down" + std::to_string(l), {d, f}, DType::BF16);
    up.set(w);
    down.set(w);
    h = h.matmul(up.permute({1, 0})).matmul(down.permute({1, 0}));
  }
  h.retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 20) / (2 * layers));
}

// The same projection as an f32 model with a bf16 checkpoint runs it: x f32, W's bf16
// values kept as they are stored (a QMatMul over ggml BF16 blocks).
void qgemv(int64_t k, int64_t n, const char* name) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {1, k});
  Tensor w = cx.named_tensor("w", {n, k});
  x.set(random_floats(static_cast<size_t>(k), 5));
  const Buffer bf16 = random_buffer(static_cast<size_t>(n * k), 6, DType::BF16);
  Buffer raw(DType::U8, bf16.bytes());
  std::memcpy(raw.data(), bf16.data(), raw.bytes());
  w.set_quantized(30, std::move(raw));  // ggml BF16
  x.matmul(w.permute({1, 0})).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 50));
}

// The same projection over weights in a ggml block format (Q4_K, Q5_K, Q6_K or Q8_0),
// decoded inside the kernel: random quant bits, small f16 scales.
void qgemv_blocks(int64_t k, int64_t n, GgmlType type, const char* name) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {1, k});
  Tensor w = cx.named_tensor("w", {n, k});
  x.set(random_floats(static_cast<size_t>(k), 5));
  w.set_quantized(static_cast<uint32_t>(type),
                  bench::random_blocks(static_cast<uint32_t>(type), n, k, 9));
  x.matmul(w.permute({1, 0})).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 50));
}

// A sampled token's candidates: the positions of the k largest of one row of a 128k
// vocabulary's f32 logits.
void top_k_row(int64_t n, int64_t k, const char* name) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {1, n});
  x.set(random_floats(static_cast<size_t>(n), 7));
  top_k(x, k).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 50));
}

// Attention as nn::Attention writes it, 32 query heads over 8 key heads of 128 dims, the
// cache position-major ([past + seq, 8, 128]): `seq` new rows after `past` cached ones,
// causal. As an f32 model with a half-precision cache computes it (queries f32, the cache
// f16), or in `compute` throughout (a bf16 model with its cache in bf16).
void attention(int64_t seq, int64_t past, const char* name, DType compute = DType::F32) {
  const int64_t kv = 8, group = 4, d = 128, total = past + seq;
  const DType cache = compute == DType::F32 ? DType::F16 : compute;
  Graph cx;
  Tensor q = cx.named_tensor("q", {kv, group, seq, d}, compute);
  Tensor k = cx.named_tensor("k", {total, kv, d}, cache);
  Tensor v = cx.named_tensor("v", {total, kv, d}, cache);
  q.set_buffer(random_buffer(static_cast<size_t>(kv * group * seq * d), 8, compute));
  k.set_buffer(
      Buffer::from_doubles(std::vector<double>(static_cast<size_t>(total * kv * d), 0.01), cache));
  v.set_buffer(
      Buffer::from_doubles(std::vector<double>(static_cast<size_t>(total * kv * d), 0.02), cache));
  const Tensor keys = k.cast(compute).permute({1, 0, 2});
  const Tensor values = v.cast(compute).permute({1, 0, 2});
  Tensor scores = q.matmul(keys.unsqueeze(1).transpose(-1, -2)) * (1.0 / std::sqrt(double(d)));
  scores = where(nn::causal_mask(cx, seq, past), scores, -std::numeric_limits<double>::infinity());
  scores.softmax(-1).matmul(values.unsqueeze(1)).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 20));
}

// Decoding's attention as a decode step runs it: `layers` attentions one after another in
// one program (each over its own cache of `past` bf16 positions, 32 query heads on 8 key
// heads of 128, for each of `batch` sequences), replayed as a CUDA graph, each kernel
// launched under the one before's tail. Reports the milliseconds a layer (the run's device
// time over `layers`). The caches are position-major ([position, head, dim], as luminal's
// models keep them, a step's rows appended at the end), or `head_major` ([head, position,
// dim], as PyTorch's SDPA and transformers' caches take them), after the batch dim.
void attention_decode_layers(int64_t past, int layers, bool head_major, const char* name,
                             int64_t batch = 1) {
  const int64_t kv = 8, group = 4, d = 128, total = past + 1;
  // (A lone sequence without a batch dim, as a decode step of batch 1 has it.)
  auto batched = [&](std::vector<Expr> shape) {
    if (batch > 1) shape.insert(shape.begin(), Expr(batch));
    return shape;
  };
  Graph cx;
  const Buffer qb = random_buffer(static_cast<size_t>(batch * kv * group * d), 8, DType::BF16);
  const auto cache_elements = static_cast<size_t>(batch * total * kv * d);
  const Buffer kb = Buffer::from_doubles(std::vector<double>(cache_elements, 0.01), DType::BF16);
  const Buffer vb = Buffer::from_doubles(std::vector<double>(cache_elements, 0.02), DType::BF16);
  for (int l = 0; l < layers; ++l) {
    const std::string layer = std::to_string(l);
    Tensor q = cx.named_tensor("q" + layer, batched({kv, group, 1, d}), DType::BF16);
    const std::vector<Expr> cache =
        batched(head_major ? std::vector<Expr>{kv, total, d} : std::vector<Expr>{total, kv, d});
    Tensor k = cx.named_tensor("k" + layer, cache, DType::BF16);
    Tensor v = cx.named_tensor("v" + layer, cache, DType::BF16);
    q.set_buffer(qb);
    k.set_buffer(kb);
    v.set_buffer(vb);
    const int b = batch > 1 ? 1 : 0;  // the cache's first own dim
    const Tensor keys = head_major ? k : k.transpose(b, b + 1);
    const Tensor values = head_major ? v : v.transpose(b, b + 1);
    Tensor scores =
        q.matmul(keys.unsqueeze(b + 1).transpose(-1, -2)) * (1.0 / std::sqrt(double(d)));
    scores = where(nn::causal_mask(cx, 1, past), scores, -std::numeric_limits<double>::infinity());
    scores.softmax(-1).matmul(values.unsqueeze(b + 1)).retrieve();
  }
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 20) / layers);
}

// Prefill attention over many short sequences, as the transformer block of
// bench/torch_compile_bench.py runs it at batch 32: 32 x 16 heads of 64 dims over 256
// tokens each, causal, bf16, queries, keys and values [batch, heads, tokens, 64].
void attention_short_sequences() {
  const int64_t batch = 32, heads = 16, seq = 256, d = 64;
  Graph cx;
  std::vector<Tensor> qkv;
  for (const char* name : {"q", "k", "v"}) {
    Tensor t = cx.named_tensor(name, {batch, heads, seq, d}, DType::BF16);
    t.set_buffer(random_buffer(static_cast<size_t>(batch * heads * seq * d), 9, DType::BF16));
    qkv.push_back(t);
  }
  Tensor scores = qkv[0].matmul(qkv[1].transpose(-1, -2)) * (1.0 / std::sqrt(double(d)));
  scores = where(nn::causal_mask(cx, seq, 0), scores, -std::numeric_limits<double>::infinity());
  scores.softmax(-1).matmul(qkv[2]).retrieve();
  cx.compile(cuda());
  report("attention_prefill_32x256_bf16", median_ms(cx, 3, 50));
}

// One training step of a GPT-2-small-shaped model (nn::Gpt: 12 layers of 768, 12 heads,
// vocabulary 50257, context 1024) on a batch of 8 x 1024 random tokens: forward pass,
// gradients and AdamW, products and activations in bf16 with f32 master weights. Prints
// the step's milliseconds, then tokens a second and the intermediates' peak in MiB, and
// the cold compile's seconds.
void train_gpt2_small() {
  const int64_t batch = 8, seq = 1024;
  const nn::GptConfig config{50257, 1024, 12, 12, 768, 1e-5, DType::BF16};
  Graph g;
  nn::Gpt model(g, "", config);
  const nn::NamedTensors params = model.named_parameters();
  std::vector<Tensor> weights;
  uint32_t seed = 20;
  for (const auto& [name, t] : params) {
    int64_t count = 1;
    for (const Expr& d : t.shape()) count *= d.eval();
    std::vector<float> values = random_floats(static_cast<size_t>(count), seed++);
    for (float& v : values) v *= 0.02f;
    Tensor(t).set(values);
    weights.push_back(t);
  }
  Tensor ids = g.named_tensor("ids", {batch, seq}, DType::I32);
  Tensor targets = g.named_tensor("targets", {batch, seq}, DType::I32);
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(static_cast<size_t>(batch * seq));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 50257);
  ids.set(tokens);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 50257);
  targets.set(tokens);
  Tensor loss =
      -model.forward(ids).log_softmax(-1).gather_axis(2, targets.unsqueeze(2)).mean({0, 1, 2});
  train::Optimizer opt =
      train::adamw(weights, train::gradients(loss, weights), train::constant_lr(1e-4));
  loss.retrieve();
  const auto start = std::chrono::steady_clock::now();
  g.compile(cuda());
  g.execute();  // the first run loads and searches kernels
  const double compile_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  opt.advance();
  const double ms = median_ms(g, 2, 10);
  report("train_gpt2_small_bf16_ms", ms);
  report("train_gpt2_small_bf16_tokens_per_s", static_cast<double>(batch * seq) / (ms / 1e3));
  report("train_gpt2_small_bf16_peak_mib",
         static_cast<double>(g.last_run_stats().peak_bytes) / (1 << 20));
  report("train_gpt2_small_bf16_compile_s", compile_s);
  report("train_gpt2_small_bf16_loss", loss.to_f32()[0]);
}

// An op over the rows of an [8192, 8192] input of type t.
void row_op(const char* name, DType t, const std::function<Tensor(Tensor)>& op) {
  const int64_t rows = 8192, cols = 8192;
  Graph cx;
  Tensor x = cx.named_tensor("x", {rows, cols}, t);
  x.set(random_floats(static_cast<size_t>(rows * cols), 4));
  op(x).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 20));
}

// Sums alone over few long rows: every element of a 16M f32 tensor (64 MB: a loss's or a
// gradient norm's total), and each of 64 rows of 1M f32 (256 MB).
void long_row_sum(int64_t rows, int64_t len, const char* name) {
  Graph cx;
  Tensor x = cx.named_tensor("x", {rows, len});
  x.set(random_floats(static_cast<size_t>(rows * len), 7));
  (rows == 1 ? x.reshape({len}).sum({0}) : x.sum({1})).retrieve();
  cx.compile(cuda());
  report(name, median_ms(cx, 3, 20));
}

// The GELU of a transformer block's up projection at batch 32: [8192, 4096] bf16, computed
// in f32 (the hlop's own precision) and rounded once.
void gelu_bf16() {
  const int64_t rows = 8192, cols = 4096;
  Graph cx;
  Tensor x = cx.named_tensor("x", {rows, cols}, DType::BF16);
  x.set_buffer(random_buffer(static_cast<size_t>(rows * cols), 6, DType::BF16));
  x.gelu().retrieve();
  cx.compile(cuda());
  report("gelu_bf16_8192x4096", median_ms(cx, 3, 20));
}

// A gated MLP's activation over a 4096-token prompt, SiLU(gate) * up: two [4096, 14336]
// bf16 inputs, one output, 352 MB moved.
void swiglu_bf16() {
  const int64_t rows = 4096, cols = 14336;
  Graph cx;
  Tensor gate = cx.named_tensor("gate", {rows, cols}, DType::BF16);
  Tensor up = cx.named_tensor("up", {rows, cols}, DType::BF16);
  gate.set_buffer(random_buffer(static_cast<size_t>(rows * cols), 11, DType::BF16));
  up.set_buffer(random_buffer(static_cast<size_t>(rows * cols), 12, DType::BF16));
  (gate.silu() * up).retrieve();
  cx.compile(cuda());
  report("swiglu_bf16_4096x14336", median_ms(cx, 3, 20));
}

// Host time per launch: 200 small softmaxes in a chain (one kernel each), each run timed
// on the wall clock, with CUDA-graph replay and without. Printed in microseconds.
void launch_overhead() {
  constexpr int kOps = 200;
  auto per_launch_us = [](bool graphs) {
    setenv("LUMINAL_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    Graph cx;
    Tensor x = cx.named_tensor("x", {8, 64});
    x.set(random_floats(8 * 64, 7));
    Tensor y = x;
    for (int i = 0; i < kOps; ++i) y = (y * 1.01).softmax(1);
    y.retrieve();
    cx.compile(cuda());
    for (int i = 0; i < 5; ++i) cx.execute();
    std::vector<double> t;
    for (int i = 0; i < 50; ++i) {
      const auto start = std::chrono::steady_clock::now();
      cx.execute();
      t.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2] / kOps;
  };
  report("launch_us_graph_replay", per_launch_us(true));
  report("launch_us_no_graph", per_launch_us(false));
  unsetenv("LUMINAL_CUDA_GRAPHS");
}

// Compile time of a 2-layer MLP (x W1^T, GELU, W2^T): cold, with an empty kernel cache,
// then warm, with the cache the cold compile filled. Printed in milliseconds.
void mlp_compile() {
  char dir[] = "/tmp/luminal-bench-cacheXXXXXX";
  if (!mkdtemp(dir)) return;
  setenv("LUMINAL_CACHE_DIR", dir, 1);
  auto compile_ms = [] {
    Graph cx;
    Tensor x = cx.named_tensor("x", {Expr::var("batch"), 1024});
    Tensor w1 = cx.named_tensor("w1", {4096, 1024});
    Tensor w2 = cx.named_tensor("w2", {1024, 4096});
    x.matmul(w1.permute({1, 0})).gelu().matmul(w2.permute({1, 0})).retrieve();
    const auto start = std::chrono::steady_clock::now();
    cx.compile(cuda());
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  };
  report("mlp2_compile_cold", compile_ms());
  report("mlp2_compile_warm", compile_ms());
}

}  // namespace

int main(int argc, char** argv) {
  std::string why;
  if (!cuda_available(&why)) {
    std::fprintf(stderr, "bench_cuda: no GPU: %s\n", why.c_str());
    return 2;
  }
  const std::string only = argc > 1 ? argv[1] : "";
  // A case runs where its name contains the filter: a whole name, or a part shared by a
  // group ("gemv", "attention_decode").
  auto want = [&](const char* c) { return only.empty() || std::strstr(c, only.c_str()); };
  if (want("mlp2_compile_cold") || want("mlp2_compile_warm")) mlp_compile();
  if (want("launch_us_graph_replay") || want("launch_us_no_graph")) launch_overhead();
  if (want("chain8_f32_256M")) elementwise_chain();
  if (want("gemm_f32_4096")) gemm(4096, DType::F32, "gemm_f32_4096");
  if (want("gemm_bf16_4096")) gemm(4096, DType::BF16, "gemm_bf16_4096");
  if (want("gemm_bf16_8192")) gemm(8192, DType::BF16, "gemm_bf16_8192");
  if (want("linear_residual_bf16_8192x4096x1024")) linear_residual();
  if (want("conv3x3_relu_bf16_32x64x56x56")) conv3x3();
  if (want("gemv_bf16_4096x14336")) gemv(4096, 14336, "gemv_bf16_4096x14336");
  if (want("gemv_bf16_14336x4096")) gemv(14336, 4096, "gemv_bf16_14336x4096");
  if (want("gemv_bf16_16_layers")) gemv_layers(8, "gemv_bf16_16_layers");
  if (want("qgemv_bf16_4096x14336")) qgemv(4096, 14336, "qgemv_bf16_4096x14336");
  if (want("qgemv_bf16_14336x4096")) qgemv(14336, 4096, "qgemv_bf16_14336x4096");
  if (want("qgemv_q4k_4096x14336"))
    qgemv_blocks(4096, 14336, GgmlType::Q4_K, "qgemv_q4k_4096x14336");
  if (want("qgemv_q4k_14336x4096"))
    qgemv_blocks(14336, 4096, GgmlType::Q4_K, "qgemv_q4k_14336x4096");
  if (want("qgemv_q5k_4096x14336"))
    qgemv_blocks(4096, 14336, GgmlType::Q5_K, "qgemv_q5k_4096x14336");
  if (want("qgemv_q6k_4096x14336"))
    qgemv_blocks(4096, 14336, GgmlType::Q6_K, "qgemv_q6k_4096x14336");
  if (want("qgemv_q8_0_4096x14336"))
    qgemv_blocks(4096, 14336, GgmlType::Q8_0, "qgemv_q8_0_4096x14336");
  if (want("top_k_1024_128256")) top_k_row(128256, 1024, "top_k_1024_128256");
  if (want("top_k_40_128256")) top_k_row(128256, 40, "top_k_40_128256");
  if (want("attention_decode_4k")) attention(1, 4096, "attention_decode_4k");
  if (want("attention_decode_32k")) attention(1, 32768, "attention_decode_32k");
  if (want("attention_decode_32k_bf16"))
    attention(1, 32768, "attention_decode_32k_bf16", DType::BF16);
  // Decode in bf16 over 1k to 64k cached positions: the time's fixed part and its rate.
  for (int64_t past = 1024; past <= 65536; past *= 2) {
    const std::string name = "attention_decode_sweep_bf16_" + std::to_string(past);
    if (want(name.c_str())) attention(1, past, name.c_str(), DType::BF16);
  }
  if (want("attention_decode_32k_bf16_16_layers"))
    attention_decode_layers(32768, 16, false, "attention_decode_32k_bf16_16_layers");
  if (want("attention_decode_4k_bf16_16_layers"))
    attention_decode_layers(4096, 16, false, "attention_decode_4k_bf16_16_layers");
  if (want("attention_decode_32k_bf16_16_layers_head_major"))
    attention_decode_layers(32768, 16, true, "attention_decode_32k_bf16_16_layers_head_major");
  if (want("attention_decode_4k_bf16_16_layers_head_major"))
    attention_decode_layers(4096, 16, true, "attention_decode_4k_bf16_16_layers_head_major");
  // Eight sequences of 4k: the bytes of one of 32k, a batch's caches read in one launch.
  if (want("attention_decode_4k_bf16_batch8_16_layers"))
    attention_decode_layers(4096, 16, false, "attention_decode_4k_bf16_batch8_16_layers", 8);
  if (!only.empty() && want("train_gpt2_small_bf16_ms")) train_gpt2_small();
  if (want("attention_prefill_4k")) attention(4096, 0, "attention_prefill_4k");
  if (want("attention_prefill_4k_bf16"))
    attention(4096, 0, "attention_prefill_4k_bf16", DType::BF16);
  if (want("attention_prefill_32x256_bf16")) attention_short_sequences();
  for (DType t : {DType::F32, DType::BF16}) {
    const std::string suffix = "_" + std::string(dtype_name(t)) + "_8192x8192";
    auto row = [&](const char* op, const std::function<Tensor(Tensor)>& f) {
      const std::string name = op + suffix;
      if (want(name.c_str())) row_op(name.c_str(), t, f);
    };
    row("softmax", [](Tensor x) { return x.softmax(1); });
    row("rmsnorm", [](Tensor x) { return x.rms_norm({1}, 1e-6); });
    row("layernorm", [](Tensor x) { return x.layer_norm({1}, 1e-5); });
  }
  if (want("sum_all_f32_16M")) long_row_sum(1, int64_t{16} << 20, "sum_all_f32_16M");
  if (want("sum_rows_f32_64x1M")) long_row_sum(64, int64_t{1} << 20, "sum_rows_f32_64x1M");
  if (want("gelu_bf16_8192x4096")) gelu_bf16();
  if (want("swiglu_bf16_4096x14336")) swiglu_bf16();
  return 0;
}
