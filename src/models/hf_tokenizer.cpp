// Byte-level BPE from a Hugging Face tokenizer.json.
#include "luminal/models/hf_tokenizer.hpp"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <functional>
#include <limits>
#include <queue>

#include "luminal/error.hpp"
#include "models/bert_steps.hpp"
#include "models/json.hpp"
#include "models/utf8.hpp"

namespace luminal::models {
namespace {

// The GPT-2 split used by a ByteLevel pre-tokenizer with use_regex.
constexpr const char* kGpt2Split =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's reversible map from bytes to printable code points: printable Latin-1 bytes
// stand for themselves, the rest take 256, 257, ... in byte order.
std::array<char32_t, 256> byte_chars() {
  std::array<char32_t, 256> m{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    m[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return m;
}

// Oniguruma's \s is Unicode White_Space (with \v and U+0085); ICU's is narrower.
std::string to_icu_pattern(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      const char c = p[++i];
      out += c == 's' ? "\\p{White_Space}" : c == 'S' ? "\\P{White_Space}" : std::string{'\\', c};
    } else {
      out += p[i];
    }
  }
  return out;
}

const Json& member(const Json& j, const char* key, const std::string& path) {
  const Json* v = j.find(key);
  LUM_CHECK(v) << path << ": '" << key << "' is missing";
  return *v;
}

std::string type_of(const Json& j) {
  const Json* t = j.find("type");
  return t && t->is_string() ? t->string() : "";
}

// The helpers below work on one UTF-8 string at a time; ICU does the Unicode parts.
std::string to_utf8(const icu::UnicodeString& u) {
  std::string s;
  u.toUTF8String(s);
  return s;
}

// UTF-8 of UTF-16 text in which a lone surrogate (from lenient_utf16) keeps its three bytes
// instead of becoming U+FFFD.
std::string to_utf8_keeping_surrogates(const icu::UnicodeString& u) {
  std::string s;
  for (int32_t k = 0; k < u.length(); k = u.moveIndex32(k, 1))
    append_utf8(s, static_cast<uint32_t>(u.char32At(k)));
  return s;
}

// Text read as llama.cpp reads a prompt (decode_utf8), lone surrogates kept as such.
icu::UnicodeString lenient_utf16(const std::string& text) {
  icu::UnicodeString u;
  for (const uint32_t cp : decode_utf8(text)) {
    if (cp >= 0xD800 && cp <= 0xDFFF)
      u.append(static_cast<char16_t>(cp));
    else
      u.append(static_cast<UChar32>(cp > 0x10FFFF ? 0xFFFD : cp));
  }
  return u;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// "<0xAB>" -> 0xAB, or -1.
int byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  const auto hex = [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
           : c >= 'A' && c <= 'F'                      ? c - 'A' + 10
                                                       : -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

bool valid_utf8(const std::string& s) {
  return utf8_lossy(s) == s;
}

bool flag(const Json& j, const char* key, bool fallback) {
  const Json* v = j.find(key);
  return v && std::holds_alternative<bool>(v->v) ? std::get<bool>(v->v) : fallback;
}

std::string string_member(const Json& j, const char* key, const std::string& path) {
  const Json& v = member(j, key, path);
  LUM_CHECK(v.is_string()) << path << ": '" << key << "' is not a string";
  return v.string();
}

// A Replace step's literal pattern ({"String": ...}); regex patterns are refused.
std::string literal_pattern(const Json& step, const std::string& path) {
  const Json& pattern = member(step, "pattern", path);
  const Json* lit = pattern.find("String");
  LUM_CHECK(lit && lit->is_string()) << path << ": only literal Replace patterns are supported";
  return lit->string();
}

}  // namespace

struct HfTokenizer::Impl {
  using Normalize = std::function<void(icu::UnicodeString&)>;
  // One pre-tokenizer stage: a piece (and whether it starts the input) -> pieces.
  using Split =
      std::function<void(const icu::UnicodeString&, bool first, std::vector<icu::UnicodeString>&)>;
  using Decode = std::function<void(std::vector<std::string>&)>;
  std::vector<Normalize> normalizers;
  std::vector<Split> splits;
  std::vector<Decode> decoders;
  bool byte_level = false, has_decoder = false;
  bool raw_bytes = false;  // ByteLevel decoding keeps invalid UTF-8 (llama.cpp) or not (HF)
  std::array<char32_t, 256> to_char = byte_chars();
  std::unordered_map<char32_t, unsigned char> to_byte;

  static std::shared_ptr<icu::RegexPattern> compile(const std::string& pattern,
                                                    const std::string& path) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError where{};
    std::shared_ptr<icu::RegexPattern> re(icu::RegexPattern::compile(
        icu::UnicodeString::fromUTF8(to_icu_pattern(pattern)), where, status));
    LUM_CHECK(U_SUCCESS(status) && re)
        << path << ": cannot compile pre-tokenizer regex '" << pattern << "' ("
        << u_errorName(status) << " at offset " << where.offset << ")";
    return re;
  }

  // Matches and the gaps between them both become pieces ("Isolated").
  void add_regex_split(const std::string& pattern, const std::string& path) {
    splits.push_back([re = compile(pattern, path)](const icu::UnicodeString& piece, bool,
                                                   std::vector<icu::UnicodeString>& out) {
      UErrorCode status = U_ZERO_ERROR;
      std::unique_ptr<icu::RegexMatcher> m(re->matcher(piece, status));
      LUM_CHECK(U_SUCCESS(status)) << "tokenizer regex: " << u_errorName(status);
      int32_t last = 0;
      while (m->find(status)) {
        const int32_t start = m->start(status), end = m->end(status);
        if (start == end) continue;
        // Copies: a substring aliasing `piece` would dangle once the caller replaces it.
        if (start > last) out.emplace_back(piece, last, start - last);
        out.emplace_back(piece, start, end - start);
        last = end;
      }
      if (last < piece.length()) out.emplace_back(piece, last);
    });
  }

  void add_normalizer(const Json& n, const std::string& path) {
    const std::string t = type_of(n);
    if (t == "Sequence") {
      for (const Json& part : member(n, "normalizers", path).array()) add_normalizer(part, path);
      return;
    }
    if (t == "Prepend") {
      const icu::UnicodeString prefix =
          icu::UnicodeString::fromUTF8(string_member(n, "prepend", path));
      normalizers.push_back([prefix](icu::UnicodeString& u) {
        if (!u.isEmpty()) u.insert(0, prefix);
      });
      return;
    }
    if (t == "Replace") {
      const icu::UnicodeString from = icu::UnicodeString::fromUTF8(literal_pattern(n, path));
      const icu::UnicodeString to = icu::UnicodeString::fromUTF8(string_member(n, "content", path));
      normalizers.push_back([from, to](icu::UnicodeString& u) { u.findAndReplace(from, to); });
      return;
    }
    if (t == "BertNormalizer") {
      BertNormalizerOptions o;
      o.clean_text = flag(n, "clean_text", true);
      o.handle_chinese_chars = flag(n, "handle_chinese_chars", true);
      o.lowercase = flag(n, "lowercase", true);
      o.strip_accents = flag(n, "strip_accents", o.lowercase);  // null: as lowercase
      normalizers.push_back([o](icu::UnicodeString& u) { bert_normalize(u, o); });
      return;
    }
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* form = t == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                                   : t == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                   : t == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                                                 : nullptr;
    LUM_CHECK(form) << path << ": normalizer '" << t
                    << "' is not supported (supported: BertNormalizer, NFC, NFKC, NFD, Prepend, "
                       "Replace, Sequence)";
    LUM_CHECK(U_SUCCESS(status)) << "ICU normalizer " << t << ": " << u_errorName(status);
    normalizers.push_back([form](icu::UnicodeString& u) {
      UErrorCode st = U_ZERO_ERROR;
      u = form->normalize(u, st);
      LUM_CHECK(U_SUCCESS(st)) << "tokenizer normalizer: " << u_errorName(st);
    });
  }

  void add_pre_tokenizer(const Json& p, const std::string& path) {
    const std::string t = type_of(p);
    if (t == "Sequence") {
      for (const Json& part : member(p, "pretokenizers", path).array())
        add_pre_tokenizer(part, path);
    } else if (t == "Split") {
      const Json& pattern = member(p, "pattern", path);
      const Json* behavior = p.find("behavior");
      LUM_CHECK(behavior && behavior->is_string() && behavior->string() == "Isolated" &&
                !flag(p, "invert", false))
          << path << ": only Split pre-tokenizers with behavior Isolated are supported";
      if (const Json* re = pattern.find("Regex"); re && re->is_string()) {
        add_regex_split(re->string(), path);
      } else {  // a literal string: escape it into a regex
        std::string lit;
        for (char c : string_member(pattern, "String", path)) {
          if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) lit += '\\';
          lit += c;
        }
        add_regex_split(lit, path);
      }
    } else if (t == "ByteLevel") {
      byte_level = true;
      if (flag(p, "add_prefix_space", false)) {
        splits.push_back(
            [](const icu::UnicodeString& piece, bool, std::vector<icu::UnicodeString>& out) {
              out.push_back(piece.startsWith(icu::UnicodeString(u' '))
                                ? piece
                                : icu::UnicodeString(u' ') + piece);
            });
      }
      if (flag(p, "use_regex", true)) add_regex_split(kGpt2Split, path);
    } else if (t == "Metaspace") {
      // Spaces become the replacement, which is prepended per the scheme and, with
      // `split`, starts each piece.
      const icu::UnicodeString mark =
          icu::UnicodeString::fromUTF8(string_member(p, "replacement", path));
      const Json* scheme_json = p.find("prepend_scheme");
      const std::string scheme = scheme_json && scheme_json->is_string() ? scheme_json->string()
                                 : flag(p, "add_prefix_space", true)     ? "always"
                                                                         : "never";
      LUM_CHECK(scheme == "always" || scheme == "first" || scheme == "never")
          << path << ": Metaspace prepend_scheme '" << scheme << "' is unknown";
      const bool split = flag(p, "split", true);
      splits.push_back([mark, scheme, split](const icu::UnicodeString& piece, bool first,
                                             std::vector<icu::UnicodeString>& out) {
        icu::UnicodeString u = piece;
        u.findAndReplace(icu::UnicodeString(u' '), mark);
        if ((scheme == "always" || (scheme == "first" && first)) && !u.startsWith(mark))
          u.insert(0, mark);
        if (!split) {
          out.push_back(u);
          return;
        }
        int32_t begin = 0;
        for (int32_t at = u.indexOf(mark, 1); at >= 0; at = u.indexOf(mark, at + 1)) {
          out.emplace_back(u, begin, at - begin);
          begin = at;
        }
        if (begin < u.length()) out.emplace_back(u, begin);
      });
    } else if (t == "BertPreTokenizer") {
      splits.push_back([](const icu::UnicodeString& piece, bool, std::vector<icu::UnicodeString>& out) {
        bert_pre_tokenize(piece, out);
      });
    } else {
      LUM_FAIL() << path << ": pre-tokenizer '" << t
                 << "' is not supported (supported: BertPreTokenizer, ByteLevel, Metaspace, "
                    "Split, Sequence)";
    }
  }

  void add_decoder(const Json& d, const std::string& path) {
    has_decoder = true;
    const std::string t = type_of(d);
    if (t == "Sequence") {
      for (const Json& part : member(d, "decoders", path).array()) add_decoder(part, path);
    } else if (t == "ByteLevel") {
      decoders.push_back([this](std::vector<std::string>& tokens) {
        std::string bytes;
        for (const std::string& tok : tokens) {
          const icu::UnicodeString u = icu::UnicodeString::fromUTF8(tok);
          for (int32_t k = 0; k < u.length(); k = u.moveIndex32(k, 1)) {
            const auto c = static_cast<char32_t>(u.char32At(k));
            const auto it = to_byte.find(c);
            bytes += it != to_byte.end() ? std::string(1, static_cast<char>(it->second))
                                         : encode_utf8(c);
          }
        }
        tokens = {raw_bytes ? bytes : utf8_lossy(bytes)};
      });
    } else if (t == "WordPiece") {
      const Json* prefix = d.find("prefix");
      const std::string p = prefix && prefix->is_string() ? prefix->string() : "##";
      const bool cleanup = flag(d, "cleanup", true);
      // Continuations lose the prefix, other pieces get a space before them; the clean-up
      // takes out spaces before punctuation and English contractions.
      decoders.push_back([p, cleanup](std::vector<std::string>& tokens) {
        for (size_t i = 0; i < tokens.size(); ++i) {
          std::string& t = tokens[i];
          if (i > 0) {
            if (t.compare(0, p.size(), p) == 0)
              t.erase(0, p.size());
            else
              t = " " + t;
          }
          if (!cleanup) continue;
          for (const auto& [from, to] : std::initializer_list<std::pair<const char*, const char*>>{
                   {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
                   {" n't", "n't"}, {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"},
                   {" 've", "'ve"}, {" 're", "'re"}})
            replace_all(t, from, to);
        }
      });
    } else if (t == "Replace") {
      const std::string from = literal_pattern(d, path), to = string_member(d, "content", path);
      decoders.push_back([from, to](std::vector<std::string>& tokens) {
        for (std::string& tok : tokens) replace_all(tok, from, to);
      });
    } else if (t == "ByteFallback") {
      // Runs of <0xXX> tokens become their UTF-8 text, or one U+FFFD per byte if invalid.
      decoders.push_back([](std::vector<std::string>& tokens) {
        std::vector<std::string> out;
        std::string run;
        size_t run_len = 0;
        const auto flush = [&] {
          if (!run_len) return;
          if (valid_utf8(run))
            out.push_back(run);
          else
            out.insert(out.end(), run_len, "\xEF\xBF\xBD");
          run.clear();
          run_len = 0;
        };
        for (const std::string& tok : tokens) {
          if (const int b = byte_token(tok); b >= 0) {
            run += static_cast<char>(b);
            ++run_len;
          } else {
            flush();
            out.push_back(tok);
          }
        }
        flush();
        tokens = std::move(out);
      });
    } else if (t == "Fuse") {
      decoders.push_back([](std::vector<std::string>& tokens) {
        std::string all;
        for (const std::string& tok : tokens) all += tok;
        tokens = {all};
      });
    } else if (t == "Strip") {
      const std::string content = string_member(d, "content", path);
      const int64_t start = member(d, "start", path).integer(),
                    stop = member(d, "stop", path).integer();
      decoders.push_back([content, start, stop](std::vector<std::string>& tokens) {
        for (std::string& tok : tokens) {
          for (int64_t k = 0; k < start && tok.compare(0, content.size(), content) == 0; ++k)
            tok.erase(0, content.size());
          for (int64_t k = 0;
               k < stop && tok.size() >= content.size() &&
               tok.compare(tok.size() - content.size(), content.size(), content) == 0;
               ++k)
            tok.resize(tok.size() - content.size());
        }
      });
    } else if (t == "Metaspace") {
      const std::string mark = string_member(d, "replacement", path);
      const Json* scheme = d.find("prepend_scheme");
      const bool strip_first = !(scheme && scheme->is_string() && scheme->string() == "never");
      decoders.push_back([mark, strip_first](std::vector<std::string>& tokens) {
        for (size_t i = 0; i < tokens.size(); ++i) {
          replace_all(tokens[i], mark, " ");
          if (i == 0 && strip_first && !tokens[i].empty() && tokens[i][0] == ' ')
            tokens[i].erase(0, 1);
        }
      });
    } else {
      LUM_FAIL() << path << ": decoder '" << t
                 << "' is not supported (supported: ByteLevel, ByteFallback, Fuse, Metaspace, "
                    "Replace, Strip, "
                    "Sequence)";
    }
  }

  std::vector<icu::UnicodeString> pre_tokenize(const icu::UnicodeString& text, bool first) const {
    std::vector<icu::UnicodeString> pieces{text};
    for (const Split& split : splits) {
      std::vector<icu::UnicodeString> next;
      for (size_t i = 0; i < pieces.size(); ++i) split(pieces[i], first && i == 0, next);
      pieces = std::move(next);
    }
    return pieces;
  }
};

HfTokenizer::~HfTokenizer() = default;
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;

HfTokenizer::HfTokenizer(const std::string& path) {
  load(read_json_object(path, "tokenizer"), path);
}

void HfTokenizer::follow_llama_cpp(std::unordered_set<int32_t> silent_ids) {
  llama_cpp_rules_ = true;
  impl_->raw_bytes = true;
  silent_ids_ = std::move(silent_ids);
}

HfTokenizer::HfTokenizer() : impl_(std::make_unique<Impl>()) {}

void HfTokenizer::load(const Json& j, const std::string& path) {
  impl_ = std::make_unique<Impl>();

  const Json& model = member(j, "model", path);
  const std::string model_type = type_of(model);
  LUM_CHECK(model_type == "BPE" || model_type == "Unigram" || model_type == "WordPiece")
      << path << ": tokenizer model '" << model_type
      << "' is not supported (supported: BPE, Unigram, WordPiece)";
  unigram_ = model_type == "Unigram";
  wordpiece_ = model_type == "WordPiece";
  if (wordpiece_) {
    const Json* prefix = model.find("continuing_subword_prefix");
    if (prefix && prefix->is_string()) subword_prefix_ = prefix->string();
    const Json* max = model.find("max_input_chars_per_word");
    if (max && max->is_int()) max_word_chars_ = max->integer();
  }
  ignore_merges_ = flag(model, "ignore_merges", false);
  byte_fallback_ = flag(model, "byte_fallback", false);
  fuse_unk_ = flag(model, "fuse_unk", unigram_);  // Unigram always fuses
  const auto add_token = [&](const std::string& token, const Json& id) {
    LUM_CHECK(id.is_int() && id.integer() >= 0 && id.integer() < (1 << 24))
        << path << ": id of token '" << token << "' is not an integer in [0, 2^24)";
    const auto i = static_cast<size_t>(id.integer());
    if (i >= tokens_.size()) tokens_.resize(i + 1), scores_.resize(i + 1, 0.0);
    tokens_[i] = token;
    ids_[token] = static_cast<int32_t>(i);
    return i;
  };
  const Json& vocab = member(model, "vocab", path);
  if (unigram_) {  // [[piece, score], ...] in id order
    LUM_CHECK(vocab.is_array()) << path << ": Unigram vocab is not an array";
    for (size_t i = 0; i < vocab.array().size(); ++i) {
      const Json& entry = vocab.array()[i];
      LUM_CHECK(entry.is_array() && entry.array().size() == 2 && entry.array()[0].is_string() &&
                entry.array()[1].is_number())
          << path << ": Unigram vocab entry " << i << " is not [piece, score]";
      add_token(entry.array()[0].string(), Json{static_cast<int64_t>(i)});
      scores_[i] = entry.array()[1].number();
      max_piece_bytes_ = std::max(max_piece_bytes_, entry.array()[0].string().size());
    }
    min_score_ = scores_.empty() ? 0.0 : *std::min_element(scores_.begin(), scores_.end());
    if (const Json* unk = model.find("unk_id"); unk && unk->is_int()) {
      LUM_CHECK(unk->integer() >= 0 && static_cast<size_t>(unk->integer()) < tokens_.size())
          << path << ": unk_id " << unk->integer() << " is out of range";
      unk_ = static_cast<int32_t>(unk->integer());
    }
  } else {
    LUM_CHECK(vocab.is_object()) << path << ": " << model_type << " vocab is not an object";
    for (const auto& [token, id] : vocab.object()) add_token(token, id);
    if (const Json* unk = model.find("unk_token"); unk && unk->is_string()) {
      unk_ = find(unk->string());
      LUM_CHECK(unk_ >= 0) << path << ": unk_token '" << unk->string()
                           << "' is not in the vocabulary";
    }
  }
  if (const Json* added = j.find("added_tokens"); added && added->is_array()) {
    std::vector<std::pair<std::string, int32_t>> specials;
    for (const Json& a : added->array()) {
      const std::string content = string_member(a, "content", path);
      specials.emplace_back(content, static_cast<int32_t>(add_token(content, member(a, "id", path))));
    }
    added_ = SpecialTokens(specials);
  }

  if (!unigram_ && !wordpiece_) {
    const Json& merges = member(model, "merges", path);
    LUM_CHECK(merges.is_array()) << path << ": model.merges is not an array";
    int32_t rank = 0;
    for (const Json& m : merges.array()) {
      std::string left, right;
      if (m.is_string()) {  // "a b"
        const size_t sp = m.string().find(' ', 1);
        LUM_CHECK(sp != std::string::npos) << path << ": merge '" << m.string() << "' has no space";
        left = m.string().substr(0, sp), right = m.string().substr(sp + 1);
      } else {
        LUM_CHECK(m.is_array() && m.array().size() == 2 && m.array()[0].is_string() &&
                  m.array()[1].is_string())
            << path << ": merge " << rank << " is not a pair of strings";
        left = m.array()[0].string(), right = m.array()[1].string();
      }
      const int32_t a = find(left), b = find(right), merged = find(left + right);
      LUM_CHECK(a >= 0 && b >= 0 && merged >= 0) << path << ": merge '" << left << " " << right
                                                 << "' names a token missing from the vocabulary";
      merges_.emplace((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b),
                      std::pair{rank++, merged});
    }
  }

  if (const Json* n = j.find("normalizer"); n && n->is_object()) impl_->add_normalizer(*n, path);
  if (const Json* p = j.find("pre_tokenizer"); p && p->is_object())
    impl_->add_pre_tokenizer(*p, path);
  if (const Json* d = j.find("decoder"); d && d->is_object()) impl_->add_decoder(*d, path);
  if (const Json* p = j.find("post_processor"); p && p->is_object()) add_post_processor(*p, path);
  for (int b = 0; b < 256; ++b)
    impl_->to_byte[impl_->to_char[static_cast<size_t>(b)]] = static_cast<unsigned char>(b);
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      char name[7];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids_[static_cast<size_t>(b)] = find(name);
    }
  }
}

// The special tokens a TemplateProcessing step puts around a single sequence; other
// post-processors (ByteLevel offsets, BERT's, RoBERTa's) add none to a plain encode here.
void HfTokenizer::add_post_processor(const Json& p, const std::string& path) {
  const std::string type = type_of(p);
  if (type == "Sequence") {
    for (const Json& part : member(p, "processors", path).array()) add_post_processor(part, path);
    return;
  }
  if (type != "TemplateProcessing") return;
  const Json& specials = member(p, "special_tokens", path);
  bool seen_text = false;
  for (const Json& item : member(p, "single", path).array()) {
    if (item.find("Sequence")) {
      seen_text = true;
      continue;
    }
    const Json* special = item.find("SpecialToken");
    LUM_CHECK(special && special->is_object())
        << path << ": post_processor.single has an item that is neither Sequence nor SpecialToken";
    const std::string name = string_member(*special, "id", path);
    const Json* entry = specials.find(name);
    LUM_CHECK(entry && entry->is_object())
        << path << ": post_processor names special token '" << name << "' without its ids";
    for (const Json& id : member(*entry, "ids", path).array()) {
      LUM_CHECK(id.is_int() && id.integer() >= 0 && static_cast<size_t>(id.integer()) < tokens_.size())
          << path << ": special token '" << name << "' has an id outside the vocabulary";
      (seen_text ? template_suffix_ : template_prefix_).push_back(static_cast<int32_t>(id.integer()));
    }
  }
}

int32_t HfTokenizer::find(const std::string& token) const {
  const auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

// Unknown text as <0xXX> byte tokens when the vocabulary has them all, else <unk>.
void HfTokenizer::encode_unknown(const std::string& text, bool& last_unk,
                                 std::vector<int32_t>& out) const {
  const bool bytes_known = byte_fallback_ && std::all_of(text.begin(), text.end(), [&](char b) {
                             return byte_ids_[static_cast<unsigned char>(b)] >= 0;
                           });
  if (bytes_known) {
    for (char b : text) out.push_back(byte_ids_[static_cast<unsigned char>(b)]);
    last_unk = false;
    return;
  }
  LUM_CHECK(unk_ >= 0) << "tokenizer cannot encode '" << text
                       << "': not in the vocabulary and no unknown token";
  if (!(fuse_unk_ && last_unk)) out.push_back(unk_);
  last_unk = true;
}

// Unigram: the segmentation with the highest total score (Viterbi over byte offsets);
// a character no piece covers costs the lowest score minus 10, as in the library.
void HfTokenizer::encode_unigram(const std::string& word, std::vector<int32_t>& out) const {
  struct Best {
    double score = 0;
    size_t from = 0;
    int32_t id = -1;
    bool reached = false;
  };
  std::vector<Best> best(word.size() + 1);
  best[0].reached = true;
  const double unk_score = min_score_ - 10.0;
  const auto char_len = [&](size_t at) {  // words come from ICU, so they are valid UTF-8
    return std::min(std::max<size_t>(utf8_length(static_cast<unsigned char>(word[at])), 1),
                    word.size() - at);
  };
  const auto relax = [&](size_t from, size_t to, double score, int32_t id) {
    const double candidate = best[from].score + score;
    if (!best[to].reached || candidate > best[to].score) best[to] = {candidate, from, id, true};
  };
  for (size_t at = 0; at < word.size(); at += char_len(at)) {
    if (!best[at].reached) continue;
    bool single = false;
    for (size_t end = at + char_len(at); end - at <= max_piece_bytes_;) {
      if (const auto it = ids_.find(word.substr(at, end - at)); it != ids_.end()) {
        relax(at, end, scores_[static_cast<size_t>(it->second)], it->second);
        single = single || end == at + char_len(at);
      }
      if (end == word.size()) break;
      end += char_len(end);
    }
    if (!single) relax(at, at + char_len(at), unk_score, -1);
  }
  std::vector<std::pair<size_t, int32_t>> path;  // (start, id), backwards
  for (size_t at = word.size(); at > 0; at = best[at].from)
    path.emplace_back(best[at].from, best[at].id);
  std::reverse(path.begin(), path.end());
  bool last_unk = false;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i].second >= 0) {
      out.push_back(path[i].second);
      last_unk = false;
      continue;
    }
    // Consecutive unknown characters fuse into one piece before any byte fallback.
    size_t j = i;
    while (j + 1 < path.size() && path[j + 1].second < 0) ++j;
    const size_t end = j + 1 < path.size() ? path[j + 1].first : word.size();
    encode_unknown(word.substr(path[i].first, end - path[i].first), last_unk, out);
    i = j;
  }
}

void HfTokenizer::encode_word(const std::string& word, std::vector<int32_t>& out) const {
  if (unigram_) return encode_unigram(word, out);
  if (wordpiece_)
    return wordpiece_encode(word, [this](const std::string& t) { return find(t); }, subword_prefix_,
                            max_word_chars_, unk_, out);
  std::vector<int32_t> symbols;
  std::string mapped;       // the word in the vocabulary's alphabet
  if (impl_->byte_level) {  // each byte becomes one printable character
    for (unsigned char b : word) {
      const std::string c = encode_utf8(impl_->to_char[b]);
      mapped += c;
      const int32_t id = find(c);
      LUM_CHECK(id >= 0) << "tokenizer vocabulary lacks the byte-level character for byte "
                         << static_cast<int>(b);
      symbols.push_back(id);
    }
  } else {  // characters; unknown ones fall back to <0xXX> bytes or <unk>
    mapped = word;
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(word);
    bool last_unk = false;
    for (int32_t k = 0; k < u.length(); k = u.moveIndex32(k, 1)) {
      const std::string c = encode_utf8(static_cast<uint32_t>(u.char32At(k)));
      if (const int32_t id = find(c); id >= 0) {
        symbols.push_back(id);
        last_unk = false;
        continue;
      }
      const bool bytes_known = byte_fallback_ && std::all_of(c.begin(), c.end(), [&](char b) {
                                 return byte_ids_[static_cast<unsigned char>(b)] >= 0;
                               });
      if (bytes_known) {
        for (char b : c) symbols.push_back(byte_ids_[static_cast<unsigned char>(b)]);
        last_unk = false;
        continue;
      }
      LUM_CHECK(unk_ >= 0) << "tokenizer cannot encode '" << c
                           << "': not in the vocabulary and no unk_token";
      if (!(fuse_unk_ && last_unk)) symbols.push_back(unk_);
      last_unk = true;
    }
  }
  if (ignore_merges_) {
    if (const int32_t whole = find(mapped); whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  merge_symbols(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

// Repeatedly merges the adjacent pair of lowest rank (the leftmost of equal ranks), as
// the library does. A heap of candidate pairs over a linked list keeps this O(n log n):
// a word without pre-tokenizer (SentencePiece-style files) can be a whole document.
void HfTokenizer::merge_symbols(std::vector<int32_t>& symbols) const {
  const size_t n = symbols.size();
  if (n < 2) return;
  std::vector<int64_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) prev[i] = static_cast<int64_t>(i) - 1, next[i] = static_cast<int64_t>(i) + 1;
  next[n - 1] = -1;
  struct Pair {
    int32_t rank;
    int64_t left;
    int32_t left_id, right_id, merged;
    bool operator>(const Pair& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Pair, std::vector<Pair>, std::greater<>> queue;
  const auto consider = [&](int64_t l) {
    if (l < 0 || next[static_cast<size_t>(l)] < 0) return;
    const int32_t a = symbols[static_cast<size_t>(l)];
    const int32_t b = symbols[static_cast<size_t>(next[static_cast<size_t>(l)])];
    const auto it = merges_.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    if (it != merges_.end()) queue.push({it->second.first, l, a, b, it->second.second});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<int64_t>(i));
  std::vector<bool> gone(n, false);
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    const auto l = static_cast<size_t>(p.left);
    const int64_t r = next[l];
    // Stale: a side was merged away or into something else since the pair was queued.
    if (gone[l] || r < 0 || symbols[l] != p.left_id || symbols[static_cast<size_t>(r)] != p.right_id)
      continue;
    symbols[l] = p.merged;
    gone[static_cast<size_t>(r)] = true;
    next[l] = next[static_cast<size_t>(r)];
    if (next[l] >= 0) prev[static_cast<size_t>(next[l])] = p.left;
    consider(prev[l]);
    consider(p.left);
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i)
    if (!gone[i]) symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

std::vector<int32_t> HfTokenizer::encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int32_t> out;
  if (add_special_tokens) out = template_prefix_;
  const auto encode_plain = [&](const std::string& segment, bool first) {
    if (segment.empty()) return;
    icu::UnicodeString u =
        llama_cpp_rules_ ? lenient_utf16(segment) : icu::UnicodeString::fromUTF8(segment);
    for (const auto& normalize : impl_->normalizers) normalize(u);
    for (const icu::UnicodeString& piece : impl_->pre_tokenize(u, first))
      encode_word(llama_cpp_rules_ ? to_utf8_keeping_surrogates(piece) : to_utf8(piece), out);
  };
  // Added tokens are matched in the raw text; the text between them is normalised and
  // pre-tokenised on its own.
  const auto order = llama_cpp_rules_ ? SpecialTokens::Order::kLongestFirst
                                      : SpecialTokens::Order::kLeftmostLongest;
  for (const auto& s : added_.split(text, order)) {
    if (s.id >= 0)
      out.push_back(s.id);
    else
      encode_plain(text.substr(s.start, s.size), s.start == 0);
  }
  if (add_special_tokens) out.insert(out.end(), template_suffix_.begin(), template_suffix_.end());
  return out;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    LUM_CHECK(id >= 0 && static_cast<size_t>(id) < tokens_.size())
        << "token id " << id << " is out of range";
    if (!silent_ids_.count(id)) tokens.push_back(tokens_[static_cast<size_t>(id)]);
  }
  if (!impl_->has_decoder) {  // as the tokenizers library: tokens joined by spaces
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  for (const auto& step : impl_->decoders) step(tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace luminal::models
