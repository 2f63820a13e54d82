// Special tokens found in raw text, in either reference implementation's order.
#include "luminal/models/special_tokens.hpp"

#include <algorithm>
#include <tuple>

namespace luminal::models {

SpecialTokens::SpecialTokens(const std::vector<std::pair<std::string, int32_t>>& tokens)
    : sizes_by_lead_(256) {
  for (const auto& [text, id] : tokens) {
    if (text.empty() || !ids_.emplace(text, id).second) continue;
    auto& sizes = sizes_by_lead_[static_cast<unsigned char>(text[0])];
    if (std::find(sizes.begin(), sizes.end(), text.size()) == sizes.end())
      sizes.push_back(static_cast<uint32_t>(text.size()));
  }
  for (auto& sizes : sizes_by_lead_) std::sort(sizes.rbegin(), sizes.rend());
}

int32_t SpecialTokens::match(std::string_view text, size_t at, size_t size) const {
  if (at + size > text.size()) return -1;
  const auto it = ids_.find(text.substr(at, size));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<SpecialTokens::Segment> SpecialTokens::split(std::string_view text,
                                                         Order order) const {
  std::vector<Segment> tokens;  // the special tokens chosen, in text order
  if (!empty()) {
    if (order == Order::kLeftmostLongest) {
      for (size_t i = 0; i < text.size();) {
        int32_t id = -1;
        size_t size = 0;
        for (uint32_t s : sizes_by_lead_[static_cast<unsigned char>(text[i])])
          if ((id = match(text, i, s)) >= 0) {
            size = s;
            break;
          }
        if (id < 0) {
          ++i;
          continue;
        }
        tokens.push_back({i, size, id});
        i += size;
      }
    } else {
      // Every match, overlapping ones too; taken longest first, then by id (llama.cpp
      // sorts its tokens by length alone), then left to right, each if still free.
      std::vector<Segment> all;
      for (size_t i = 0; i < text.size(); ++i)
        for (uint32_t s : sizes_by_lead_[static_cast<unsigned char>(text[i])])
          if (const int32_t id = match(text, i, s); id >= 0) all.push_back({i, s, id});
      std::sort(all.begin(), all.end(), [](const Segment& a, const Segment& b) {
        return std::tuple(b.size, a.id, a.start) < std::tuple(a.size, b.id, b.start);
      });
      std::vector<bool> taken(text.size(), false);
      for (const Segment& m : all) {
        if (std::any_of(taken.begin() + static_cast<std::ptrdiff_t>(m.start),
                        taken.begin() + static_cast<std::ptrdiff_t>(m.start + m.size),
                        [](bool t) { return t; }))
          continue;
        std::fill_n(taken.begin() + static_cast<std::ptrdiff_t>(m.start), m.size, true);
        tokens.push_back(m);
      }
      std::sort(tokens.begin(), tokens.end(),
                [](const Segment& a, const Segment& b) { return a.start < b.start; });
    }
  }
  std::vector<Segment> out;
  size_t at = 0;
  for (const Segment& t : tokens) {
    if (t.start > at) out.push_back({at, t.start - at, -1});
    out.push_back(t);
    at = t.start + t.size;
  }
  if (at < text.size()) out.push_back({at, text.size() - at, -1});
  return out;
}

}  // namespace luminal::models
