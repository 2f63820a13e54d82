// Trains a classifier of 8x8 handwritten digits (scikit-learn's bundled set, exported by
// export_digits.py) with luminal: the forward pass, its gradients (train::gradients) and
// an Adam step compile into one executable, run once per batch.
//
//   python3 examples/train_digits/export_digits.py digits.safetensors
//   build/examples/train_digits digits.safetensors --model cnn
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>

#include "luminal/luminal.hpp"
#include "luminal/models/safetensors.hpp"
#include "luminal/nn/conv.hpp"
#include "luminal/nn/layers.hpp"
#include "luminal/train/autograd.hpp"
#include "luminal/train/optimizer.hpp"
#include "luminal/train/progress.hpp"

using namespace luminal;

namespace {

constexpr const char* kUsage =
    "usage: train_digits DATA.safetensors [--model mlp|cnn] [--epochs N] [--batch N]\n"
    "                    [--lr RATE] [--seed N] [--device cpu|cuda]\n"
    "Trains a digit classifier on 80% of the images and prints its accuracy on the rest.\n"
    "DATA comes from examples/train_digits/export_digits.py.\n";

struct Options {
  std::string data, model = "mlp", device = "cpu";
  int64_t epochs = 0, batch = 64;
  double lr = 0;
  uint64_t seed = 0;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "train_digits: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) fail(arg + " needs a value");
      return argv[++i];
    };
    try {
      if (arg == "-h" || arg == "--help") {
        std::fputs(kUsage, stdout);
        std::exit(0);
      } else if (arg == "--model") {
        o.model = value();
      } else if (arg == "--epochs") {
        o.epochs = std::stoll(value());
      } else if (arg == "--batch") {
        o.batch = std::stoll(value());
      } else if (arg == "--lr") {
        o.lr = std::stod(value());
      } else if (arg == "--seed") {
        o.seed = std::stoull(value());
      } else if (arg == "--device") {
        o.device = value();
      } else if (!arg.empty() && arg[0] == '-') {
        fail("unknown option " + arg);
      } else if (o.data.empty()) {
        o.data = arg;
      } else {
        fail("more than one data file");
      }
    } catch (const std::logic_error&) {
      fail("bad value for " + arg);
    }
  }
  if (o.data.empty()) fail("no data file");
  if (o.model != "mlp" && o.model != "cnn") fail("--model is mlp or cnn, not " + o.model);
  if (o.device != "cpu" && o.device != "cuda") fail("--device is cpu or cuda, not " + o.device);
  if (o.batch < 1) fail("--batch must be at least 1");
  if (o.epochs < 0) fail("--epochs must be at least 1");
  if (o.epochs == 0) o.epochs = o.model == "mlp" ? 30 : 20;
  if (o.lr == 0) o.lr = o.model == "mlp" ? 3e-3 : 5e-3;
  return o;
}

// The two classifiers over [batch, 64] pixels in [0, 1].
struct Classifier {
  std::optional<nn::Linear> fc1, fc2;
  std::optional<nn::Conv> conv1, conv2;

  Classifier(Graph& g, const std::string& kind) {
    if (kind == "mlp") {
      fc1.emplace(g, "fc1", 64, 128, true);
      fc2.emplace(g, "fc2", 128, 10, true);
    } else {
      conv1.emplace(g, "conv1", 1, 16, std::vector<int64_t>{3, 3}, ConvOptions{.padding = 1});
      conv2.emplace(g, "conv2", 16, 32, std::vector<int64_t>{3, 3}, ConvOptions{.padding = 1});
      fc2.emplace(g, "fc", 32 * 2 * 2, 10, true);
    }
  }
  Tensor logits(const Tensor& pixels) const {
    if (fc1) return fc2->forward(fc1->forward(pixels).relu());
    const Expr n = pixels.dim(0);
    Tensor x = pixels.reshape({n, 1, 8, 8});
    x = max_pool2d(conv1->forward(x).relu(), {.kernel = 2});  // [n, 16, 4, 4]
    x = max_pool2d(conv2->forward(x).relu(), {.kernel = 2});  // [n, 32, 2, 2]
    return fc2->forward(x.reshape({n, 32 * 2 * 2}));
  }
  nn::NamedTensors parameters() const {
    nn::NamedTensors out;
    for (const nn::Module* m : std::initializer_list<const nn::Module*>{
             fc1 ? &*fc1 : nullptr, conv1 ? &*conv1 : nullptr, conv2 ? &*conv2 : nullptr, &*fc2})
      if (m) {
        auto p = m->named_parameters();
        out.insert(out.end(), p.begin(), p.end());
      }
    return out;
  }
};

// torch.nn's default initialisation: weights and biases uniform in +-1/sqrt(fan_in).
void initialise(const nn::NamedTensors& params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  int64_t fan_in = 1;
  for (const auto& [name, t] : params) {
    std::vector<int64_t> dims;
    for (const Expr& d : t.shape()) dims.push_back(d.eval());
    if (dims.size() > 1)
      fan_in = std::accumulate(dims.begin() + 1, dims.end(), int64_t{1}, std::multiplies<>());
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    std::uniform_real_distribution<float> u(static_cast<float>(-bound), static_cast<float>(bound));
    std::vector<float> values(static_cast<size_t>(
        std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>())));
    for (float& v : values) v = u(rng);
    Tensor(t).set(values);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    const models::SafetensorsFile file(o.data);
    const std::vector<double> pixels = file.read("images").to_f64();
    const std::vector<int64_t> labels = file.read("labels").to_i64();
    const size_t count = labels.size();
    LUM_CHECK(pixels.size() == count * 64)
        << o.data << ": expected 64 pixels an image, " << count << " labels";
    // A fixed shuffle, then 80% to train on and the rest to test.
    std::vector<size_t> order(count);
    std::iota(order.begin(), order.end(), size_t{0});
    std::shuffle(order.begin(), order.end(), std::mt19937_64(o.seed));
    const size_t train_count = count * 4 / 5;
    auto batch_of = [&](size_t first, size_t n, std::vector<float>& x, std::vector<int64_t>& y) {
      x.resize(n * 64);
      y.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const size_t k = order[first + i];
        for (size_t p = 0; p < 64; ++p)
          x[i * 64 + p] = static_cast<float>(pixels[k * 64 + p] / 16.0);
        y[i] = labels[k];
      }
    };
    const std::unique_ptr<Backend> backend = o.device == "cuda"
                                                 ? std::unique_ptr<Backend>(new CudaBackend())
                                                 : std::unique_ptr<Backend>(new CpuBackend());

    // One training step: loss, gradients, Adam.
    Graph g;
    Classifier model(g, o.model);
    const nn::NamedTensors params = model.parameters();
    initialise(params, o.seed + 1);
    Tensor x = g.named_tensor("pixels", {o.batch, 64});
    Tensor y = g.named_tensor("labels", {o.batch}, DType::I64);
    Tensor loss = -model.logits(x).log_softmax(-1).gather_axis(1, y.unsqueeze(1)).mean({0, 1});
    std::vector<Tensor> weights;
    for (const auto& [name, t] : params) weights.push_back(t);
    const int64_t steps_per_epoch = static_cast<int64_t>(train_count) / o.batch;
    if (steps_per_epoch == 0)
      fail("--batch " + std::to_string(o.batch) + " is more than the " +
           std::to_string(train_count) + " training images");
    // Warm-up for an epoch, or a tenth of a shorter run.
    const int64_t steps = o.epochs * steps_per_epoch;
    train::Optimizer opt =
        train::adam(weights, train::gradients(loss, weights),
                    train::warmup_cosine(o.lr, std::min(steps_per_epoch, steps / 10), steps));
    loss.retrieve();
    const auto start = std::chrono::steady_clock::now();
    g.compile(*backend);

    // The test set's logits, with the trained weights.
    Graph eval;
    Classifier tested(eval, o.model);
    const size_t test_count = count - train_count;
    Tensor test_x = eval.named_tensor("pixels", {static_cast<int64_t>(test_count), 64});
    Tensor test_logits = tested.logits(test_x).retrieve();
    eval.compile(*backend);
    std::fprintf(stderr, "compiled in %.1f s\n",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

    std::vector<float> xb;
    std::vector<int64_t> yb;
    train::ProgressBar bar(o.epochs * steps_per_epoch, o.batch);
    std::mt19937_64 shuffle(o.seed + 2);
    for (int64_t epoch = 0; epoch < o.epochs; ++epoch) {
      std::shuffle(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(train_count),
                   shuffle);
      for (int64_t s = 0; s < steps_per_epoch; ++s) {
        batch_of(static_cast<size_t>(s * o.batch), static_cast<size_t>(o.batch), xb, yb);
        x.set(xb);
        y.set(yb);
        g.execute();
        opt.advance();
        bar.step(loss.to_f32()[0]);
      }
    }
    bar.finish();

    const nn::NamedTensors trained = tested.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      const NodeId id = params[i].second.id();
      Tensor(trained[i].second).set_buffer(g.data(id) ? *g.data(id) : g.device_data(id)->to_host());
    }
    batch_of(train_count, test_count, xb, yb);
    test_x.set(xb);
    eval.execute();
    const std::vector<float> logits = test_logits.to_f32();
    size_t right = 0;
    for (size_t i = 0; i < test_count; ++i) {
      const float* row = logits.data() + i * 10;
      right += static_cast<int64_t>(std::max_element(row, row + 10) - row) == yb[i];
    }
    std::printf("test accuracy: %.4f (%zu of %zu), %s, %lld epochs, %.1f s\n",
                static_cast<double>(right) / static_cast<double>(test_count), right, test_count,
                o.model.c_str(), static_cast<long long>(o.epochs),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } catch (const Error& e) {
    std::fprintf(stderr, "train_digits: %s\n", e.what());
    return 1;
  }
  return 0;
}
