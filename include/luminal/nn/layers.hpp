// Basic layers with Hugging Face parameter names and layouts.
#pragma once

#include "luminal/nn/module.hpp"

namespace luminal::nn {

/// y = x W^T (+ b); weight [out, in] as in torch.nn.Linear.
class Linear final : public Module {
 public:
  Linear(Graph& g, const std::string& name, int64_t in, int64_t out, bool bias);
  Tensor forward(const Tensor& x) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;
  Tensor weight, bias;
};

/// Rows of a [vocab, dim] table for integer ids of any shape.
class Embedding final : public Module {
 public:
  Embedding(Graph& g, const std::string& name, int64_t vocab, int64_t dim);
  Tensor forward(const Tensor& ids) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;
  Tensor weight;
};

/// x / rms(x) * w over the last dim; `unit_offset` scales by (1 + w), as Gemma does.
class RMSNorm final : public Module {
 public:
  RMSNorm(Graph& g, const std::string& name, int64_t dim, double eps, bool unit_offset = false);
  Tensor forward(const Tensor& x) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;
  Tensor weight;
  double eps;
  bool unit_offset;
};

/// torch.nn.LayerNorm over the last dim, with weight and optional bias.
class LayerNorm final : public Module {
 public:
  LayerNorm(Graph& g, const std::string& name, int64_t dim, double eps, bool bias = true);
  Tensor forward(const Tensor& x) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;
  Tensor weight, bias;
  double eps;
};

enum class Activation { SiLU, GeluTanh, Gelu, Relu };
Tensor activate(const Tensor& x, Activation a);

/// down(act(gate(x)) * up(x)): SwiGLU (SiLU) and GeGLU (GELU) feed-forward blocks.
class GatedMLP final : public Module {
 public:
  GatedMLP(Graph& g, const std::string& name, int64_t dim, int64_t hidden, Activation act);
  Tensor forward(const Tensor& x) const;
  void parameters(const std::string& prefix, NamedTensors& out) const override;
  Linear gate, up, down;
  Activation act;
};

}  // namespace luminal::nn
