#include "backends/cpu/prefetch_tuning.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "backends/cpu/machine.hpp"
#include "luminal/error.hpp"
#include "runtime/env.hpp"
#include "runtime/search.hpp"

namespace luminal::cpugen {
namespace {

using runtime::env_has;

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// The search cache's key for a kind of product on this CPU model and thread count.
std::string cache_key(const char* products) {
  return runtime::search_cache_key(
      cpu_model() + " x " + std::to_string(omp_get_max_threads()) + " threads",
      std::string("cpu prefetch distance, ") + products, PrefetchTuner::labels());
}

// Prints the kept distance and why: `why`, or else each candidate's median rate.
void log_choice(const PrefetchTuner& tuner, bool long_streams, const std::string& why = "") {
  std::string rates = why;
  const std::vector<double> m = tuner.medians();
  for (size_t c = 0; c < m.size(); ++c)
    if (why.empty() && m[c] > 0) {
      char one[48];
      std::snprintf(one, sizeof one, "%s%lld B %.1f GB/s", rates.empty() ? "median rates " : ", ",
                    static_cast<long long>(PrefetchTuner::kCandidates[c]), m[c] / 1e9);
      rates += one;
    }
  std::fprintf(stderr, "luminal cpu: weights of %s products prefetched %lld bytes ahead (%s)\n",
               long_streams ? "8 MiB and larger" : "smaller", static_cast<long long>(tuner.kept()),
               rates.c_str());
}

struct Tuners {
  PrefetchTuner long_streams, small_products;
};

Tuners& tuners() {
  static Tuners& t = []() -> Tuners& {
    const int64_t given = parse_prefetch_distance(std::getenv("LUMINAL_CPU_PREFETCH"));
    const runtime::SearchSettings search = runtime::search_settings_from_env();
    const bool off = search.mode == runtime::SearchMode::Off;
    const int64_t fixed = given > 0 ? given : off ? PrefetchTuner::kUntuned : 0;
    const bool remember = fixed == 0 && search.use_cache;
    static Tuners made{
        PrefetchTuner(3, 0, fixed, remember ? cache_key("products of 8 MiB and more") : ""),
        PrefetchTuner(3, kSmallProductsTrial, fixed,
                      remember ? cache_key("smaller products") : "")};
    if (env_has("LUMINAL_LOG", "info")) {
      const std::string why = given > 0 ? "LUMINAL_CPU_PREFETCH"
                              : off     ? "LUMINAL_SEARCH=off"
                                        : "remembered in the search cache";
      if (made.long_streams.kept() > 0) log_choice(made.long_streams, true, why);
      if (made.small_products.kept() > 0) log_choice(made.small_products, false, why);
    }
    return made;
  }();
  return t;
}

}  // namespace

int64_t parse_prefetch_distance(const char* value) {
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  LUM_CHECK(*end == '\0' && v >= 64 && v <= (64 << 10) && v % 64 == 0)
      << "LUMINAL_CPU_PREFETCH=" << value
      << ": expected a prefetch distance in bytes, a multiple of 64 from 64 to 65536";
  return v;
}

PrefetchTuner::PrefetchTuner(int rounds, int64_t trial_bytes, int64_t fixed, std::string cache_key)
    : rounds_(rounds), trial_bytes_(trial_bytes), cache_key_(std::move(cache_key)), kept_(fixed) {
  LUM_CHECK(rounds > 0) << "internal: prefetch tuning over " << rounds << " rounds";
  if (kept_ > 0 || cache_key_.empty()) return;
  if (const std::optional<size_t> w = runtime::remembered_winner(cache_key_, labels()))
    kept_ = kCandidates[*w];
}

std::vector<std::string> PrefetchTuner::labels() {
  std::vector<std::string> out;
  for (const int64_t d : kCandidates) out.push_back(std::to_string(d));
  return out;
}

PrefetchTuner::Choice PrefetchTuner::choose(bool may_time) const {
  std::lock_guard lock(mutex_);
  if (kept_ > 0) return {kept_, false};
  if (!may_time) return {kUntuned, false};
  return {kCandidates[static_cast<size_t>(trials_) % kCandidates.size()], true};
}

int64_t PrefetchTuner::kept() const {
  std::lock_guard lock(mutex_);
  return kept_;
}

bool PrefetchTuner::report(int64_t distance, int64_t bytes, double seconds) {
  std::lock_guard lock(mutex_);
  const size_t on_trial = static_cast<size_t>(trials_) % kCandidates.size();
  if (kept_ > 0 || distance != kCandidates[on_trial] || !(seconds > 0)) return false;
  gathered_bytes_ += bytes;
  gathered_seconds_ += seconds;
  if (gathered_bytes_ < trial_bytes_) return false;
  rates_[on_trial].push_back(static_cast<double>(gathered_bytes_) / gathered_seconds_);
  gathered_bytes_ = 0;
  gathered_seconds_ = 0;
  if (++trials_ < rounds_ * static_cast<int>(kCandidates.size())) return false;
  size_t best = 0;
  for (size_t c = 1; c < kCandidates.size(); ++c)
    if (median(rates_[c]) > median(rates_[best])) best = c;
  kept_ = kCandidates[best];
  if (!cache_key_.empty()) runtime::remember_winner(cache_key_, labels()[best]);
  return true;
}

std::vector<double> PrefetchTuner::medians() const {
  std::lock_guard lock(mutex_);
  std::vector<double> out;
  for (const auto& r : rates_) out.push_back(median(r));
  return out;
}

PrefetchTuner& prefetch_tuner(int64_t bytes) {
  Tuners& t = tuners();
  return bytes >= kLongStreamBytes ? t.long_streams : t.small_products;
}

void log_prefetch_choice(int64_t bytes) {
  if (env_has("LUMINAL_LOG", "info")) log_choice(prefetch_tuner(bytes), bytes >= kLongStreamBytes);
}

}  // namespace luminal::cpugen
