// BERT encoders (config.json + model.safetensors, Hugging Face names) and the sentence
// embedding of sentence-transformers models: mean pooling over tokens, optionally
// L2-normalised.
#pragma once

#include <string>
#include <vector>

#include "luminal/nn/layers.hpp"

namespace luminal::models {

struct BertConfig {
  int64_t vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, max_positions = 512,
          type_vocab = 2;
  double eps = 1e-12;
  static BertConfig from_hf_json(const std::string& path);
};

class Bert final : public nn::Module {
 public:
  Bert(Graph& g, const BertConfig& c);
  /// Hidden states [seq, hidden] for token ids [seq] (one sentence, token type 0).
  Tensor forward(const Tensor& ids, Expr seq = "seq") const;
  /// Mean-pooled sentence embedding [hidden], L2-normalised when `normalize`.
  Tensor embed(const Tensor& ids, bool normalize = true, Expr seq = "seq") const;
  void parameters(const std::string& prefix, nn::NamedTensors& out) const override;

  BertConfig config;
  nn::Embedding words, positions, types;
  nn::LayerNorm embed_norm;
  struct Layer {
    nn::Linear q, k, v, attn_out;
    nn::LayerNorm attn_norm;
    nn::Linear up, down;
    nn::LayerNorm out_norm;
  };
  std::vector<Layer> layers;
};

}  // namespace luminal::models
