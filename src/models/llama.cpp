// The Llama decoder.
#include "luminal/models/llama.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <set>

#include "luminal/error.hpp"
#include "luminal/models/safetensors.hpp"
#include "luminal/nn/tensor_parallel.hpp"
#include "luminal/quant.hpp"
#include "models/json.hpp"
#include "models/rope_config.hpp"
#include "models/size_checks.hpp"

namespace luminal::models {

LlamaConfig LlamaConfig::from_hf_json(const std::string& path) {
  const Json j = read_json_object(path, "model config");
  LlamaConfig c;
  c.vocab = int_field(j, "vocab_size", path);
  c.hidden = int_field(j, "hidden_size", path);
  c.intermediate = int_field(j, "intermediate_size", path);
  c.layers = int_field(j, "num_hidden_layers", path);
  c.heads = int_field(j, "num_attention_heads", path);
  c.kv_heads = int_field(j, "num_key_value_heads", path, c.heads);
  LUM_CHECK(c.hidden > 0 && c.heads > 0 && c.kv_heads > 0 && c.heads % c.kv_heads == 0)
      << path << ": hidden_size " << c.hidden << ", num_attention_heads " << c.heads
      << " and num_key_value_heads " << c.kv_heads << " do not fit";
  c.head_dim = int_field(j, "head_dim", path, c.hidden / c.heads);
  c.rms_eps = number_field(j, "rms_norm_eps", path, 1e-6);
  const RopeSettings rope = parse_rope(j, path, "full_attention", "rope_theta", 10000.0);
  c.rope_theta = rope.theta;
  c.rope_scaling = rope.scaling;
  c.sliding_window = int_field(j, "sliding_window", path, 0);
  const Json* tie = j.find("tie_word_embeddings");
  c.tie_embeddings = tie && std::holds_alternative<bool>(tie->v) && std::get<bool>(tie->v);
  const Json* bias = j.find("attention_bias");
  c.qkv_bias = bias && std::holds_alternative<bool>(bias->v) && std::get<bool>(bias->v);
  const Json* model_type = j.find("model_type");
  if (model_type && model_type->is_string() && model_type->string() == "qwen2") c.qkv_bias = true;
  c.qk_norm = model_type && model_type->is_string() && model_type->string() == "qwen3";
  const std::string mt = model_type && model_type->is_string() ? model_type->string() : "";
  c.qk_norm = c.qk_norm || mt == "qwen3_moe";
  c.fused_projections = mt == "phi3";
  if (mt == "mixtral" || mt == "qwen3_moe") {
    // transformers 5 names the count num_local_experts for every MoE model.
    c.experts = int_field(j, j.find("num_local_experts") ? "num_local_experts" : "num_experts", path);
    c.experts_per_token = int_field(j, "num_experts_per_tok", path);
    c.expert_intermediate =
        mt == "mixtral" ? c.intermediate : int_field(j, "moe_intermediate_size", path);
    const Json* norm = j.find("norm_topk_prob");
    c.renormalize_experts = mt == "mixtral" || (norm && std::holds_alternative<bool>(norm->v) &&
                                                std::get<bool>(norm->v));
    c.moe_block = mt == "mixtral" ? "block_sparse_moe" : "mlp";
    const Json* sparse_step = j.find("decoder_sparse_step");
    LUM_CHECK(!sparse_step || !sparse_step->is_int() || sparse_step->integer() == 1)
        << path << ": decoder_sparse_step other than 1 is not supported";
  }
  if (c.fused_projections) {
    const Json* partial = j.find("partial_rotary_factor");
    LUM_CHECK(!partial || !partial->is_number() || partial->number() == 1.0)
        << path << ": partial rotary embeddings are not supported";
  }
  LUM_CHECK(c.hidden > 0 && c.heads > 0 && c.kv_heads > 0 && c.layers > 0 && c.vocab > 0)
      << path << ": config has non-positive sizes";
  return c;
}

LlamaConfig LlamaConfig::from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  LUM_CHECK(arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "qwen3moe")
      << f.path() << ": architecture '" << arch
      << "' is not in the Llama family (llama, qwen2, qwen3, qwen3moe)";
  const auto key = [&](const char* k) { return arch + "." + k; };
  LUM_CHECK(!f.has_tensor("rope_freqs.weight"))
      << f.path() << ": per-frequency RoPE factors (rope_freqs.weight, Llama 3.1 style) are "
                     "not supported yet";
  LlamaConfig c;
  c.hidden = f.get_int(key("embedding_length"));
  c.intermediate = f.get_int(key("feed_forward_length"));
  c.layers = f.get_int(key("block_count"));
  c.heads = f.get_int(key("attention.head_count"));
  c.kv_heads = f.find(key("attention.head_count_kv")) ? f.get_int(key("attention.head_count_kv"))
                                                      : c.heads;
  LUM_CHECK(c.heads > 0 && c.kv_heads > 0 && c.hidden > 0 && c.layers > 0)
      << f.path() << ": non-positive model sizes in the metadata";
  c.head_dim = f.find(key("attention.key_length")) ? f.get_int(key("attention.key_length"))
                                                   : c.hidden / c.heads;
  c.rms_eps = f.get_float(key("attention.layer_norm_rms_epsilon"));
  c.rope_theta = f.find(key("rope.freq_base")) ? f.get_float(key("rope.freq_base")) : 10000.0;
  const std::string scaling =
      f.find(key("rope.scaling.type")) ? f.get_string(key("rope.scaling.type")) : "none";
  if (scaling == "linear" || scaling == "yarn") {
    c.rope_scaling.kind =
        scaling == "linear" ? nn::RopeScaling::Kind::Linear : nn::RopeScaling::Kind::Yarn;
    c.rope_scaling.factor = f.get_float(key("rope.scaling.factor"));
    if (scaling == "yarn")
      c.rope_scaling.original_context = f.get_float(key("rope.scaling.original_context_length"));
  } else {
    LUM_CHECK(scaling == "none") << f.path() << ": RoPE scaling '" << scaling
                                 << "' is not supported (supported: none, linear, yarn)";
  }
  c.vocab = f.tensor("token_embd.weight").shape.at(0);
  LUM_CHECK(c.heads % c.kv_heads == 0 && c.head_dim > 0)
      << f.path() << ": head counts " << c.heads << " / " << c.kv_heads << " do not fit";
  check_gguf_sizes(f, key("block_count"), c.layers, c.vocab, c.hidden);
  c.tie_embeddings = !f.has_tensor("output.weight");
  c.qkv_bias = f.has_tensor("blk.0.attn_q.bias");
  c.qk_norm = f.has_tensor("blk.0.attn_q_norm.weight");
  c.neox_rope = arch != "llama";
  // Mixture of experts: Mixtral is written as "llama" with experts, Qwen3-MoE as
  // "qwen3moe"; both renormalise the chosen experts' weights (llama.cpp does for both).
  c.experts = f.find(key("expert_count")) ? f.get_int(key("expert_count")) : 0;
  LUM_CHECK(arch != "qwen3moe" || c.experts > 0) << f.path() << ": qwen3moe without experts";
  if (c.experts > 0) {
    c.experts_per_token = f.get_int(key("expert_used_count"));
    c.expert_intermediate = f.find(key("expert_feed_forward_length"))
                                ? f.get_int(key("expert_feed_forward_length"))
                                : c.intermediate;
    LUM_CHECK(c.experts_per_token > 0 && c.experts_per_token <= c.experts &&
              c.expert_intermediate > 0)
        << f.path() << ": " << c.experts_per_token << " experts a token of " << c.experts << ", "
        << c.expert_intermediate << " units an expert";
    LUM_CHECK(!f.has_tensor("blk.0.ffn_gate_shexp.weight"))
        << f.path() << ": shared experts are not supported yet";
    c.moe_block = arch == "llama" ? "block_sparse_moe" : "mlp";
    c.renormalize_experts = true;
  }
  return c;
}

Llama::Llama(Graph& g, const LlamaConfig& c, DType kv_cache,
             std::shared_ptr<Communicator> tensor_parallel_)
    : config(c),
      tensor_parallel(std::move(tensor_parallel_)),
      embed(g, "model.embed_tokens", c.vocab, c.hidden),
      norm(g, "model.norm", c.hidden, c.rms_eps),
      lm_head(g, "lm_head", c.hidden,
              splits_vocabulary() ? c.vocab / tensor_parallel->size() : c.vocab, false) {
  if (c.tie_embeddings) lm_head.weight = embed.weight;
  // This rank's part: its heads and feed-forward units.
  const int64_t ranks = tensor_parallel ? tensor_parallel->size() : 1;
  LUM_CHECK(c.heads % ranks == 0 && c.kv_heads % ranks == 0 && c.intermediate % ranks == 0)
      << "tensor parallelism over " << ranks << " ranks: the model's " << c.heads
      << " attention heads, " << c.kv_heads << " key/value heads and " << c.intermediate
      << " feed-forward units must all divide by " << ranks;
  LUM_CHECK(ranks == 1 || c.experts == 0)
      << "tensor parallelism: mixture-of-experts models are not split yet";
  const int64_t heads = c.heads / ranks, kv_heads = c.kv_heads / ranks;
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    nn::Attention attn(g, p + ".self_attn", c.hidden, heads, kv_heads, c.head_dim, c.qkv_bias,
                       nn::RopeConfig{c.rope_theta, c.neox_rope, c.rope_scaling}, c.sliding_window);
    if (c.qk_norm) attn.enable_qk_norm(g, p + ".self_attn", c.rms_eps, false);
    Layer layer{nn::RMSNorm(g, p + ".input_layernorm", c.hidden, c.rms_eps),
                nn::RMSNorm(g, p + ".post_attention_layernorm", c.hidden, c.rms_eps),
                std::move(attn), std::nullopt, std::nullopt};
    if (c.experts > 0) {
      nn::MoENames names;
      if (c.moe_block == "block_sparse_moe") names = {"gate", "experts", "w1", "w3", "w2"};
      layer.moe.emplace(g, p + "." + c.moe_block, c.hidden, c.expert_intermediate, c.experts,
                        c.experts_per_token, c.renormalize_experts, names);
    } else {
      layer.mlp.emplace(g, p + ".mlp", c.hidden, c.intermediate / ranks, nn::Activation::SiLU);
    }
    layers.push_back(std::move(layer));
    add_cache_inputs(g, kv_heads, c.head_dim, kv_cache);
  }
}

Llama::Output Llama::forward(const Tensor& tokens, Expr seq, Expr past, bool last_only) const {
  Output out;
  // Split over ranks, the attention's and the feed-forward's outputs are partial sums.
  const auto summed = [&](const Tensor& part) {
    return tensor_parallel ? all_reduce(part, tensor_parallel) : part;
  };
  Tensor h = embed.forward(tokens);
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& l = layers[i];
    auto [attn, cache] = l.attn.forward(l.input_norm.forward(h), cache_inputs[i], seq, past);
    h = h + summed(attn);
    const Tensor normed = l.post_norm.forward(h);
    h = h + summed(l.moe ? l.moe->forward(normed) : l.mlp->forward(normed));
    out.cache.push_back(cache);
  }
  if (last_only) h = h.slice(0, seq - 1, seq);
  out.logits = lm_head.forward(norm.forward(h));
  if (splits_vocabulary()) {  // [ranks, rows, vocab part] -> [rows, vocab]
    const Expr rows = out.logits.shape()[0];
    out.logits = all_gather(out.logits, tensor_parallel)
                     .permute({1, 0, 2})
                     .contiguous()
                     .reshape({rows, config.vocab});
  }
  return out;
}

void Llama::parameters(const std::string& prefix, nn::NamedTensors& out) const {
  embed.parameters(prefix + "model.embed_tokens.", out);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = prefix + "model.layers." + std::to_string(i) + ".";
    layers[i].input_norm.parameters(p + "input_layernorm.", out);
    layers[i].attn.parameters(p + "self_attn.", out);
    layers[i].post_norm.parameters(p + "post_attention_layernorm.", out);
    if (layers[i].moe) {
      layers[i].moe->parameters(p + config.moe_block + ".", out);
    } else {
      layers[i].mlp->parameters(p + "mlp.", out);
    }
  }
  norm.parameters(prefix + "model.norm.", out);
  if (!config.tie_embeddings) lm_head.parameters(prefix + "lm_head.", out);
}

nn::Sharding Llama::sharding() const {
  if (!tensor_parallel) return {};
  return {[this](const std::string& name) { return split_dim(name); }, tensor_parallel->rank(),
          tensor_parallel->size()};
}

bool Llama::splits_vocabulary() const {
  return tensor_parallel && tensor_parallel->size() > 1 && !config.tie_embeddings &&
         config.vocab % tensor_parallel->size() == 0;
}

std::optional<int> Llama::split_dim(const std::string& name) const {
  if (name == "lm_head.weight" && splits_vocabulary()) return 0;
  for (const char* column : {"self_attn.q_proj.", "self_attn.k_proj.", "self_attn.v_proj.",
                             "mlp.gate_proj.", "mlp.up_proj."})
    if (name.find(column) != std::string::npos) return 0;
  for (const char* row : {"self_attn.o_proj.weight", "mlp.down_proj.weight"})
    if (name.ends_with(row)) return 1;
  return std::nullopt;
}

namespace {

// Where a parameter's values are stored: a tensor of its own, or a part of a fused one.
// Phi-3 stores q/k/v and gate/up as fused matrices (a parameter is a row range of one);
// transformers 5 (up to 5.17) stores each layer's experts as two [experts, rows, cols]
// tensors, gate_up_proj (gate rows, then up rows) and down_proj, and names the router
// mlp.gate.
struct RowSource {
  std::string tensor;
  int64_t expert = -1;          // the index into a fused tensor's leading expert dimension
  int64_t begin = 0, end = -1;  // rows; end -1 = all
};

RowSource fused_projection_source(const std::string& name, const LlamaConfig& c) {
  auto replace = [&](const std::string& from, const std::string& to) {
    return name.substr(0, name.size() - from.size()) + to;
  };
  const int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  if (name.ends_with("self_attn.q_proj.weight")) return {replace("q_proj.weight", "qkv_proj.weight"), -1, 0, q};
  if (name.ends_with("self_attn.k_proj.weight"))
    return {replace("k_proj.weight", "qkv_proj.weight"), -1, q, q + kv};
  if (name.ends_with("self_attn.v_proj.weight"))
    return {replace("v_proj.weight", "qkv_proj.weight"), -1, q + kv, q + 2 * kv};
  if (name.ends_with("mlp.gate_proj.weight"))
    return {replace("gate_proj.weight", "gate_up_proj.weight"), -1, 0, c.intermediate};
  if (name.ends_with("mlp.up_proj.weight"))
    return {replace("up_proj.weight", "gate_up_proj.weight"), -1, c.intermediate, 2 * c.intermediate};
  return {name};
}

// "<layer>.<moe_block>.experts.<e>.<projection>.weight" -> the fused experts' part.
std::optional<RowSource> fused_expert_source(const std::string& name, const LlamaConfig& c) {
  const std::string block = "." + c.moe_block + ".";
  const size_t at = name.find(block);
  if (at == std::string::npos) return std::nullopt;
  const std::string layer = name.substr(0, at), rest = name.substr(at + block.size());
  if (rest == "gate.weight") return RowSource{layer + ".mlp.gate.weight"};
  if (rest.rfind("experts.", 0) != 0) return std::nullopt;
  const size_t dot = rest.find('.', 8);
  if (dot == std::string::npos) return std::nullopt;
  const int64_t e = std::stoll(rest.substr(8, dot - 8));
  const std::string projection = rest.substr(dot + 1);
  const bool mixtral = c.moe_block == "block_sparse_moe";
  const int64_t inter = c.expert_intermediate;
  if (projection == (mixtral ? "w1.weight" : "gate_proj.weight"))
    return RowSource{layer + ".mlp.experts.gate_up_proj", e, 0, inter};
  if (projection == (mixtral ? "w3.weight" : "up_proj.weight"))
    return RowSource{layer + ".mlp.experts.gate_up_proj", e, inter, 2 * inter};
  if (projection == (mixtral ? "w2.weight" : "down_proj.weight"))
    return RowSource{layer + ".mlp.experts.down_proj", e};
  return std::nullopt;
}

// A mixture-of-experts projection's [experts, rows, cols] parameter
// ("<block>.experts.<projection>.weight") from files that store each expert's matrix
// ("<block>.experts.<e>.<projection>.weight", or a part of a fused tensor), stacked.
nn::WeightSource stacked_expert_source(nn::WeightSource per_tensor,
                                       std::function<bool(const std::string&)> stored) {
  return [per_tensor = std::move(per_tensor), stored = std::move(stored)](
             const std::string& name, const std::vector<int64_t>& shape) -> std::optional<Buffer> {
    const size_t at = name.rfind(".experts.");
    if (shape.size() != 3 || at == std::string::npos || stored(name))
      return per_tensor(name, shape);
    const std::string head = name.substr(0, at + 9), tail = name.substr(at + 9);
    std::optional<Buffer> out;
    for (int64_t e = 0; e < shape[0]; ++e) {
      const std::string part = head + std::to_string(e) + "." + tail;
      std::optional<Buffer> m = per_tensor(part, {shape[1], shape[2]});
      if (!m) return std::nullopt;
      LUM_CHECK(m->numel() == static_cast<size_t>(shape[1] * shape[2]) &&
                (!out || m->dtype() == out->dtype()))
          << "expert weight '" << part << "' does not match expert 0's shape and type";
      if (!out)
        out.emplace(m->dtype(), m->numel() * static_cast<size_t>(shape[0]),
                    Buffer::Uninitialized{});
      std::memcpy(static_cast<std::byte*>(out->data()) + static_cast<size_t>(e) * m->bytes(),
                  m->data(), m->bytes());
    }
    return out;
  };
}

RowSource source_of(const std::string& name, const LlamaConfig* c,
                    const std::function<bool(const std::string&)>& stored) {
  if (!c) return {name};
  if (c->fused_projections) return fused_projection_source(name, *c);
  if (c->experts > 0 && !stored(name))
    if (auto fused = fused_expert_source(name, *c); fused && stored(fused->tensor)) return *fused;
  return {name};
}

}  // namespace

std::vector<std::string> load_safetensors_weights(const nn::Module& m, const std::string& path) {
  return load_safetensors_weights(m, std::vector<std::string>{path});
}

std::vector<std::string> load_safetensors_weights(const nn::Module& m,
                                                  const std::vector<std::string>& shards) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  for (const std::string& path : shards) files.push_back(std::make_unique<SafetensorsFile>(path));
  const auto* llama = dynamic_cast<const Llama*>(&m);
  const auto stored = [&](const std::string& tensor) {
    return std::any_of(files.begin(), files.end(), [&](const auto& f) { return f->has(tensor); });
  };
  std::set<std::string> used;
  std::string last_read;
  Buffer last;
  nn::WeightSource source = [&](const std::string& name,
                                const std::vector<int64_t>& shape) -> std::optional<Buffer> {
    const auto file_of = [&](const std::string& tensor) {
      return std::find_if(files.begin(), files.end(),
                          [&](const auto& f) { return f->has(tensor); });
    };
    const RowSource src = source_of(name, llama ? &llama->config : nullptr, stored);
    const auto file = file_of(src.tensor);
    if (file == files.end()) return std::nullopt;
    const SafetensorsFile& f = **file;
    used.insert(src.tensor);
    const SafetensorsTensor& t = f.tensor(src.tensor);
    // A fused tensor serves several parameters in a row: read it once for them.
    if (last_read != src.tensor) last = f.read(src.tensor), last_read = src.tensor;
    const Buffer& all = last;
    if (src.end < 0 && src.expert < 0) {
      LUM_CHECK(t.shape == shape) << f.path() << ": tensor '" << name
                                  << "' has the wrong shape for this model";
      last_read.clear();  // handed over whole: a later read of it reads the file again
      return std::move(last);
    }
    // Rows of one [rows, cols] matrix of a fused tensor ([rows, cols], or one expert's
    // of [experts, rows, cols]).
    const bool per_expert = src.expert >= 0;
    const size_t dims = t.shape.size();
    const bool fits = dims == (per_expert ? 3u : 2u) && shape.size() == 2 &&
                      (!per_expert || src.expert < t.shape[0]) && shape[1] == t.shape[dims - 1];
    const int64_t rows = fits ? t.shape[dims - 2] : 0;
    const int64_t begin = src.begin, end = src.end < 0 ? rows : src.end;
    LUM_CHECK(fits && end <= rows && shape[0] == end - begin)
        << f.path() << ": fused tensor '" << src.tensor << "' does not hold '" << name
        << "' for this config";
    const size_t row_bytes = static_cast<size_t>(t.shape[dims - 1]) * dtype_size(t.dtype);
    const size_t first = static_cast<size_t>((per_expert ? src.expert * rows : 0) + begin);
    Buffer part(t.dtype, static_cast<size_t>((end - begin) * t.shape[dims - 1]),
                Buffer::Uninitialized{});
    std::memcpy(part.data(), static_cast<const std::byte*>(all.data()) + first * row_bytes,
                part.bytes());
    return part;
  };
  if (llama && llama->config.experts > 0) source = stacked_expert_source(std::move(source), stored);
  if (llama && llama->tensor_parallel)
    source = nn::shard_source(std::move(source), llama->sharding());
  nn::load_parameters(m, source);
  std::vector<std::string> unused;
  for (const auto& f : files)
    for (const auto& t : f->tensors())
      if (!used.count(t.name)) unused.push_back(t.name);
  return unused;
}

void save_safetensors_weights(const nn::Module& m, const std::string& path) {
  const nn::NamedTensors params = m.named_parameters();
  std::vector<Buffer> buffers;
  buffers.reserve(params.size());  // NamedTensor points into this
  std::vector<NamedTensor> tensors;
  for (const auto& [name, t] : params) {
    // F16 / BF16 block storage is written as those dtypes, bit for bit; Tensor::data
    // decodes any other ggml format (safetensors has no dtype for them).
    const uint32_t quant = t.graph().node(t.id()).quant;
    if (quant == static_cast<uint32_t>(GgmlType::F16) ||
        quant == static_cast<uint32_t>(GgmlType::BF16)) {
      const Buffer* stored = t.graph().data(t.id());
      LUM_CHECK(stored) << "save_safetensors_weights: parameter '" << name << "' has no data";
      const Buffer& raw = *stored;
      Buffer half(quant == static_cast<uint32_t>(GgmlType::F16) ? DType::F16 : DType::BF16,
                  raw.bytes() / 2, Buffer::Uninitialized{});
      std::memcpy(half.data(), raw.data(), raw.bytes());
      buffers.push_back(std::move(half));
    } else {
      buffers.push_back(t.data());
    }
    std::vector<int64_t> shape;
    for (const Expr& d : t.shape()) {
      const auto c = d.as_const();
      LUM_CHECK(c) << "save_safetensors_weights: parameter '" << name << "' has a symbolic shape";
      shape.push_back(*c);
    }
    tensors.push_back({name, shape, &buffers.back()});
  }
  save_safetensors(path, tensors);
}

}  // namespace luminal::models
