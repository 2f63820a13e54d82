// Modules: objects that own named parameters (graph inputs) and build graph nodes in
// `forward`. Parameters are traversed by name for loading and saving.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "luminal/tensor.hpp"

namespace luminal::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  /// Appends every parameter as (prefix + name, tensor).
  virtual void parameters(const std::string& prefix, NamedTensors& out) const = 0;
  NamedTensors named_parameters(const std::string& prefix = "") const {
    NamedTensors out;
    parameters(prefix, out);
    return out;
  }
};

/// Supplies a tensor's data by name: nullopt if absent. Loaders (safetensors, GGUF)
/// provide one; the data is converted to the parameter's dtype.
using WeightSource = std::function<std::optional<Buffer>(const std::string& name,
                                                         const std::vector<int64_t>& shape)>;

/// Sets every parameter of `m` from `source`. A missing tensor or a shape mismatch
/// raises luminal::Error naming the tensor. F16 and BF16 matrices for f32 parameters are
/// kept as they are (Tensor::set_quantized with the ggml F16 / BF16 type) rather than
/// widened: matrix products read them directly.
void load_parameters(const Module& m, const WeightSource& source, const std::string& prefix = "");

/// A new parameter: an input named `name` of a concrete shape.
Tensor parameter(Graph& g, const std::string& name, const std::vector<int64_t>& shape,
                 DType dtype = DType::F32);

}  // namespace luminal::nn
