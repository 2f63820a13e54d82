// HF config RoPE settings (both generations) -> RopeSettings.
#include "models/rope_config.hpp"

#include <algorithm>
#include <vector>

#include "luminal/error.hpp"

namespace luminal::models {
namespace {

bool is_null(const Json* v) { return !v || std::holds_alternative<std::nullptr_t>(v->v); }

// A scaling block: transformers 4's `rope_scaling`, or one transformers 5 parameter set
// (which also carries `rope_theta`). `where` names the block in errors.
nn::RopeScaling parse_scaling(const Json& block, const Json& config, const std::string& path,
                              const std::string& where) {
  using Kind = nn::RopeScaling::Kind;
  LUM_CHECK(block.is_object()) << path << ": " << where << " is not an object";
  const auto number = [&](const char* key, double fallback) {
    const Json* v = block.find(key);
    if (is_null(v)) return fallback;
    LUM_CHECK(v->is_number()) << path << ": " << where << "." << key << " is not a number";
    return v->number();
  };
  // Older configs spell the key `type`, newer ones `rope_type`; none means plain RoPE.
  const Json* type = block.find("rope_type");
  if (is_null(type)) type = block.find("type");
  LUM_CHECK(is_null(type) || type->is_string()) << path << ": " << where << ".rope_type is not a string";
  const std::string t = is_null(type) ? "default" : type->string();
  LUM_CHECK(t == "default" || t == "linear" || t == "llama3" || t == "yarn")
      << path << ": " << where << " rope_type '" << t
      << "' is not supported (supported: default, linear, llama3, yarn)";
  // Every key must be one this rope_type reads: an unread one would change the math.
  std::vector<std::string_view> read = {"rope_type", "type", "rope_theta", "factor"};
  if (t == "llama3")
    read.insert(read.end(), {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
  if (t == "yarn")
    read.insert(read.end(), {"original_max_position_embeddings", "beta_fast", "beta_slow",
                             "attention_factor", "truncate"});
  for (const auto& [key, value] : block.object()) {
    if (std::find(read.begin(), read.end(), key) != read.end()) continue;
    // Neutral values of settings we do not implement are harmless.
    if (key == "partial_rotary_factor" && value.is_number() && value.number() == 1.0) continue;
    if (key == "original_max_position_embeddings" && t != "llama3" && t != "yarn") continue;
    LUM_FAIL() << path << ": " << where << "." << key << " is not understood for rope_type '" << t
               << "' (it would change the attention math)";
  }
  nn::RopeScaling s;
  if (t == "default") return s;
  s.factor = number("factor", 1.0);
  LUM_CHECK(s.factor > 0) << path << ": " << where << ".factor must be positive, got " << s.factor;
  const Json* max_pos = config.find("max_position_embeddings");
  const double max_positions = max_pos && max_pos->is_number() ? max_pos->number() : 0.0;
  if (t == "linear") {
    s.kind = Kind::Linear;
  } else if (t == "llama3") {
    s.kind = Kind::Llama3;
    s.low_freq_factor = number("low_freq_factor", 1.0);
    s.high_freq_factor = number("high_freq_factor", 4.0);
    s.original_context = number("original_max_position_embeddings", 0.0);
    LUM_CHECK(s.original_context > 0)
        << path << ": llama3 " << where << " needs original_max_position_embeddings";
    LUM_CHECK(s.high_freq_factor > s.low_freq_factor)
        << path << ": llama3 " << where << " needs high_freq_factor > low_freq_factor";
  } else {  // yarn
    s.kind = Kind::Yarn;
    s.original_context = number("original_max_position_embeddings", max_positions);
    s.beta_fast = number("beta_fast", 32.0);
    s.beta_slow = number("beta_slow", 1.0);
    s.attention_factor = number("attention_factor", 0.0);
    if (const Json* truncate = block.find("truncate");
        truncate && std::holds_alternative<bool>(truncate->v))
      s.truncate = std::get<bool>(truncate->v);
    LUM_CHECK(s.original_context > 0)
        << path << ": yarn " << where << " needs original_max_position_embeddings";
  }
  return s;
}

}  // namespace

RopeSettings parse_rope(const Json& config, const std::string& path, std::string_view layer_type,
                        const char* old_theta_key, double default_theta, bool old_scaling) {
  const Json* params = config.find("rope_parameters");
  if (is_null(params)) {  // transformers 4
    RopeSettings r{number_field(config, old_theta_key, path, default_theta), {}};
    const Json* block = config.find("rope_scaling");
    if (old_scaling && !is_null(block)) r.scaling = parse_scaling(*block, config, path, "rope_scaling");
    return r;
  }
  LUM_CHECK(params->is_object()) << path << ": rope_parameters is not an object";
  std::string where = "rope_parameters";
  // One parameter set for every layer, or one per layer type.
  const bool per_layer_type = !params->find("rope_type") && !params->find("rope_theta") &&
                              std::all_of(params->object().begin(), params->object().end(),
                                          [](const auto& kv) { return kv.second.is_object(); });
  if (per_layer_type) {
    for (const auto& [key, value] : params->object())
      LUM_CHECK(key == "full_attention" || key == "sliding_attention")
          << path << ": rope_parameters." << key
          << " names a layer type that is not understood (known: full_attention, sliding_attention)";
    params = params->find(layer_type);
    where += "." + std::string(layer_type);
    LUM_CHECK(params) << path << ": rope_parameters has no '" << layer_type
                      << "' entry, which this model's layers need";
  }
  const Json* theta = params->find("rope_theta");
  LUM_CHECK(is_null(theta) || theta->is_number()) << path << ": " << where << ".rope_theta is not a number";
  RopeSettings r{is_null(theta) ? default_theta : theta->number(), {}};
  LUM_CHECK(r.theta > 0) << path << ": " << where << ".rope_theta must be positive";
  r.scaling = parse_scaling(*params, config, path, where);
  // Both spellings at once would leave the reader guessing which one the model meant.
  LUM_CHECK(is_null(config.find("rope_scaling")))
      << path << ": rope_scaling and rope_parameters are both set; keep one";
  return r;
}

}  // namespace luminal::models
