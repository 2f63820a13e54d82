// How far ahead of their reads the streaming weight kernels ask for cache lines, chosen by
// timing on the machine at hand (private to src/backends/cpu).
//
// The best distance depends on the memory system and differs several-fold between CPUs.
// Over a 178 MB Q8_0 matrix-vector product on two threads, 1 KiB ahead streamed at 0.95 of
// a plain read loop on a 2-core Zen 2 EPYC machine and 4 KiB at 0.85 (2 KiB: 0.83); on a
// 16-core Xeon with 2 MiB of L2 a core, 4 KiB reached 0.98 and 1 KiB 0.71 (2 KiB: 0.87;
// there the 178 MB stayed in its 300 MB L3 cache).
// No one constant serves both, so the first large matrix-vector products try each
// candidate in turn, and the distance whose products streamed fastest (median over the
// rounds) is kept, and remembered in the kernel cache directory for the CPU model and
// thread count: later processes start with it (delete the `prefetch-*` file to tune again).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace luminal::cpugen {

/// Picks a prefetch distance from timed products. Each product asks `choose` for its
/// distance; a timed one reports its time back. The candidates take turns, `rounds` times
/// over, and then the best median rate is kept for every product.
class PrefetchTuner {
 public:
  static constexpr std::array<int64_t, 5> kCandidates{512, 1024, 2048, 4096, 8192};
  /// Products over fewer bytes of weights, or of more than one activation row, are not
  /// timed: start-up and the threads' hand-offs, or arithmetic, would weigh more than the
  /// distance. Until tuning ends they use kUntuned.
  static constexpr int64_t kTimedBytes = 8 << 20;
  static constexpr int64_t kUntuned = 4096;

  struct Choice {
    int64_t distance = 0;
    bool timed = false;  // report the product's time
  };

  /// Tunes over `rounds` rounds, or, given `fixed` > 0, always answers that distance.
  /// With a `remember_at` path, a distance found there is kept from the start, and one
  /// chosen by tuning is written there.
  explicit PrefetchTuner(int rounds = 3, int64_t fixed = 0, std::string remember_at = "");

  Choice choose(int64_t bytes, int64_t rows) const;
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
  std::string remember_at_;
  int trial_ = 0;  // reports taken; candidate trial_ % size is on trial
  int64_t kept_ = 0;
  std::array<std::vector<double>, kCandidates.size()> rates_;
};

/// LUMINAL_CPU_PREFETCH's value: a distance in bytes, a multiple of 64 from 64 to 65536
/// (anything else is an error), or 0 where unset or empty.
int64_t parse_prefetch_distance(const char* value);

/// The process's tuner: fixed where LUMINAL_CPU_PREFETCH gives a distance in bytes (a
/// malformed value is an error), otherwise remembered or tuning.
PrefetchTuner& prefetch_tuner();

/// With LUMINAL_LOG=info, prints the kept distance and each candidate's median rate.
void log_prefetch_choice(const PrefetchTuner& tuner);

}  // namespace luminal::cpugen
