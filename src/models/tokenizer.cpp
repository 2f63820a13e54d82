// SentencePiece-style BPE.
#include "luminal/models/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "luminal/error.hpp"
#include "models/gguf_arrays.hpp"
#include "models/utf8.hpp"

namespace luminal::models {
namespace {

using gguf_token_type::kByte, gguf_token_type::kControl;
const std::string kSpace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

}  // namespace

SpmTokenizer::SpmTokenizer(const GgufFile& f) {
  const std::string model =
      f.find("tokenizer.ggml.model") ? f.get_string("tokenizer.ggml.model") : "";
  LUM_CHECK(model == "llama") << f.path() << ": tokenizer model '" << model
                              << "' is not supported (supported: llama / SentencePiece BPE)";
  pieces_ = gguf_array<std::string>(f, "tokenizer.ggml.tokens", true);
  scores_ = gguf_array<float>(f, "tokenizer.ggml.scores", false);
  types_ = gguf_array<int32_t>(f, "tokenizer.ggml.token_type", false);
  scores_.resize(pieces_.size(), 0.0f);
  types_.resize(pieces_.size(), 1);
  bos_ = gguf_token_id(f, "tokenizer.ggml.bos_token_id", pieces_.size());
  eos_ = gguf_token_id(f, "tokenizer.ggml.eos_token_id", pieces_.size());
  add_space_prefix_ = f.get_flag("tokenizer.ggml.add_space_prefix", false);
  index();
}

SpmTokenizer::SpmTokenizer(std::vector<std::string> pieces, std::vector<float> scores,
                           std::vector<int32_t> types, int32_t bos, int32_t eos,
                           bool add_space_prefix)
    : pieces_(std::move(pieces)),
      scores_(std::move(scores)),
      types_(std::move(types)),
      bos_(bos),
      eos_(eos),
      add_space_prefix_(add_space_prefix) {
  scores_.resize(pieces_.size(), 0.0f);
  types_.resize(pieces_.size(), 1);
  index();
}

void SpmTokenizer::index() {
  byte_ids_.assign(256, -1);
  std::vector<std::pair<std::string, int32_t>> specials;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    ids_.emplace(pieces_[i], id);
    if (types_[i] == kByte && pieces_[i].size() == 6 && pieces_[i].rfind("<0x", 0) == 0) {
      const int b = std::stoi(pieces_[i].substr(3, 2), nullptr, 16);
      byte_ids_[static_cast<size_t>(b)] = id;
    }
    if (gguf_token_type::control_in_llama_cpp(types_[i], pieces_[i])) types_[i] = kControl;
    if (gguf_token_type::matched_in_text(types_[i])) specials.emplace_back(pieces_[i], id);
  }
  specials_ = SpecialTokens(specials);
}

int32_t SpmTokenizer::find(const std::string& piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

void SpmTokenizer::encode_plain(const std::string& raw, std::vector<int32_t>& out) const {
  if (raw.empty()) return;
  std::string text = add_space_prefix_ ? kSpace : "";
  for (char c : raw) text += c == ' ' ? kSpace : std::string(1, c);
  // Symbols: one per UTF-8 character, linked in a list; merges join neighbours.
  struct Sym {
    size_t start, len;
    int prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < text.size();) {
    // A byte that cannot lead a sequence stands alone.
    const size_t n = std::min(std::max<size_t>(utf8_length(static_cast<unsigned char>(text[i])), 1),
                              text.size() - i);
    syms.push_back({i, n, static_cast<int>(syms.size()) - 1, static_cast<int>(syms.size()) + 1});
    i += n;
  }
  syms.back().next = -1;
  struct Cand {
    float score;
    int left, right;
    size_t len;  // merged length at push time (to drop stale candidates)
    bool operator<(const Cand& o) const {
      return score != o.score ? score < o.score : left > o.left;
    }
  };
  std::priority_queue<Cand> queue;
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const size_t len = syms[l].len + syms[r].len;
    auto it = ids_.find(text.substr(syms[l].start, len));
    if (it == ids_.end()) return;
    queue.push({scores_[static_cast<size_t>(it->second)], l, r, len});
  };
  for (size_t i = 1; i < syms.size(); ++i) try_pair(static_cast<int>(i - 1), static_cast<int>(i));
  while (!queue.empty()) {
    const Cand c = queue.top();
    queue.pop();
    Sym& l = syms[c.left];
    Sym& r = syms[c.right];
    if (l.len == 0 || r.len == 0 || l.next != c.right || l.len + r.len != c.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = c.left;
    try_pair(l.prev, c.left);
    try_pair(c.left, l.next);
  }
  for (int i = 0; i >= 0 && i < static_cast<int>(syms.size()); i = syms[i].next) {
    const std::string piece = text.substr(syms[i].start, syms[i].len);
    if (auto it = ids_.find(piece); it != ids_.end()) {
      out.push_back(it->second);
      continue;
    }
    for (unsigned char b : piece) {
      LUM_CHECK(byte_ids_[b] >= 0) << "tokenizer: byte 0x" << std::hex << int(b)
                                   << " is not in the vocabulary and there is no byte fallback";
      out.push_back(byte_ids_[b]);
    }
  }
}

std::vector<int32_t> SpmTokenizer::encode(const std::string& text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_ >= 0) out.push_back(bos_);
  // Special tokens written in the text (control tokens, and user-defined ones such as
  // Gemma's runs of spaces, tabs and newlines) are found first, as llama.cpp finds them.
  for (const auto& s : specials_.split(text, SpecialTokens::Order::kLongestFirst)) {
    if (s.id >= 0)
      out.push_back(s.id);
    else
      encode_plain(text.substr(s.start, s.size), out);
  }
  return out;
}

std::string SpmTokenizer::piece(int32_t id) const {
  LUM_CHECK(id >= 0 && static_cast<size_t>(id) < pieces_.size())
      << "token id " << id << " is outside the vocabulary of " << pieces_.size();
  const auto t = types_[static_cast<size_t>(id)];
  const std::string& p = pieces_[static_cast<size_t>(id)];
  if (t == kControl) return "";
  if (t == kByte && p.size() == 6)
    return std::string(1, static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += p[i++];
    }
  }
  return out;
}

std::string SpmTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string p = piece(ids[i]);
    // As llama.cpp: the space prefix comes off the first token only, so after a BOS
    // (which renders empty) the text keeps its leading space.
    if (i == 0 && add_space_prefix_) p.erase(0, std::min(p.find_first_not_of(' '), p.size()));
    out += p;
  }
  return out;
}

}  // namespace luminal::models
