// Convolution layers.
#include "luminal/nn/conv.hpp"

#include "luminal/error.hpp"

namespace luminal::nn {

Conv::Conv(Graph& g, const std::string& name, int64_t in, int64_t out, std::vector<int64_t> kernel,
           ConvOptions options_, bool with_bias)
    : options(options_) {
  LUM_CHECK(kernel.size() == 1 || kernel.size() == 2)
      << name << ": convolutions take one or two kernel sizes, got " << kernel.size();
  LUM_CHECK(options.groups > 0 && in % options.groups == 0 && out % options.groups == 0)
      << name << ": " << in << " input and " << out << " output channels do not split into "
      << options.groups << " groups";
  std::vector<int64_t> shape{out, in / options.groups};
  for (int64_t k : kernel) {
    LUM_CHECK(k > 0) << name << ": kernel sizes must be positive, got " << k;
    shape.push_back(k);
  }
  weight = parameter(g, name + ".weight", shape);
  if (with_bias) bias = parameter(g, name + ".bias", {out});
}

Tensor Conv::forward(const Tensor& x) const {
  return weight.rank() == 3 ? conv1d(x, weight, bias, options) : conv2d(x, weight, bias, options);
}

void Conv::parameters(const std::string& prefix, NamedTensors& out) const {
  out.emplace_back(prefix + "weight", weight);
  if (bias.graph_ptr()) out.emplace_back(prefix + "bias", bias);
}

}  // namespace luminal::nn
