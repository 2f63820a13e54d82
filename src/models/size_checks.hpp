// Checks that a model file's counts agree with the tensors it holds, before a model is
// built or anything allocated: a count that lies (block_count of a million) would
// otherwise grow memory until the machine gives out (private to src/models).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "luminal/error.hpp"
#include "luminal/models/gguf.hpp"

namespace luminal::models {

/// The layer N of a tensor named "<prefix>N.<rest>": nullopt for a name not under
/// `prefix`, -1 for one under it without a layer number.
inline std::optional<int64_t> layer_index(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return std::nullopt;
  const std::string_view n = name.substr(prefix.size(), name.find('.', prefix.size()) - prefix.size());
  if (n.empty() || n.size() >= 10 || n.find_first_not_of("0123456789") != std::string_view::npos)
    return -1;
  return std::stoll(std::string(n));
}

/// `layers` (read from `key`) must be exactly the blk.N tensor groups present, and the
/// embedding table must hold `vocab` rows of `hidden` values.
inline void check_gguf_sizes(const GgufFile& f, const std::string& key, int64_t layers,
                             int64_t vocab, int64_t hidden) {
  std::set<int64_t> blocks;
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::optional<int64_t> n = layer_index(t.name, "blk.");
    if (!n) continue;
    LUM_CHECK(*n >= 0) << f.path() << ": tensor '" << t.name << "' has no layer number";
    blocks.insert(*n);
  }
  LUM_CHECK(layers > 0 && static_cast<size_t>(layers) == blocks.size() &&
            (blocks.empty() || *blocks.rbegin() == layers - 1))
      << f.path() << ": " << key << " says " << layers << " layers, but the file holds tensors for "
      << blocks.size() << " (blk.0 to blk." << (blocks.empty() ? -1 : *blocks.rbegin()) << ")";
  LUM_CHECK(f.has_tensor("token_embd.weight")) << f.path() << ": no token_embd.weight tensor";
  const GgufTensorInfo& embd = f.tensor("token_embd.weight");
  LUM_CHECK(embd.shape.size() == 2 && embd.shape[1] == hidden)
      << f.path() << ": token_embd.weight does not have the embedding_length (" << hidden
      << ") the metadata gives";
  LUM_CHECK(vocab > 0 && embd.shape[0] >= vocab)
      << f.path() << ": the tokenizer has " << vocab << " tokens but token_embd.weight only "
      << embd.shape[0] << " rows";
}

}  // namespace luminal::models
