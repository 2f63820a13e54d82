// Search: the fastest correct way to run a kernel, found by timing its candidates on the
// machine at hand rather than trusting a cost model, and remembered on disk.
//
// Backend-neutral: a backend describes a kernel's candidates (ways to run the same
// kernel: a library's algorithms, tile sizes, split factors), how to keep and compare an
// output, and how to time a run (device events on a GPU). The first candidate is the
// cost model's pick and the reference the others are checked against, so search never
// returns something wrong, nor, within the timing's noise, slower than no search. Judged
// candidate by candidate: one checked run (which also warms up), then timed runs (5
// fast, 15 full), the median kept; a candidate slower than twice the best so far after
// three runs stops there. Winners are cached in the kernel cache directory by the
// kernel's signature and the context (device, driver or compiler, luminal's version); a
// cache entry that does not parse or names no candidate is ignored with a warning and
// replaced.
//
// LUMINAL_SEARCH=off|fast|full (default fast) and LUMINAL_SEARCH_BUDGET=SECONDS (the time
// a Searcher may spend timing; default 10 fast, 120 full): past the budget, kernels take
// the cost model's pick, uncached, so a later process with time left searches them. While
// searching, a progress line on stderr (a terminal); LUMINAL_LOG=info prints each
// kernel's winner against the cost model's pick, and when the Searcher goes (with its
// executable) how many kernels it timed, in how long; LUMINAL_DUMP=search writes every
// candidate's times and verdict to search.json. LUMINAL_SEARCH_PICK=TEXT runs, among a
// kernel's candidates, the one labelled TEXT, else the first whose label contains TEXT,
// untimed and not remembered (to try or test one way; kernels without such a candidate
// search as before).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace luminal::runtime {

enum class SearchMode { Off, Fast, Full };

struct SearchSettings {
  SearchMode mode = SearchMode::Fast;
  double budget_seconds = 10;  // timing a Searcher may do in all
  bool use_cache = true;       // read and write winners in cache_dir()
  std::string pick;            // a candidate whose label contains it wins untimed
};

/// The settings LUMINAL_SEARCH, LUMINAL_SEARCH_BUDGET and LUMINAL_SEARCH_PICK ask for; a
/// malformed value is an Error naming the variable and what it takes.
SearchSettings search_settings_from_env();

/// "off", "fast" or "full" as a mode; anything else an Error naming `what`.
SearchMode parse_search_mode(const std::string& text, const std::string& what);

struct SearchCandidate {
  std::string label;          // what the cache remembers: the same from run to run
  std::function<void()> run;  // one run, writing the kernel's output
};

struct SearchProblem {
  /// What fixes the winner besides the context: kernel kind, shapes, dtypes, strides.
  std::string signature;
  /// candidates[0] is the cost model's pick and the reference.
  std::vector<SearchCandidate> candidates;
  /// Called after the reference's run: keep its output.
  std::function<void()> keep_reference;
  /// Called after another candidate's run: "" where its output matches the kept one at
  /// the dtype's tolerance, else what differs.
  std::function<std::string()> mismatch;
  /// One run of a candidate, timed in seconds; empty: a steady clock around run() (for
  /// a GPU, device events with the stream synchronised).
  std::function<double(const SearchCandidate&)> time;
  /// Every candidate judged once the search has begun, past the budget too: where the
  /// first judgement is most of the cost (whole programs, compiled when first run), a
  /// search cut short would be paid again by every later process, since only a whole
  /// search is cached.
  bool finish_once_begun = false;
  /// A time the reference was measured at before (the program search's last round, where
  /// it won), or 0: a candidate must then beat the smaller of that and the reference's
  /// median here, so that one slow measurement of the reference does not let a program
  /// slower than it win.
  double reference_seconds = 0;
};

/// One candidate's judgement.
struct SearchTrial {
  std::string label;
  std::vector<double> seconds;  // the timed runs
  double median = 0;
  std::string verdict;  // "winner", "correct", "wrong: ...", "slow", "skipped: budget"
};

struct SearchResult {
  size_t winner = 0;  // index into the candidates
  bool cached = false;
  bool searched = false;  // candidates were timed (not: cached, search off, budget spent)
  std::vector<SearchTrial> trials;
};

/// The search cache, shared by the Searcher and choices timed in place (the CPU's prefetch
/// distance): a winner is remembered under a key of luminal's version and build (a hash of
/// its sources: another build's measurements are not this one's), the `context`, the
/// kernel's `signature` and every candidate's label, so a kernel whose candidates change
/// is searched again.
std::string search_cache_key(const std::string& context, const std::string& signature,
                             const std::vector<std::string>& labels);
/// The winner remembered for `key` among `labels` (its index), or nothing. An entry that
/// does not read back whole (another key, a label not among them, cut short, garbage) is
/// ignored with a warning.
std::optional<size_t> remembered_winner(const std::string& key,
                                        const std::vector<std::string>& labels);
/// Remembers `label` as `key`'s winner (written aside and renamed: a concurrent reader
/// sees all of it or none; not remembering is no error).
void remember_winner(const std::string& key, const std::string& label);

/// How a candidate's output differs from the reference's: "" where every element is
/// within `tolerance` times the reference's largest finite magnitude (NaN only where the
/// reference has NaN, an infinity only where it has the same one), else the first element
/// that is not (for SearchProblem::mismatch).
std::string output_mismatch(const float* got, const std::vector<float>& reference,
                            double tolerance);
/// output_mismatch's words for element `i` (for a comparison made elsewhere).
std::string mismatch_at(size_t i, float got, float reference);

class Searcher {
 public:
  /// `context`: what else fixes a winner (device name and architecture, driver or
  /// compiler version); luminal's version is added. `subject`: what it searches, for its
  /// summary line ("kernels").
  Searcher(std::string context, SearchSettings settings, std::string subject = "kernels");
  ~Searcher();
  Searcher(const Searcher&) = delete;
  Searcher& operator=(const Searcher&) = delete;

  /// The candidate to run `p` with: cached, searched, or (search off, budget spent, a
  /// single candidate) the first.
  SearchResult choose(const SearchProblem& p);

  const SearchSettings& settings() const { return settings_; }
  double seconds_spent() const { return spent_; }

 private:
  SearchResult search(const SearchProblem& p);
  void progress(const SearchProblem& p, size_t done, double best,
                std::chrono::steady_clock::time_point start, bool end);
  void dump(const SearchProblem& p, const SearchResult& r);

  std::string context_;
  SearchSettings settings_;
  std::string subject_;
  double spent_ = 0;  // seconds timing so far
  size_t searched_ = 0, cached_ = 0;  // kernels timed, and winners read from the cache
  bool progress_shown_ = false;
};

}  // namespace luminal::runtime
