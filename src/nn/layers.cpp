// Basic layers.
#include "luminal/nn/layers.hpp"

#include "luminal/error.hpp"
#include "luminal/quant.hpp"

namespace luminal::nn {

Tensor parameter(Graph& g, const std::string& name, const std::vector<int64_t>& shape,
                 DType dtype) {
  return g.named_tensor(name, std::vector<Expr>(shape.begin(), shape.end()), dtype);
}

void load_parameters(const Module& m, const WeightSource& source, const std::string& prefix) {
  for (auto& [name, t] : m.named_parameters(prefix)) {
    std::vector<int64_t> shape;
    for (Expr d : t.shape()) shape.push_back(*d.as_const());
    std::optional<Buffer> data = source(name, shape);
    LUM_CHECK(data) << "missing weight tensor '" << name << "' (expected shape "
                    << to_string(t.shape()) << ")";
    size_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<size_t>(d);
    LUM_CHECK(data->numel() == numel)
        << "weight tensor '" << name << "' has " << data->numel()
        << " elements, the model expects shape " << to_string(t.shape());
    Tensor p = t;
    // Half-precision matrices (and stacks of them: a mixture's experts) of an f32
    // parameter stay as they are in the file, as block storage of one value per block:
    // products read them directly (half the bytes of f32, and no widened copy in memory);
    // any other read widens each value it loads.
    const bool half = data->dtype() == DType::F16 || data->dtype() == DType::BF16;
    if (half && shape.size() >= 2 && t.dtype() == DType::F32) {
      p.set_quantized(*ggml_type_of(data->dtype()), std::move(*data).into_bytes());
      continue;
    }
    p.set_buffer(std::move(*data));
  }
}

Linear::Linear(Graph& g, const std::string& name, int64_t in, int64_t out, bool with_bias)
    : weight(parameter(g, name + ".weight", {out, in})) {
  if (with_bias) bias = parameter(g, name + ".bias", {out});
}

Tensor Linear::forward(const Tensor& x) const {
  Tensor y = x.matmul(weight.transpose(0, 1));
  return bias.graph_ptr() ? y + bias : y;
}

void Linear::parameters(const std::string& prefix, NamedTensors& out) const {
  out.emplace_back(prefix + "weight", weight);
  if (bias.graph_ptr()) out.emplace_back(prefix + "bias", bias);
}

Embedding::Embedding(Graph& g, const std::string& name, int64_t vocab, int64_t dim)
    : weight(parameter(g, name + ".weight", {vocab, dim})) {}

Tensor Embedding::forward(const Tensor& ids) const {
  std::vector<Expr> shape = ids.shape();
  shape.push_back(weight.dim(1));
  return weight.index_select(0, ids.reshape({-1})).reshape(shape);
}

void Embedding::parameters(const std::string& prefix, NamedTensors& out) const {
  out.emplace_back(prefix + "weight", weight);
}

RMSNorm::RMSNorm(Graph& g, const std::string& name, int64_t dim, double eps_, bool unit_offset_)
    : weight(parameter(g, name + ".weight", {dim})), eps(eps_), unit_offset(unit_offset_) {}

Tensor RMSNorm::forward(const Tensor& x) const {
  const Tensor w = unit_offset ? weight + 1.0 : weight;
  return x.rms_norm({-1}, eps) * w;
}

void RMSNorm::parameters(const std::string& prefix, NamedTensors& out) const {
  out.emplace_back(prefix + "weight", weight);
}

LayerNorm::LayerNorm(Graph& g, const std::string& name, int64_t dim, double eps_, bool with_bias)
    : weight(parameter(g, name + ".weight", {dim})), eps(eps_) {
  if (with_bias) bias = parameter(g, name + ".bias", {dim});
}

Tensor LayerNorm::forward(const Tensor& x) const {
  Tensor y = x.layer_norm({-1}, eps) * weight;
  return bias.graph_ptr() ? y + bias : y;
}

void LayerNorm::parameters(const std::string& prefix, NamedTensors& out) const {
  out.emplace_back(prefix + "weight", weight);
  if (bias.graph_ptr()) out.emplace_back(prefix + "bias", bias);
}

Tensor activate(const Tensor& x, Activation a) {
  switch (a) {
    case Activation::SiLU:
      return x.silu();
    case Activation::GeluTanh:
      return x.gelu_tanh();
    case Activation::Gelu:
      return x.gelu();
    case Activation::Relu:
      return x.relu();
  }
  return x;
}

GatedMLP::GatedMLP(Graph& g, const std::string& name, int64_t dim, int64_t hidden, Activation act_)
    : gate(g, name + ".gate_proj", dim, hidden, false),
      up(g, name + ".up_proj", dim, hidden, false),
      down(g, name + ".down_proj", hidden, dim, false),
      act(act_) {}

Tensor GatedMLP::forward(const Tensor& x) const {
  return down.forward(activate(gate.forward(x), act) * up.forward(x));
}

void GatedMLP::parameters(const std::string& prefix, NamedTensors& out) const {
  gate.parameters(prefix + "gate_proj.", out);
  up.parameters(prefix + "up_proj.", out);
  down.parameters(prefix + "down_proj.", out);
}

}  // namespace luminal::nn
