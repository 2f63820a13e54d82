// How far ahead of their reads the streaming weight kernels ask for cache lines, chosen by
// timing on the machine at hand (private to src/backends/cpu).
//
// The best distance depends on the memory system and differs several-fold between CPUs.
// Over a 178 MB Q8_0 matrix-vector product on two threads, 1 KiB ahead streamed at 0.95 of
// a plain read loop on a 2-core Zen 2 EPYC machine and 4 KiB at 0.85 (2 KiB: 0.83); on a
// 16-core Xeon with 2 MiB of L2 a core, 4 KiB reached 0.98 and 1 KiB 0.71 (2 KiB: 0.87;
// there the 178 MB stayed in its 300 MB L3 cache). It also differs between one long
// stream and the hundred small products of a decode step, which start cold: on the Zen 2
// machine 512 B and 1 KiB serve the long stream alike, but the small products ran 2-3%
// faster (whole decode steps, paired runs) at 1 KiB than at 512 B.
//
// No one constant serves, so each kind of product is tuned on its own: the first
// single-row products try each candidate in turn, a few rounds over, and the distance of
// the best median rate is kept. This is a search (runtime/search.hpp) whose candidates
// are timed in place, in the decode steps themselves, not by back-to-back runs, which
// would find the weights in cache where a decode step streams them cold. It shares the
// search's switch (LUMINAL_SEARCH=off keeps the untuned distance) and its cache: the
// winner is remembered for the CPU model and thread count, so later processes start with
// it, and a corrupt entry is ignored with a warning and tuned again.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace luminal::cpugen {

/// Picks a prefetch distance from timed products: a product asks `choose` for its
/// distance and, where told to, reports its time back. A trial gathers reports until it
/// has `trial_bytes` of weights (one product where 0) and counts as one rate; the
/// candidates take turns, `rounds` trials each, and then the best median rate is kept.
class PrefetchTuner {
 public:
  static constexpr std::array<int64_t, 5> kCandidates{512, 1024, 2048, 4096, 8192};
  /// What products that may not be timed use until tuning ends.
  static constexpr int64_t kUntuned = 4096;

  struct Choice {
    int64_t distance = 0;
    bool timed = false;  // report the product's time
  };

  /// Tunes, or, given `fixed` > 0, always answers that distance. With a search cache key
  /// (runtime::search_cache_key over labels()), a distance remembered there is kept from
  /// the start, and one chosen by tuning is remembered there.
  explicit PrefetchTuner(int rounds = 3, int64_t trial_bytes = 0, int64_t fixed = 0,
                         std::string cache_key = "");

  /// The candidates as the search cache names them ("512" for 512 bytes).
  static std::vector<std::string> labels();

  /// The distance for a product; `may_time` false for products whose time says little
  /// about the distance (several activation rows: their arithmetic weighs more).
  Choice choose(bool may_time) const;
  /// Records a timed product; true when this report ended the tuning. A report at another
  /// distance than the one on trial (another product's report moved the trial on
  /// meanwhile) is ignored.
  bool report(int64_t distance, int64_t bytes, double seconds);
  /// The kept distance, 0 while tuning.
  int64_t kept() const;
  /// Each candidate's median rate in bytes per second so far (0 where none).
  std::vector<double> medians() const;

 private:
  mutable std::mutex mutex_;
  int rounds_ = 0;
  int64_t trial_bytes_ = 0;
  std::string cache_key_;
  int trials_ = 0;              // trials ended; candidate trials_ % size is on trial
  int64_t gathered_bytes_ = 0;  // in the trial under way
  double gathered_seconds_ = 0;
  int64_t kept_ = 0;
  std::array<std::vector<double>, kCandidates.size()> rates_;
};

/// Products of at least this many bytes of weights are long streams; the rest are tuned
/// together, a trial gathering about a small model's decode step of them.
constexpr int64_t kLongStreamBytes = 8 << 20;
constexpr int64_t kSmallProductsTrial = 64 << 20;

/// The process's tuner for a product over `bytes` of weights: fixed where
/// LUMINAL_CPU_PREFETCH gives a distance in bytes (a malformed value is an error),
/// otherwise remembered or tuning. LUMINAL_LOG=info prints each tuner's distance.
PrefetchTuner& prefetch_tuner(int64_t bytes);

/// LUMINAL_CPU_PREFETCH's value: a distance in bytes, a multiple of 64 from 64 to 65536
/// (anything else is an error), or 0 where unset or empty.
int64_t parse_prefetch_distance(const char* value);

/// With LUMINAL_LOG=info, prints the distance kept for products over `bytes` of weights
/// and each candidate's median rate.
void log_prefetch_choice(int64_t bytes);

}  // namespace luminal::cpugen
