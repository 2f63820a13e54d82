// Reads the RoPE settings of a Hugging Face config.json, in either generation's spelling
// (private to src/models):
//   transformers 4: top-level `rope_theta` and a `rope_scaling` block (`type` or `rope_type`);
//   transformers 5: a `rope_parameters` block holding `rope_theta` and the scaling, or one
//   such block per layer type (`full_attention`, `sliding_attention`: Gemma 3).
// A key these blocks hold that we do not understand changes the math, so it is an error
// naming the key, never a silent default.
#pragma once

#include <string>
#include <string_view>

#include "luminal/nn/attention.hpp"
#include "models/json.hpp"

namespace luminal::models {

struct RopeSettings {
  double theta;
  nn::RopeScaling scaling;
};

/// The RoPE of layers of `layer_type` ("full_attention" or "sliding_attention").
/// `old_theta_key` names the transformers 4 field holding the base ("rope_theta", or
/// Gemma 3's "rope_local_base_freq" for sliding layers), `default_theta` the base when
/// the config gives none; `old_scaling` says whether transformers 4's `rope_scaling`
/// applies to these layers (Gemma 3 applies it to full-attention layers only).
RopeSettings parse_rope(const Json& config, const std::string& path, std::string_view layer_type,
                        const char* old_theta_key, double default_theta, bool old_scaling = true);

}  // namespace luminal::models
