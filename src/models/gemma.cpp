// Gemma 3 text decoder from GGUF.
#include "luminal/models/gemma.hpp"

#include <cmath>
#include <cstring>
#include <regex>
#include <set>

#include "luminal/error.hpp"
#include "models/json.hpp"
#include "models/size_checks.hpp"
#include "models/rope_config.hpp"

namespace luminal::models {

GemmaConfig GemmaConfig::from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  LUM_CHECK(arch == "gemma3") << f.path() << ": architecture '" << arch << "' is not gemma3";
  GemmaConfig c;
  c.version = 3;
  c.unit_offset = false;  // GGUF conversion stores 1 + w
  c.hidden = f.get_int("gemma3.embedding_length");
  c.intermediate = f.get_int("gemma3.feed_forward_length");
  c.layers = f.get_int("gemma3.block_count");
  c.heads = f.get_int("gemma3.attention.head_count");
  c.kv_heads = f.get_int("gemma3.attention.head_count_kv");
  LUM_CHECK(c.hidden > 0 && c.heads > 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0)
      << f.path() << ": embedding_length " << c.hidden << ", head_count " << c.heads
      << " and head_count_kv " << c.kv_heads << " do not fit";
  c.head_dim = f.find("gemma3.attention.key_length") ? f.get_int("gemma3.attention.key_length")
                                                     : c.hidden / c.heads;
  c.rms_eps = f.get_float("gemma3.attention.layer_norm_rms_epsilon");
  c.rope_global = f.find("gemma3.rope.freq_base") ? f.get_float("gemma3.rope.freq_base") : 1e6;
  c.sliding_window = f.find("gemma3.attention.sliding_window")
                         ? f.get_int("gemma3.attention.sliding_window")
                         : 512;
  for (int64_t i = 0; i < c.layers; ++i)
    c.sliding.push_back((i + 1) % 6 != 0);  // five local, one global
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  LUM_CHECK(tokens && std::holds_alternative<std::shared_ptr<GgufArray>>(tokens->v))
      << f.path() << ": no tokenizer.ggml.tokens vocabulary";
  c.vocab = static_cast<int64_t>(std::get<std::shared_ptr<GgufArray>>(tokens->v)->size());
  LUM_CHECK(c.head_dim > 0) << f.path() << ": key_length " << c.head_dim << " is not positive";
  check_gguf_sizes(f, "gemma3.block_count", c.layers, c.vocab, c.hidden);
  return c;
}

GemmaConfig GemmaConfig::from_hf_json(const std::string& path) {
  const Json j = read_json_object(path, "model config");
  const auto integer = [&](const char* key, std::optional<int64_t> fallback = {}) {
    return int_field(j, key, path, fallback);
  };
  const auto number = [&](const char* key, double fallback) {
    return number_field(j, key, path, fallback);
  };
  const Json* type = j.find("model_type");
  const std::string mt = type && type->is_string() ? type->string() : "";
  GemmaConfig c;
  c.version = mt == "gemma" ? 1 : mt == "gemma2" ? 2 : mt == "gemma3_text" ? 3 : 0;
  LUM_CHECK(c.version) << path << ": model_type '" << mt << "' is not gemma, gemma2 or gemma3_text";
  c.vocab = integer("vocab_size");
  c.hidden = integer("hidden_size");
  c.intermediate = integer("intermediate_size");
  c.layers = integer("num_hidden_layers");
  c.heads = integer("num_attention_heads");
  c.kv_heads = integer("num_key_value_heads", c.heads);
  LUM_CHECK(c.hidden > 0 && c.heads > 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0)
      << path << ": hidden_size " << c.hidden << ", num_attention_heads " << c.heads
      << " and num_key_value_heads " << c.kv_heads << " do not fit";
  c.head_dim = integer("head_dim", c.hidden / c.heads);
  c.rms_eps = number("rms_norm_eps", 1e-6);
  const RopeSettings global = parse_rope(j, path, "full_attention", "rope_theta", 1e4);
  c.rope_global = global.theta;
  c.rope_scaling = global.scaling;
  // Gemma 3's sliding layers have their own base and, in transformers 4, no scaling.
  const RopeSettings local = parse_rope(j, path, "sliding_attention", "rope_local_base_freq",
                                        c.rope_global, /*old_scaling=*/false);
  c.rope_local = local.theta;
  c.rope_local_scaling = local.scaling;
  if (c.version >= 2) {
    const double scalar = number("query_pre_attn_scalar", static_cast<double>(c.head_dim));
    c.query_scale = 1.0 / std::sqrt(scalar);
    c.attn_softcap = number("attn_logit_softcapping", 0);
    c.final_softcap = number("final_logit_softcapping", 0);
    c.sliding_window = integer("sliding_window", 0);
  }
  const Json* types = j.find("layer_types");
  for (int64_t i = 0; i < c.layers; ++i) {
    bool sliding = c.version == 2 && i % 2 == 0;
    if (types && types->is_array() && static_cast<size_t>(i) < types->array().size())
      sliding = types->array()[static_cast<size_t>(i)].string() == "sliding_attention";
    c.sliding.push_back(sliding && c.sliding_window > 0);
  }
  return c;
}

Gemma::Gemma(Graph& g, const GemmaConfig& c, DType kv_cache)
    : config(c),
      embed(g, "model.embed_tokens", c.vocab, c.hidden),
      norm(g, "model.norm", c.hidden, c.rms_eps, c.unit_offset) {
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    const bool sliding = c.sliding[static_cast<size_t>(i)];
    nn::Attention attn(g, p + ".self_attn", c.hidden, c.heads, c.kv_heads, c.head_dim, false,
                       sliding ? nn::RopeConfig{c.rope_local, true, c.rope_local_scaling}
                               : nn::RopeConfig{c.rope_global, true, c.rope_scaling},
                       sliding ? c.sliding_window : 0);
    if (c.query_scale > 0) attn.scale = c.query_scale;
    attn.softcap = c.attn_softcap;
    if (c.version == 3) attn.enable_qk_norm(g, p + ".self_attn", c.rms_eps, c.unit_offset);
    // Gemma 1 names its pre-MLP norm post_attention_layernorm.
    const std::string pre_ffn =
        c.version == 1 ? ".post_attention_layernorm" : ".pre_feedforward_layernorm";
    Layer layer{nn::RMSNorm(g, p + ".input_layernorm", c.hidden, c.rms_eps, c.unit_offset),
                nn::RMSNorm(g, p + pre_ffn, c.hidden, c.rms_eps, c.unit_offset),
                std::nullopt,
                std::nullopt,
                std::move(attn),
                nn::GatedMLP(g, p + ".mlp", c.hidden, c.intermediate, nn::Activation::GeluTanh)};
    if (c.version >= 2) {
      layer.post_attn_norm.emplace(g, p + ".post_attention_layernorm", c.hidden, c.rms_eps,
                                   c.unit_offset);
      layer.post_ffn_norm.emplace(g, p + ".post_feedforward_layernorm", c.hidden, c.rms_eps,
                                  c.unit_offset);
    }
    layers.push_back(std::move(layer));
    add_cache_inputs(g, c.kv_heads, c.head_dim, kv_cache);
  }
}

Gemma::Output Gemma::forward(const Tensor& tokens, Expr seq, Expr past, bool last_only) const {
  Output out;
  Tensor h = embed.forward(tokens) * std::sqrt(static_cast<double>(config.hidden));
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    auto [attn, cache] = l.attn.forward(l.input_norm.forward(h), cache_inputs[i], seq, past);
    h = h + (l.post_attn_norm ? l.post_attn_norm->forward(attn) : attn);
    const Tensor mlp = l.mlp.forward(l.pre_ffn_norm.forward(h));
    h = h + (l.post_ffn_norm ? l.post_ffn_norm->forward(mlp) : mlp);
    out.cache.push_back(cache);
  }
  if (last_only) h = h.slice(0, seq - 1, seq);
  // The output projection is the (tied) embedding table.
  out.logits = norm.forward(h).matmul(embed.weight.transpose(0, 1));
  if (config.final_softcap > 0)
    out.logits = (out.logits * (1.0 / config.final_softcap)).tanh() * config.final_softcap;
  return out;
}

void Gemma::parameters(const std::string& prefix, nn::NamedTensors& out) const {
  embed.parameters(prefix + "model.embed_tokens.", out);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = prefix + "model.layers." + std::to_string(i) + ".";
    const Layer& l = layers[i];
    l.input_norm.parameters(p + "input_layernorm.", out);
    l.attn.parameters(p + "self_attn.", out);
    if (l.post_attn_norm) l.post_attn_norm->parameters(p + "post_attention_layernorm.", out);
    l.pre_ffn_norm.parameters(
        p + (config.version == 1 ? "post_attention_layernorm." : "pre_feedforward_layernorm."),
        out);
    if (l.post_ffn_norm) l.post_ffn_norm->parameters(p + "post_feedforward_layernorm.", out);
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
  // Mixture of experts (Mixtral's names, then Qwen3-MoE's): the router and each
  // projection's stacked experts.
  static const std::pair<const char*, const char*> kExperts[] = {
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
      {"block_sparse_moe.experts.w1.weight", "ffn_gate_exps.weight"},
      {"block_sparse_moe.experts.w3.weight", "ffn_up_exps.weight"},
      {"block_sparse_moe.experts.w2.weight", "ffn_down_exps.weight"},
      {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.experts.gate_proj.weight", "ffn_gate_exps.weight"},
      {"mlp.experts.up_proj.weight", "ffn_up_exps.weight"},
      {"mlp.experts.down_proj.weight", "ffn_down_exps.weight"}};
  for (const auto& [h, g] : kExperts)
    if (rest == h) return "blk." + std::string(m[1]) + "." + g;
  if (rest == "post_attention_layernorm.weight")
    return "blk." + std::string(m[1]) +
           (gemma ? ".post_attention_norm.weight" : ".ffn_norm.weight");
  return "";
}

std::vector<std::string> load_gguf_weights(const nn::Module& m, const GgufFile& f,
                                           const std::string& arch, const nn::Sharding& sharding) {
  std::set<std::string> used;
  for (auto& [name, param] : m.named_parameters()) {
    const std::string gname = gguf_tensor_name(name, arch);
    LUM_CHECK(!gname.empty()) << "no GGUF tensor name known for parameter '" << name << "'";
    const GgufTensorInfo& t = f.tensor(gname);
    std::vector<int64_t> shape;
    for (Expr d : param.shape()) shape.push_back(*d.as_const());
    // A split parameter is a part of the file's tensor.
    const int split = sharding.size > 1 ? sharding.split(name).value_or(-1) : -1;
    if (split >= 0) shape[static_cast<size_t>(split)] *= sharding.size;
    LUM_CHECK(t.shape == shape) << f.path() << ": tensor '" << gname << "' has the wrong shape "
                                << "for this model (expected "
                                << to_string(std::vector<Expr>(shape.begin(), shape.end())) << ")";
    used.insert(gname);
    Tensor p = param;
    size_t block_elems = 0, block_bytes = 0;
    // Matrices stay in their file format; the compiler selects kernels that read the
    // blocks. Vectors (norms, biases) are small and decoded.
    // (A mixture's experts are stacks of matrices, [experts, rows, cols].)
    if (t.type != 0 && (shape.size() == 2 || shape.size() == 3) &&
        ggml_block_layout(t.type, block_elems, block_bytes)) {
      const std::span<const std::byte> bytes = f.data(t);
      Buffer raw(DType::U8, bytes.size(), Buffer::Uninitialized{});
      std::memcpy(raw.data(), bytes.data(), bytes.size());
      if (split >= 0) {  // rows of blocks: a part is whole rows, or whole blocks of each row
        const int64_t blocks = shape[1] / static_cast<int64_t>(block_elems);
        LUM_CHECK(split == 0 || blocks % sharding.size == 0)
            << f.path() << ": tensor parallelism over " << sharding.size << " ranks splits '"
            << gname << "' (" << ggml_type_name(t.type) << ") by columns, and its rows of "
            << blocks << " blocks of " << block_elems << " do not divide by " << sharding.size;
        raw = nn::take_part(raw, {shape[0], static_cast<int64_t>(bytes.size()) / shape[0]}, split,
                            sharding.rank, sharding.size);
      }
      p.set_quantized(t.type, std::move(raw));
    } else {
      Buffer whole = f.read(gname);
      p.set_buffer(split >= 0 ? nn::take_part(whole, shape, split, sharding.rank, sharding.size)
                              : std::move(whole));
    }
  }
  std::vector<std::string> unused;
  for (const auto& t : f.tensors())
    if (!used.count(t.name)) unused.push_back(t.name);
  return unused;
}

}  // namespace luminal::models
