#include "luminal/models/sampling.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "luminal/error.hpp"

namespace luminal::models {
namespace {

double uniform(uint64_t& s) {  // splitmix64 -> [0, 1)
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

// exp(-kNegligible) relative to the most likely token is below 1e-20: a vocabulary's
// worth of such tokens moves no probability that a double can hold next to 1.
constexpr double kNegligible = 46.0;

// x86-64 builds carry an AVX2 copy of argmax, picked at load time where the CPU has it.
#if defined(__x86_64__)
#define ARGMAX_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ARGMAX_CLONES
#endif

struct Best {
  size_t index = 0;
  float value = -std::numeric_limits<float>::infinity();
};

// The largest of x[from, to) and its index, the lowest on ties (NaN never wins; none
// found leaves Best{}). A scan keeping one running maximum is a chain of dependent
// compares, about half a millisecond over a 262k vocabulary. Here four independent
// eight-lane maxima of each 256-value block (AVX2 where the CPU has it) take a twentieth
// of that, and only a block that beats the best so far is searched for its index.
ARGMAX_CLONES Best argmax_run(std::span<const float> x, size_t from, size_t to) {
  using Lanes = float __attribute__((vector_size(32)));
  constexpr size_t kLanes = 8, kBlock = 256;
  Best best;
  auto take = [&](size_t begin, size_t end, float m) {
    if (!(m > best.value)) return;
    best.value = m;
    best.index = static_cast<size_t>(std::find(x.begin() + begin, x.begin() + end, m) - x.begin());
  };
  size_t i = from;
  for (; i + kBlock <= to; i += kBlock) {
    // Lanes m[l] take every fourth vector; a NaN compares false and is never taken.
    Lanes m[4], v;
    for (Lanes& l : m) l = Lanes{} - std::numeric_limits<float>::infinity();
    for (size_t j = 0; j < kBlock; j += 4 * kLanes)
      for (size_t l = 0; l < 4; ++l) {
        std::memcpy(&v, x.data() + i + j + l * kLanes, sizeof v);
        m[l] = v > m[l] ? v : m[l];
      }
    m[0] = m[1] > m[0] ? m[1] : m[0];
    m[2] = m[3] > m[2] ? m[3] : m[2];
    const Lanes lanes = m[2] > m[0] ? m[2] : m[0];
    float top = lanes[0];
    for (size_t l = 1; l < kLanes; ++l) top = lanes[l] > top ? lanes[l] : top;
    take(i, i + kBlock, top);
  }
  for (; i < to; ++i) take(i, i + 1, x[i]);
  return best;
}

// The largest logit's index, the lowest on ties. A vocabulary's logits were just written
// by the threads of the output projection, each its own contiguous part, which is still in
// that core's cache: each thread scans one part here too (a single thread took 100 us
// over 262k logits in a decode step, reading the other core's half through memory).
// At least kPart logits a thread: starting a team of every core costs more than it saves
// on a host of many (milliseconds a token where 64 cores are shared among a parallel
// run's processes).
size_t argmax(std::span<const float> x) {
  constexpr size_t kPart = 1 << 15;
  const int threads = static_cast<int>(
      std::clamp<size_t>(x.size() / kPart, 1, static_cast<size_t>(omp_get_max_threads())));
  if (threads == 1) return argmax_run(x, 0, x.size()).index;
  std::vector<Best> parts(static_cast<size_t>(threads));
#pragma omp parallel num_threads(threads)
  {
    const auto t = static_cast<size_t>(omp_get_thread_num()),
               count = static_cast<size_t>(omp_get_num_threads());
    parts[t] = argmax_run(x, x.size() * t / count, x.size() * (t + 1) / count);
  }
  Best best;
  for (const Best& p : parts)
    if (p.value > best.value) best = p;  // in order: the lowest index wins a tie
  return best.index;
}

}  // namespace

namespace {

// Candidates past this many are drawn from in the order they come (every token within
// reach of the most likely, where no top k cuts them: a sort would cost more than the draw).
constexpr size_t kSortedDraw = 1024;

// A draw from softmax(logit / temperature) over candidates (ids[i], whose logit is
// values[i]; `top` is the largest), cut to the smallest most-likely-first prefix whose
// share reaches top_p. Candidates are read most likely first, the lower id first among
// equal logits.
int32_t draw(std::span<const float> values, std::span<const int32_t> ids, float top,
             const SamplingOptions& o, uint64_t& rng) {
  const float inv_t = static_cast<float>(1.0 / o.temperature);
  auto weight = [&](uint32_t i) -> double { return std::exp((values[i] - top) * inv_t); };
  auto before = [&](uint32_t a, uint32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && ids[a] < ids[b]);
  };
  std::vector<uint32_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0u);
  std::vector<double> p(order.size());  // weights, in `order`'s order
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += p[i] = weight(order[i]);
  size_t keep = order.size();
  if (o.top_p < 1.0) {
    // Sort only as much of the most likely end as the nucleus needs, growing the sorted
    // prefix until its share reaches top_p.
    for (size_t sorted = std::min<size_t>(64, order.size());;
         sorted = std::min(order.size(), 4 * sorted)) {
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(sorted),
                        order.end(), before);
      double acc = 0;
      keep = 0;
      for (size_t i = 0; i < sorted && keep == 0; ++i) {
        acc += (p[i] = weight(order[i])) / sum;
        if (acc >= o.top_p) keep = i + 1;
      }
      if (keep > 0 || sorted == order.size()) break;
    }
    if (keep == 0) keep = order.size();
  } else if (order.size() <= kSortedDraw) {  // (a top k: drawn most likely first)
    std::sort(order.begin(), order.end(), before);
    for (size_t i = 0; i < order.size(); ++i) p[i] = weight(order[i]);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[i];
  double r = uniform(rng) * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return ids[order[i]];
  }
  return ids[order[keep - 1]];
}

}  // namespace

int32_t sample(std::span<const float> logits, const SamplingOptions& o, uint64_t& rng) {
  LUM_CHECK(!logits.empty()) << "sample: empty logits";
  const size_t best = argmax(logits);
  if (o.temperature <= 0) return static_cast<int32_t>(best);
  auto before = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  // Candidates: the top k (one pass keeping a heap of the k best), or every token within
  // reach of the most likely one.
  const float top = logits[best];
  std::vector<int32_t> idx;
  if (o.top_k > 0 && static_cast<size_t>(o.top_k) < logits.size()) {
    const auto k = static_cast<size_t>(o.top_k);
    for (size_t i = 0; i < logits.size(); ++i) {
      const auto t = static_cast<int32_t>(i);
      if (idx.size() < k) {
        idx.push_back(t);
        std::push_heap(idx.begin(), idx.end(), before);  // the worst kept on top
      } else if (before(t, idx.front())) {
        std::pop_heap(idx.begin(), idx.end(), before);
        idx.back() = t;
        std::push_heap(idx.begin(), idx.end(), before);
      }
    }
    // Most likely first, as a draw on the device takes them (DeviceSampler).
    std::sort(idx.begin(), idx.end(), before);
  } else {
    const double floor = top - kNegligible * o.temperature;
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] >= floor) idx.push_back(static_cast<int32_t>(i));
  }
  std::vector<float> values(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) values[i] = logits[idx[i]];
  return draw(values, idx, top, o, rng);
}

double uniform_draw(uint64_t& rng_state) {
  return uniform(rng_state);
}

}  // namespace luminal::models
