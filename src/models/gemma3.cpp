// Gemma 3 text decoder from GGUF.
#include "luminal/models/gemma3.hpp"

#include <cmath>
#include <regex>
#include <set>

#include "luminal/error.hpp"

namespace luminal::models {

Gemma3Config Gemma3Config::from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  LUM_CHECK(arch == "gemma3") << f.path() << ": architecture '" << arch << "' is not gemma3";
  Gemma3Config c;
  c.hidden = f.get_int("gemma3.embedding_length");
  c.intermediate = f.get_int("gemma3.feed_forward_length");
  c.layers = f.get_int("gemma3.block_count");
  c.heads = f.get_int("gemma3.attention.head_count");
  c.kv_heads = f.get_int("gemma3.attention.head_count_kv");
  c.head_dim = f.find("gemma3.attention.key_length") ? f.get_int("gemma3.attention.key_length")
                                                     : c.hidden / c.heads;
  c.rms_eps = f.get_float("gemma3.attention.layer_norm_rms_epsilon");
  if (f.find("gemma3.rope.freq_base")) c.rope_global = f.get_float("gemma3.rope.freq_base");
  if (f.find("gemma3.attention.sliding_window"))
    c.sliding_window = f.get_int("gemma3.attention.sliding_window");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  LUM_CHECK(tokens && std::holds_alternative<std::shared_ptr<GgufArray>>(tokens->v))
      << f.path() << ": no tokenizer.ggml.tokens vocabulary";
  c.vocab = static_cast<int64_t>(std::get<std::shared_ptr<GgufArray>>(tokens->v)->size());
  return c;
}

Gemma3::Gemma3(Graph& g, const Gemma3Config& c)
    : config(c),
      embed(g, "model.embed_tokens", c.vocab, c.hidden),
      norm(g, "model.norm", c.hidden, c.rms_eps) {
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    const bool global = c.is_global(i);
    nn::Attention attn(g, p + ".self_attn", c.hidden, c.heads, c.kv_heads, c.head_dim, false,
                       nn::RopeConfig{global ? c.rope_global : c.rope_local, true, 1.0},
                       global ? 0 : c.sliding_window);
    attn.enable_qk_norm(g, p + ".self_attn", c.rms_eps, false);
    layers.push_back(Layer{
        nn::RMSNorm(g, p + ".input_layernorm", c.hidden, c.rms_eps),
        nn::RMSNorm(g, p + ".post_attention_layernorm", c.hidden, c.rms_eps),
        nn::RMSNorm(g, p + ".pre_feedforward_layernorm", c.hidden, c.rms_eps),
        nn::RMSNorm(g, p + ".post_feedforward_layernorm", c.hidden, c.rms_eps), std::move(attn),
        nn::GatedMLP(g, p + ".mlp", c.hidden, c.intermediate, nn::Activation::GeluTanh)});
    const std::vector<Expr> cache_shape{c.kv_heads, "past", c.head_dim};
    cache_inputs.push_back({g.named_tensor("cache." + std::to_string(i) + ".k", cache_shape),
                            g.named_tensor("cache." + std::to_string(i) + ".v", cache_shape)});
  }
}

Gemma3::Output Gemma3::forward(const Tensor& tokens, Expr seq, Expr past) const {
  Output out;
  Tensor h = embed.forward(tokens) * std::sqrt(static_cast<double>(config.hidden));
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    auto [attn, cache] = l.attn.forward(l.input_norm.forward(h), cache_inputs[i], seq, past);
    h = h + l.post_attn_norm.forward(attn);
    h = h + l.post_ffn_norm.forward(l.mlp.forward(l.pre_ffn_norm.forward(h)));
    out.cache.push_back(cache);
  }
  // The output projection is the (tied) embedding table.
  out.logits = norm.forward(h).matmul(embed.weight.transpose(0, 1));
  return out;
}

void Gemma3::parameters(const std::string& prefix, nn::NamedTensors& out) const {
  embed.parameters(prefix + "model.embed_tokens.", out);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = prefix + "model.layers." + std::to_string(i) + ".";
    const Layer& l = layers[i];
    l.input_norm.parameters(p + "input_layernorm.", out);
    l.attn.parameters(p + "self_attn.", out);
    l.post_attn_norm.parameters(p + "post_attention_layernorm.", out);
    l.pre_ffn_norm.parameters(p + "pre_feedforward_layernorm.", out);
    l.post_ffn_norm.parameters(p + "post_feedforward_layernorm.", out);
    l.mlp.parameters(p + "mlp.", out);
  }
  norm.parameters(prefix + "model.norm.", out);
}

std::string gguf_tensor_name(const std::string& hf, const std::string& arch) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(hf, m, layer)) return "";
  const std::string rest = m[2];
  const bool gemma = arch.rfind("gemma", 0) == 0;
  static const std::pair<const char*, const char*> kCommon[] = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
  for (const auto& [h, g] : kCommon)
    if (rest == h) return "blk." + std::string(m[1]) + "." + g;
  if (rest == "post_attention_layernorm.weight")
    return "blk." + std::string(m[1]) +
           (gemma ? ".post_attention_norm.weight" : ".ffn_norm.weight");
  return "";
}

std::vector<std::string> load_gguf_weights(const nn::Module& m, const GgufFile& f,
                                           const std::string& arch) {
  std::set<std::string> used;
  nn::load_parameters(
      m, [&](const std::string& name, const std::vector<int64_t>& shape) -> std::optional<Buffer> {
        const std::string gname = gguf_tensor_name(name, arch);
        LUM_CHECK(!gname.empty()) << "no GGUF tensor name known for parameter '" << name << "'";
        const GgufTensorInfo& t = f.tensor(gname);
        LUM_CHECK(t.shape == shape)
            << f.path() << ": tensor '" << gname << "' has the wrong shape for this model";
        used.insert(gname);
        return f.read(gname);
      });
  std::vector<std::string> unused;
  for (const auto& t : f.tensors())
    if (!used.count(t.name)) unused.push_back(t.name);
  return unused;
}

}  // namespace luminal::models
