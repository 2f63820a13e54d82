// TopK: the positions of the k largest values along the last axis (top_k in tensor.hpp),
// as an op of its own. Sampling a token from the k most likely asks for k ids, not a
// sort of the vocabulary; a GPU backend picks them where the logits lie, so a sampled
// token copies k ids back instead of every logit.
#pragma once

#include <cstdint>

#include "luminal/custom_op.hpp"

namespace luminal {

class TopKOp final : public CustomOp {
 public:
  explicit TopKOp(int64_t k) : k_(k) {}
  int64_t k() const { return k_; }
  std::string name() const override { return "TopK(" + std::to_string(k_) + ")"; }
  Buffer run(const std::vector<Buffer>& inputs, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int64_t>& out_shape, DType out_dtype) const override;

 private:
  int64_t k_;
};

}  // namespace luminal
