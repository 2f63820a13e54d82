// HF `rope_scaling` → nn::RopeScaling.
#include "models/rope_scaling.hpp"

#include "luminal/error.hpp"

namespace luminal::models {

nn::RopeScaling parse_rope_scaling(const Json& config, const std::string& path) {
  using Kind = nn::RopeScaling::Kind;
  nn::RopeScaling s;
  const Json* block = config.find("rope_scaling");
  if (!block || std::holds_alternative<std::nullptr_t>(block->v)) return s;
  LUM_CHECK(block->is_object()) << path << ": rope_scaling is not an object";
  const auto number = [&](const char* key, double fallback) {
    const Json* v = block->find(key);
    if (!v || std::holds_alternative<std::nullptr_t>(v->v)) return fallback;
    LUM_CHECK(v->is_number()) << path << ": rope_scaling." << key << " is not a number";
    return v->number();
  };
  // Older configs spell the key `type`, newer ones `rope_type`.
  const Json* type = block->find("rope_type");
  if (!type) type = block->find("type");
  LUM_CHECK(type && type->is_string()) << path << ": rope_scaling has no rope_type";
  const std::string& t = type->string();
  if (t == "default") return s;
  const Json* max_pos = config.find("max_position_embeddings");
  const double max_positions = max_pos && max_pos->is_number() ? max_pos->number() : 0.0;
  s.factor = number("factor", 1.0);
  LUM_CHECK(s.factor > 0) << path << ": rope_scaling.factor must be positive, got " << s.factor;
  if (t == "linear") {
    s.kind = Kind::Linear;
  } else if (t == "llama3") {
    s.kind = Kind::Llama3;
    s.low_freq_factor = number("low_freq_factor", 1.0);
    s.high_freq_factor = number("high_freq_factor", 4.0);
    s.original_context = number("original_max_position_embeddings", 0.0);
    LUM_CHECK(s.original_context > 0)
        << path << ": llama3 rope_scaling needs original_max_position_embeddings";
    LUM_CHECK(s.high_freq_factor > s.low_freq_factor)
        << path << ": llama3 rope_scaling needs high_freq_factor > low_freq_factor";
  } else if (t == "yarn") {
    s.kind = Kind::Yarn;
    s.original_context = number("original_max_position_embeddings", max_positions);
    s.beta_fast = number("beta_fast", 32.0);
    s.beta_slow = number("beta_slow", 1.0);
    s.attention_factor = number("attention_factor", 0.0);
    LUM_CHECK(!block->find("mscale") && !block->find("mscale_all_dim"))
        << path << ": yarn rope_scaling with mscale is not supported";
    if (const Json* truncate = block->find("truncate");
        truncate && std::holds_alternative<bool>(truncate->v))
      s.truncate = std::get<bool>(truncate->v);
    LUM_CHECK(s.original_context > 0)
        << path << ": yarn rope_scaling needs original_max_position_embeddings";
  } else {
    LUM_FAIL() << path << ": rope_scaling type '" << t
               << "' is not supported (supported: linear, llama3, yarn)";
  }
  return s;
}

}  // namespace luminal::models
