// Checks that a GGUF file's metadata agrees with the tensors it holds, before a model is
// built or anything allocated: a count that lies (block_count of a million) would
// otherwise grow memory until the machine gives out (private to src/models).
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "luminal/error.hpp"
#include "luminal/models/gguf.hpp"

namespace luminal::models {

/// `layers` (read from `key`) must be exactly the blk.N tensor groups present, and the
/// embedding table must hold `vocab` rows of `hidden` values.
inline void check_gguf_sizes(const GgufFile& f, const std::string& key, int64_t layers,
                             int64_t vocab, int64_t hidden) {
  std::set<int64_t> blocks;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) != 0) continue;
    const size_t dot = t.name.find('.', 4);
    const std::string n = t.name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
    LUM_CHECK(!n.empty() && n.size() < 10 && n.find_first_not_of("0123456789") == std::string::npos)
        << f.path() << ": tensor '" << t.name << "' has no layer number";
    blocks.insert(std::stoll(n));
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
