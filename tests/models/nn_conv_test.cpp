// nn::Conv loads torch.nn.Conv1d / Conv2d state dicts and matches their outputs.
#include <gtest/gtest.h>

#include <cmath>

#include "luminal/luminal.hpp"
#include "luminal/models/safetensors.hpp"
#include "luminal/nn/conv.hpp"
#include "testing/expect_error.hpp"

namespace luminal::nn {
namespace {

struct Case {
  const char* name;
  int64_t in, out;
  std::vector<int64_t> kernel;
  ConvOptions options;
  bool bias;
};

class ConvModule : public ::testing::TestWithParam<std::tuple<Case, const char*>> {};

TEST_P(ConvModule, MatchesTorch) {
  const auto& [c, backend] = GetParam();
  const models::SafetensorsFile file(std::string(LUMINAL_FIXTURE_DIR) + "/nn/conv.safetensors");
  const std::string prefix = std::string(c.name) + ".";
  const Buffer input = file.read(prefix + "input"), want = file.read(prefix + "output");

  Graph g;
  Conv conv(g, c.name, c.in, c.out, c.kernel, c.options, c.bias);
  const std::vector<int64_t> in_shape = file.tensor(prefix + "input").shape;
  Tensor x = g.named_tensor("x", std::vector<Expr>(in_shape.begin(), in_shape.end()), DType::F32);
  Tensor y = conv.forward(x);
  y.retrieve();
  load_parameters(
      conv,
      [&](const std::string& name, const std::vector<int64_t>&) -> std::optional<Buffer> {
        return file.has(name) ? std::optional<Buffer>(file.read(name)) : std::nullopt;
      },
      prefix);
  if (std::string(backend) == "cpu")
    g.compile(cpu());
  else
    g.compile(reference());
  x.set_buffer(input);
  g.execute();

  const std::vector<float> got = y.to_f32(), w = want.to_f32();
  ASSERT_EQ(got.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i)
    ASSERT_NEAR(got[i], w[i], 1e-5f * (1 + std::fabs(w[i]))) << i;
}

INSTANTIATE_TEST_SUITE_P(
    Torch, ConvModule,
    ::testing::Combine(
        ::testing::Values(
            Case{"conv1d", 4, 6, {3}, {.stride = 2, .padding = 1}, true},
            Case{"conv2d_grouped", 4, 6, {3, 3}, {.stride = 2, .padding = 1, .groups = 2}, true},
            Case{"conv2d_dilated", 3, 5, {2, 2}, {.dilation = 2}, false}),
        ::testing::Values("reference", "cpu")),
    [](const auto& info) {
      return std::string(std::get<0>(info.param).name) + "_" + std::get<1>(info.param);
    });

TEST(ConvModule, BadShapesAreClearErrors) {
  Graph g;
  testing::expect_error([&] { Conv(g, "c", 3, 4, {3}, {.groups = 2}); }, {"c:", "groups"});
  testing::expect_error([&] { Conv(g, "c", 3, 4, {3, 3, 3}); }, {"c:", "kernel"});
  testing::expect_error([&] { Conv(g, "c", 3, 4, {0}); }, {"c:", "positive"});
}

}  // namespace
}  // namespace luminal::nn
