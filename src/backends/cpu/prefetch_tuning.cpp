#include "backends/cpu/prefetch_tuning.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "backends/cpu/jit.hpp"
#include "luminal/error.hpp"
#include "luminal/hash.hpp"

namespace luminal::cpugen {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// One file per CPU model and thread count in the kernel cache directory.
std::string remembered_path() {
  std::string cpu = "unknown cpu";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 1);
      break;
    }
  const std::string key = cpu + " x " + std::to_string(omp_get_max_threads());
  char name[32];
  std::snprintf(name, sizeof name, "prefetch-%016llx",
                static_cast<unsigned long long>(hash_bytes(key)));
  return (std::filesystem::path(cache_dir()) / name).string();
}

bool log_info() {
  const char* log = std::getenv("LUMINAL_LOG");
  return log != nullptr && std::strstr(log, "info") != nullptr;
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

PrefetchTuner::PrefetchTuner(int rounds, int64_t fixed, std::string remember_at)
    : rounds_(rounds), remember_at_(std::move(remember_at)), kept_(fixed) {
  LUM_CHECK(rounds > 0) << "internal: prefetch tuning over " << rounds << " rounds";
  if (kept_ > 0 || remember_at_.empty()) return;
  // A file that does not hold one of the candidates (absent, cut short) is not used.
  std::ifstream in(remember_at_);
  int64_t d = 0;
  if (in >> d && std::find(kCandidates.begin(), kCandidates.end(), d) != kCandidates.end())
    kept_ = d;
}

PrefetchTuner::Choice PrefetchTuner::choose(int64_t bytes, int64_t rows) const {
  std::lock_guard lock(mutex_);
  if (kept_ > 0) return {kept_, false};
  if (rows > 1 || bytes < kTimedBytes) return {kUntuned, false};
  return {kCandidates[static_cast<size_t>(trial_) % kCandidates.size()], true};
}

int64_t PrefetchTuner::kept() const {
  std::lock_guard lock(mutex_);
  return kept_;
}

bool PrefetchTuner::report(int64_t distance, int64_t bytes, double seconds) {
  std::lock_guard lock(mutex_);
  const size_t on_trial = static_cast<size_t>(trial_) % kCandidates.size();
  if (kept_ > 0 || distance != kCandidates[on_trial] || !(seconds > 0)) return false;
  rates_[on_trial].push_back(static_cast<double>(bytes) / seconds);
  if (++trial_ < rounds_ * static_cast<int>(kCandidates.size())) return false;
  size_t best = 0;
  for (size_t c = 1; c < kCandidates.size(); ++c)
    if (median(rates_[c]) > median(rates_[best])) best = c;
  kept_ = kCandidates[best];
  if (!remember_at_.empty()) {
    // Written aside and renamed: a process starting meanwhile reads all of it or none.
    const std::string tmp = remember_at_ + "." + std::to_string(getpid()) + ".tmp";
    std::ofstream(tmp) << kept_ << "\n";
    std::error_code ec;
    std::filesystem::rename(tmp, remember_at_, ec);
    if (ec) std::filesystem::remove(tmp, ec);  // a cache: not remembering is no error
  }
  return true;
}

std::vector<double> PrefetchTuner::medians() const {
  std::lock_guard lock(mutex_);
  std::vector<double> out;
  for (const auto& r : rates_) out.push_back(median(r));
  return out;
}

PrefetchTuner& prefetch_tuner() {
  static PrefetchTuner& tuner = []() -> PrefetchTuner& {
    const int64_t fixed = parse_prefetch_distance(std::getenv("LUMINAL_CPU_PREFETCH"));
    const std::string path = remembered_path();
    static PrefetchTuner t(3, fixed, path);
    if (t.kept() > 0 && log_info())
      std::fprintf(stderr, "luminal cpu: weights prefetched %lld bytes ahead (%s)\n",
                   static_cast<long long>(t.kept()),
                   fixed > 0 ? "LUMINAL_CPU_PREFETCH" : ("as remembered in " + path).c_str());
    return t;
  }();
  return tuner;
}

void log_prefetch_choice(const PrefetchTuner& tuner) {
  if (!log_info()) return;
  std::string rates;
  const std::vector<double> m = tuner.medians();
  for (size_t c = 0; c < m.size(); ++c) {
    char one[48];
    std::snprintf(one, sizeof one, "%s%lld B %.1f GB/s", c ? ", " : "",
                  static_cast<long long>(PrefetchTuner::kCandidates[c]), m[c] / 1e9);
    rates += one;
  }
  std::fprintf(stderr, "luminal cpu: weights prefetched %lld bytes ahead (median rates: %s)\n",
               static_cast<long long>(tuner.kept()), rates.c_str());
}

}  // namespace luminal::cpugen
