// Finding special tokens (control, user-defined, added) written literally in a text, before
// the rest of the text is tokenised: "<start_of_turn>", Gemma's runs of spaces and tabs,
// "<|im_end|>". The two reference implementations choose among overlapping matches
// differently, and the choice changes the ids, so both are here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace luminal::models {

class SpecialTokens {
 public:
  /// Which of several overlapping matches wins.
  enum class Order {
    /// Leftmost match first, the longest there (HF tokenizers' added vocabulary).
    kLeftmostLongest,
    /// Longest token first over the whole text, each token's matches left to right
    /// (llama.cpp's partition of a prompt).
    kLongestFirst,
  };

  /// One stretch of a text: plain text (`id` < 0) or a special token.
  struct Segment {
    size_t start, size;
    int32_t id;
  };

  SpecialTokens() = default;
  /// `tokens`: (text, id); empty texts are ignored, a repeated text keeps its first id.
  explicit SpecialTokens(const std::vector<std::pair<std::string, int32_t>>& tokens);

  bool empty() const { return ids_.empty(); }
  /// `text` cut into plain stretches and special tokens, in order; no empty stretch.
  std::vector<Segment> split(std::string_view text, Order order) const;

 private:
  /// The special token of `size` bytes at `at`, or -1.
  int32_t match(std::string_view text, size_t at, size_t size) const;

  struct Hash {  // lets string_views look up std::string keys without a copy
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> ids_;
  std::vector<std::vector<uint32_t>> sizes_by_lead_;  // per first byte: sizes, longest first
};

}  // namespace luminal::models
