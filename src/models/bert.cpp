// The BERT encoder (post-LayerNorm, bidirectional attention, GELU feed-forward).
#include "luminal/models/bert.hpp"

#include <cmath>

#include "luminal/error.hpp"
#include "models/json.hpp"

namespace luminal::models {

BertConfig BertConfig::from_hf_json(const std::string& path) {
  const Json j = read_json_object(path, "model config");
  const auto get = [&](const char* key) { return int_field(j, key, path); };
  BertConfig c;
  c.vocab = get("vocab_size");
  c.hidden = get("hidden_size");
  c.intermediate = get("intermediate_size");
  c.layers = get("num_hidden_layers");
  c.heads = get("num_attention_heads");
  c.max_positions = get("max_position_embeddings");
  c.type_vocab = get("type_vocab_size");
  c.eps = number_field(j, "layer_norm_eps", path, c.eps);
  const Json* act = j.find("hidden_act");
  LUM_CHECK(!act || (act->is_string() && act->string() == "gelu"))
      << path << ": only hidden_act \"gelu\" is supported";
  return c;
}

Bert::Bert(Graph& g, const BertConfig& c)
    : config(c),
      words(g, "embeddings.word_embeddings", c.vocab, c.hidden),
      positions(g, "embeddings.position_embeddings", c.max_positions, c.hidden),
      types(g, "embeddings.token_type_embeddings", c.type_vocab, c.hidden),
      embed_norm(g, "embeddings.LayerNorm", c.hidden, c.eps) {
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i);
    layers.push_back(Layer{nn::Linear(g, p + ".attention.self.query", c.hidden, c.hidden, true),
                           nn::Linear(g, p + ".attention.self.key", c.hidden, c.hidden, true),
                           nn::Linear(g, p + ".attention.self.value", c.hidden, c.hidden, true),
                           nn::Linear(g, p + ".attention.output.dense", c.hidden, c.hidden, true),
                           nn::LayerNorm(g, p + ".attention.output.LayerNorm", c.hidden, c.eps),
                           nn::Linear(g, p + ".intermediate.dense", c.hidden, c.intermediate, true),
                           nn::Linear(g, p + ".output.dense", c.intermediate, c.hidden, true),
                           nn::LayerNorm(g, p + ".output.LayerNorm", c.hidden, c.eps)});
  }
}

Tensor Bert::forward(const Tensor& ids, Expr seq) const {
  const int64_t heads = config.heads, hd = config.hidden / config.heads;
  Tensor h = words.forward(ids) + positions.weight.slice(0, 0, seq) + types.weight.slice(0, 0, 1);
  h = embed_norm.forward(h);
  for (const Layer& l : layers) {
    auto split = [&](const Tensor& t) { return t.reshape({seq, heads, hd}).permute({1, 0, 2}); };
    const Tensor q = split(l.q.forward(h)), k = split(l.k.forward(h)), v = split(l.v.forward(h));
    const Tensor probs =
        (q.matmul(k.transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(hd)))).softmax(-1);
    const Tensor ctx = probs.matmul(v).permute({1, 0, 2}).reshape({seq, config.hidden});
    h = l.attn_norm.forward(h + l.attn_out.forward(ctx));
    h = l.out_norm.forward(h + l.down.forward(l.up.forward(h).gelu()));
  }
  return h;
}

Tensor Bert::embed(const Tensor& ids, bool normalize, Expr seq) const {
  const Tensor pooled = forward(ids, seq).mean({0});
  return normalize ? pooled.normalize(2.0, -1) : pooled;
}

void Bert::parameters(const std::string& prefix, nn::NamedTensors& out) const {
  words.parameters(prefix + "embeddings.word_embeddings.", out);
  positions.parameters(prefix + "embeddings.position_embeddings.", out);
  types.parameters(prefix + "embeddings.token_type_embeddings.", out);
  embed_norm.parameters(prefix + "embeddings.LayerNorm.", out);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = prefix + "encoder.layer." + std::to_string(i) + ".";
    const Layer& l = layers[i];
    l.q.parameters(p + "attention.self.query.", out);
    l.k.parameters(p + "attention.self.key.", out);
    l.v.parameters(p + "attention.self.value.", out);
    l.attn_out.parameters(p + "attention.output.dense.", out);
    l.attn_norm.parameters(p + "attention.output.LayerNorm.", out);
    l.up.parameters(p + "intermediate.dense.", out);
    l.down.parameters(p + "output.dense.", out);
    l.out_norm.parameters(p + "output.LayerNorm.", out);
  }
}

}  // namespace luminal::models
