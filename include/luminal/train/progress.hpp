// A training loop's progress line on stderr: step of total, the loss, samples (or
// tokens) a second and the time left, redrawn in place at most ten times a second on a
// terminal; written to a log (stderr not a terminal) as a line a tenth of the way.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace luminal::train {

class ProgressBar {
 public:
  /// `total` steps of `per_step` samples (or tokens, as `unit` names them).
  ProgressBar(int64_t total, int64_t per_step, std::string unit = "samples");
  /// Records a finished step and its loss; redraws if a tenth of a second has passed
  /// (or this was the last step).
  void step(double loss);
  /// Ends the line (once; the destructor does it too).
  void finish();
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  /// The line as it would be drawn now (for tests).
  std::string line() const;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_, per_step_, done_ = 0;
  std::string unit_;
  double loss_ = 0;
  Clock::time_point start_ = Clock::now(), drawn_{};
  bool open_ = false;
  bool terminal_;
};

}  // namespace luminal::train
