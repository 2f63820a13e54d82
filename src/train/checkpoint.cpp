// Training checkpoints (see luminal/train/checkpoint.hpp).
#include "luminal/train/checkpoint.hpp"

#include <map>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"
#include "luminal/models/safetensors.hpp"

namespace luminal::train {
namespace {

constexpr const char* kRunsKey = "luminal.train.runs";

// The concrete shape of a carried value (its node's).
std::vector<int64_t> dims_of(const Tensor& t) {
  std::vector<int64_t> out;
  for (const Expr& d : t.graph().node(t.id()).shape) out.push_back(simplify(d).eval());
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const Optimizer& opt) {
  std::vector<Buffer> held;  // host copies of values that live on a GPU
  held.reserve(opt.state().size());
  std::vector<models::NamedTensor> tensors;
  for (const auto& [name, t] : opt.state()) {
    const Graph& g = t.graph();
    const Buffer* data = g.data(t.id());
    if (!data) {
      const DeviceData* on_device = g.device_data(t.id());
      LUM_CHECK(on_device) << "save_checkpoint: " << name << " holds no value";
      held.push_back(on_device->to_host());
      data = &held.back();
    }
    tensors.push_back({name, dims_of(t), data});
  }
  models::save_safetensors(path, tensors, {{kRunsKey, std::to_string(opt.runs())}});
}

void load_checkpoint(const std::string& path, Optimizer& opt) {
  const models::SafetensorsFile file(path);
  const auto runs_text = file.metadata().find(kRunsKey);
  LUM_CHECK(runs_text != file.metadata().end())
      << "load_checkpoint: " << path << " has no run count (" << kRunsKey
      << "): not a training checkpoint";
  // Every tensor is checked before any is set.
  std::vector<Buffer> values;
  for (const auto& [name, t] : opt.state()) {
    LUM_CHECK(file.has(name)) << "load_checkpoint: " << path << " lacks " << name;
    const std::vector<int64_t> want = dims_of(t);
    const auto& stored = file.tensor(name);
    LUM_CHECK(stored.shape == want)
        << "load_checkpoint: " << name << " in " << path << " has shape "
        << to_string(std::vector<Expr>(stored.shape.begin(), stored.shape.end()))
        << ", the model's is " << to_string(std::vector<Expr>(want.begin(), want.end()));
    LUM_CHECK(is_float(stored.dtype))
        << "load_checkpoint: " << name << " in " << path << " is " << dtype_name(stored.dtype);
    Buffer data = file.read(name);
    if (data.dtype() != t.dtype()) data = Buffer::from_doubles(data.to_f64(), t.dtype());
    values.push_back(std::move(data));
  }
  int64_t runs = 0;
  try {
    runs = std::stoll(runs_text->second);
  } catch (const std::exception&) {
    LUM_CHECK(false) << "load_checkpoint: " << path << " has a malformed run count '"
                     << runs_text->second << "'";
  }
  size_t i = 0;
  for (const auto& [name, t] : opt.state()) Tensor(t).set_buffer(std::move(values[i++]));
  opt.resume(runs);
}

}  // namespace luminal::train
