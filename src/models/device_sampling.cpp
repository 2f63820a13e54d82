#include "models/device_sampling.hpp"

#include <algorithm>

#include "luminal/error.hpp"
#include "luminal/graph.hpp"

namespace luminal::models {

DeviceSampler::DeviceSampler(const Tensor& logits, int64_t vocab, int64_t most)
    : vocab_(vocab), most_(std::min(most, vocab)) {
  Graph& g = logits.graph();
  uniforms_ = g.named_tensor("sampler.uniforms", {Expr("draws")});
  options_ = g.named_tensor("sampler.options", {3});  // 1 / temperature, top k, top p
  const Tensor row = logits.reshape({vocab});
  const Tensor ids = top_k(row, most_);
  const Tensor values = row.gather(ids).cast(DType::F32);
  const Tensor inv_t = options_.slice(0, 0, 1), k = options_.slice(0, 1, 2),
               p = options_.slice(0, 2, 3);
  // Weights relative to the most likely, none past the top k.
  const Tensor rank = g.iota(Expr("z"), {most_}, DType::F32);
  const Tensor weights = where(lt(rank, k), ((values - values.slice(0, 0, 1)) * inv_t).exp(), 0.0);
  const Tensor reach = weights.cumsum(0);
  // The nucleus: the shortest prefix whose share reaches top p.
  const Tensor total = reach.slice(0, most_ - 1, most_);
  const Tensor kept = lt(reach, p * total).cast(DType::F32).sum({0}, true);
  const Tensor kept_total = reach.gather(kept.cast(DType::I32));
  const Tensor u = uniforms_.gather(g.iota(Expr("draw"), {1}, DType::I32));
  // The first candidate whose reach is not below u times the nucleus' weight.
  const Tensor pick = lt(reach, u * kept_total).cast(DType::F32).sum({0}, true);
  token = ids.gather(pick.cast(DType::I32));
}

bool DeviceSampler::follows(const SamplingOptions& opts) const {
  return opts.temperature > 0 && opts.top_k > 0 && opts.top_k <= most_ && opts.top_k < vocab_;
}

void DeviceSampler::set_draws(const SamplingOptions& opts, int64_t count, uint64_t& rng) const {
  LUM_CHECK(follows(opts)) << "internal: a device draw for options it does not follow";
  std::vector<float> u(static_cast<size_t>(count));
  for (float& x : u) x = static_cast<float>(uniform_draw(rng));
  Graph& g = uniforms_.graph();
  g.set_dim("draws", count);
  Tensor(uniforms_).set(u);
  Tensor(options_).set(std::vector<float>{static_cast<float>(1.0 / opts.temperature),
                                          static_cast<float>(opts.top_k),
                                          static_cast<float>(opts.top_p)});
}

}  // namespace luminal::models
