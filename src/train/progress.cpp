// A training loop's progress line (see luminal/train/progress.hpp).
#include "luminal/train/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace luminal::train {

ProgressBar::ProgressBar(int64_t total, int64_t per_step, std::string unit)
    : total_(total),
      per_step_(per_step),
      unit_(std::move(unit)),
      terminal_(isatty(STDERR_FILENO) != 0) {}

std::string ProgressBar::line() const {
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done_ * per_step_) / seconds : 0.0;
  const double left =
      done_ > 0 ? seconds / static_cast<double>(done_) * static_cast<double>(total_ - done_) : 0.0;
  char text[160];
  std::snprintf(text, sizeof text, "step %lld/%lld  loss %.4f  %.0f %s/s  %s %.0fs",
                static_cast<long long>(done_), static_cast<long long>(total_), loss_, rate,
                unit_.c_str(), done_ < total_ ? "left" : "took", done_ < total_ ? left : seconds);
  return text;
}

void ProgressBar::step(double loss) {
  ++done_;
  loss_ = loss;
  if (!terminal_) {  // a log: a line a tenth of the way, and the last
    const int64_t every = std::max<int64_t>(1, total_ / 10);
    if (done_ % every == 0 || done_ == total_) std::fprintf(stderr, "%s\n", line().c_str());
    return;
  }
  const Clock::time_point now = Clock::now();
  if (done_ < total_ && now - drawn_ < std::chrono::milliseconds(100)) return;
  drawn_ = now;
  std::fprintf(stderr, "\r%s\033[K", line().c_str());
  std::fflush(stderr);
  open_ = true;
}

void ProgressBar::finish() {
  if (!open_) return;
  std::fputc('\n', stderr);
  open_ = false;
}

ProgressBar::~ProgressBar() {
  finish();
}

}  // namespace luminal::train
