// Timing a kernel's candidates and remembering the winner (see search.hpp).
#include "runtime/search.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "luminal/error.hpp"
#include "luminal/hash.hpp"
#include "runtime/build_id.hpp"
#include "runtime/env.hpp"
#include "runtime/kernel_cache.hpp"
#include "runtime/program.hpp"

namespace luminal::runtime {
namespace {

constexpr const char* kMagic = "luminal-search 1";

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

double steady_time(const SearchCandidate& c) {
  const auto start = std::chrono::steady_clock::now();
  c.run();
  return seconds_since(start);
}

std::string cache_path(const std::string& key) {
  return cache_dir() + "/search-" + hex(hash_bytes(key));
}

}  // namespace

std::string search_cache_key(const std::string& context, const std::string& signature,
                             const std::vector<std::string>& labels) {
  std::string key = std::string("luminal ") + LUMINAL_VERSION + " " + std::string(build_id()) +
                    "\n" + context + "\n" + signature + "\n";
  for (const std::string& label : labels) key += label + ";";
  return key;
}

std::optional<size_t> remembered_winner(const std::string& key,
                                        const std::vector<std::string>& labels) {
  const std::string path = cache_path(key);
  if (!std::filesystem::exists(path)) return std::nullopt;
  // A winner is trusted only where the whole file reads back: the header, this exact key
  // (no hash collision) and one of today's candidates.
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string want = std::string(kMagic) + "\n" + key + "\nwinner ";
  const std::string got = text.str();
  std::string why = "it does not parse";
  if (got.rfind(want, 0) == 0 && got.back() == '\n') {
    const std::string label = got.substr(want.size(), got.size() - want.size() - 1);
    for (size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == label) return i;
    why = "it names no candidate (" + label + ")";
  }
  std::fprintf(stderr,
               "luminal: warning: ignoring the search cache entry %s: %s; searching again\n",
               path.c_str(), why.c_str());
  return std::nullopt;
}

void remember_winner(const std::string& key, const std::string& label) {
  const std::string path = cache_path(key);
  const std::string tmp = path + "." + unique_tag() + ".tmp";
  std::ofstream(tmp) << kMagic << "\n" << key << "\nwinner " << label << "\n";
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

SearchMode parse_search_mode(const std::string& text, const std::string& what) {
  if (text == "off") return SearchMode::Off;
  if (text == "fast") return SearchMode::Fast;
  if (text == "full") return SearchMode::Full;
  throw Error(what + "=" + text + ": expected off, fast or full");
}

SearchSettings search_settings_from_env() {
  SearchSettings s;
  if (const char* m = std::getenv("LUMINAL_SEARCH"); m && *m)
    s.mode = parse_search_mode(m, "LUMINAL_SEARCH");
  s.budget_seconds = s.mode == SearchMode::Full ? 120 : 10;
  if (const char* b = std::getenv("LUMINAL_SEARCH_BUDGET"); b && *b) {
    char* end = nullptr;
    const double v = std::strtod(b, &end);
    LUM_CHECK(*end == '\0' && v >= 0 && v <= 1e6)
        << "LUMINAL_SEARCH_BUDGET=" << b << ": expected seconds, a number from 0 to 1e6";
    s.budget_seconds = v;
  }
  if (const char* p = std::getenv("LUMINAL_SEARCH_PICK")) s.pick = p;
  return s;
}

std::string output_mismatch(const float* got, const std::vector<float>& reference,
                            double tolerance) {
  // Across threads where large (a language model's logits: 131 M a candidate), each
  // taking a run of elements: the largest finite magnitude, then each run's first element
  // out of bounds (an infinity matching the same one, NaN any NaN), the earliest named.
  const size_t n = reference.size();
  const bool large = n >= (size_t{1} << 20);
  double scale = 0;
#pragma omp parallel if (large)
  {
    double mine = 0;
#pragma omp for schedule(static) nowait
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(reference[i]))
        mine = std::max(mine, static_cast<double>(std::fabs(reference[i])));
#pragma omp critical
    scale = std::max(scale, mine);
  }
  size_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first) if (large)
  for (size_t i = 0; i < n; ++i)
    if (i < first && got[i] != reference[i] &&
        !(std::fabs(static_cast<double>(got[i]) - reference[i]) <= tolerance * scale) &&
        !(std::isnan(got[i]) && std::isnan(reference[i])))
      first = i;
  return first < n ? mismatch_at(first, got[first], reference[first]) : "";
}

std::string mismatch_at(size_t i, float got, float reference) {
  return "element " + std::to_string(i) + " is " + std::to_string(got) + ", the pick's " +
         std::to_string(reference);
}

Searcher::Searcher(std::string context, SearchSettings settings, std::string subject)
    : context_(std::move(context)), settings_(settings), subject_(std::move(subject)) {}

Searcher::~Searcher() {
  if (progress_shown_) std::fputs("\r\033[K", stderr);
  if (env_has("LUMINAL_LOG", "info") && searched_ + cached_ > 0)
    std::fprintf(stderr,
                 "luminal: search: %zu %s timed in %.2f s (budget %.0f s), %zu winners "
                 "read from the cache\n",
                 searched_, subject_.c_str(), spent_, settings_.budget_seconds, cached_);
}

SearchResult Searcher::choose(const SearchProblem& p) {
  LUM_CHECK(!p.candidates.empty())
      << "internal: search for " << p.signature << " without candidates";
  SearchResult r;
  if (settings_.mode == SearchMode::Off || p.candidates.size() == 1) return r;
  std::vector<std::string> labels;
  for (const SearchCandidate& c : p.candidates) labels.push_back(c.label);
  // A pick names a candidate whole, or else the first whose label holds it.
  if (!settings_.pick.empty()) {
    auto named = std::find(labels.begin(), labels.end(), settings_.pick);
    if (named == labels.end())
      named = std::find_if(labels.begin(), labels.end(), [&](const std::string& l) {
        return l.find(settings_.pick) != std::string::npos;
      });
    if (named != labels.end()) {
      r.winner = static_cast<size_t>(named - labels.begin());
      return r;
    }
  }
  const std::string key = search_cache_key(context_, p.signature, labels);
  if (settings_.use_cache)
    if (const std::optional<size_t> w = remembered_winner(key, labels)) {
      r.winner = *w;
      r.cached = true;
      ++cached_;
      if (env_has("LUMINAL_LOG", "info"))
        std::fprintf(stderr, "luminal: search %s: %s (cached)\n", p.signature.c_str(),
                     labels[*w].c_str());
      return r;
    }
  if (spent_ >= settings_.budget_seconds) return r;
  const double spent_before = spent_;
  r = search(p);
  ++searched_;
  dump(p, r);
  const SearchTrial& win = r.trials[r.winner];
  if (env_has("LUMINAL_LOG", "info")) {
    const SearchTrial& pick = r.trials[0];
    std::fprintf(stderr,
                 "luminal: search %s: %s %.4f ms; the cost model's pick %s %.4f ms (%.2fx), %zu "
                 "candidates in %.2f s\n",
                 p.signature.c_str(), win.label.c_str(), win.median * 1e3, pick.label.c_str(),
                 pick.median * 1e3, win.median > 0 ? pick.median / win.median : 1.0,
                 p.candidates.size(), spent_ - spent_before);
  }
  // Cached only where every candidate was judged: a budget that ran out decided nothing.
  const bool complete = std::none_of(r.trials.begin(), r.trials.end(), [](const SearchTrial& t) {
    return t.verdict.rfind("skipped", 0) == 0;
  });
  if (settings_.use_cache && complete) remember_winner(key, win.label);
  return r;
}

SearchResult Searcher::search(const SearchProblem& p) {
  const int runs = settings_.mode == SearchMode::Full ? 15 : 5;
  const auto time = [&](const SearchCandidate& c) { return p.time ? p.time(c) : steady_time(c); };
  SearchResult r;
  r.searched = true;
  double best = 0;  // the best median so far (0: none)
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    const SearchCandidate& c = p.candidates[i];
    SearchTrial t{c.label, {}, 0, ""};
    // The reference is always judged, so there is a winner however small the budget.
    if (i > 0 && !p.finish_once_begun &&
        spent_ + seconds_since(start) >= settings_.budget_seconds) {
      t.verdict = "skipped: budget";
      r.trials.push_back(t);
      continue;
    }
    c.run();
    if (i == 0) {
      p.keep_reference();
    } else if (const std::string why = p.mismatch(); !why.empty()) {
      t.verdict = "wrong: " + why;
      if (env_has("LUMINAL_LOG", "info"))
        std::fprintf(stderr, "luminal: search %s: candidate %s is wrong: %s\n", p.signature.c_str(),
                     c.label.c_str(), why.c_str());
      r.trials.push_back(t);
      continue;
    }
    t.verdict = "correct";
    for (int k = 0; k < runs; ++k) {
      t.seconds.push_back(time(c));
      if (best > 0 && k + 1 >= 3 &&
          *std::min_element(t.seconds.begin(), t.seconds.end()) > 2 * best) {
        t.verdict = "slow";
        break;
      }
    }
    t.median = median(t.seconds);
    const double bar =
        i == 0 && p.reference_seconds > 0 ? std::min(t.median, p.reference_seconds) : t.median;
    if (t.verdict == "correct" && (best == 0 || bar < best)) {
      best = bar;
      r.winner = i;
    }
    r.trials.push_back(t);
    progress(p, i + 1, best, start, false);
  }
  r.trials[r.winner].verdict = "winner";
  spent_ += seconds_since(start);
  progress(p, p.candidates.size(), best, start, true);
  return r;
}

void Searcher::progress(const SearchProblem& p, size_t done, double best,
                        std::chrono::steady_clock::time_point start, bool end) {
  if (!isatty(2)) return;
  if (end) {
    std::fputs("\r\033[K", stderr);
    return;
  }
  std::fprintf(stderr, "\r\033[Kluminal: searching %.60s: %zu/%zu, best %.4f ms, %.1f s left",
               p.signature.c_str(), done, p.candidates.size(), best * 1e3,
               std::max(0.0, settings_.budget_seconds - spent_ - seconds_since(start)));
  progress_shown_ = true;
}

void Searcher::dump(const SearchProblem& p, const SearchResult& r) {
  if (!env_has("LUMINAL_DUMP", "search") && !env_has("LUMINAL_DUMP", "all")) return;
  nlohmann::json candidates = nlohmann::json::array();
  for (const SearchTrial& t : r.trials)
    candidates.push_back({{"label", t.label},
                          {"verdict", t.verdict},
                          {"median_s", t.median},
                          {"runs_s", t.seconds}});
  // Every Searcher of the process adds to one file (a compiled program has one for its
  // extractions and one for its kernels' library calls): the entries this process wrote
  // there, kept here, are written again with the new one, so a file left by an earlier
  // process is replaced.
  static std::mutex mutex;
  static std::map<std::filesystem::path, nlohmann::json> written;
  const std::lock_guard<std::mutex> lock(mutex);
  const std::filesystem::path file = dump_dir() / "search.json";
  nlohmann::json& entries = written.try_emplace(file, nlohmann::json::array()).first->second;
  if (entries.empty()) std::fprintf(stderr, "luminal: dumping search to %s\n", file.c_str());
  entries.push_back({{"signature", p.signature}, {"candidates", candidates}});
  std::ofstream out(file);
  out << "[";
  for (size_t i = 0; i < entries.size(); ++i) out << (i ? ",\n  " : "\n  ") << entries[i].dump();
  out << "\n]\n";
}

}  // namespace luminal::runtime
