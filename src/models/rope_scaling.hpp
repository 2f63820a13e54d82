// Reads HF configs' `rope_scaling` block (private to src/models).
#pragma once

#include <string>

#include "luminal/nn/attention.hpp"
#include "models/json.hpp"

namespace luminal::models {

/// The RoPE scaling a config asks for; absent or null means none. Schemes we cannot run
/// exactly (dynamic NTK, LongRoPE) are refused with an error naming `path`.
nn::RopeScaling parse_rope_scaling(const Json& config, const std::string& path);

}  // namespace luminal::models
