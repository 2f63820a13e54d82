// The Attention kernel (see attention.hpp).
//
// Query rows that share their keys and values (the query heads of one key head, or a
// prompt's positions of one head) form a group of up to four, so each key and value is
// read once for all of them; each row keeps the keys its own mask row keeps. A group's
// keys are split into one range per thread when there are fewer groups than threads
// (decoding: one group per key head); each range yields its rows' running max, sum of
// exponentials and unnormalised output, which are combined at the end as in
// flash-decoding. Masked keys are skipped, so a causal prompt does half the work.
// Decoding reads the key and value caches right after the weights evicted them: one pass
// and one thread team per layer replace two products, five small kernels and two thread
// teams, each of which stalled on memory anew.
#include "backends/cpu/attention.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <numbers>
#include <tuple>
#include <vector>

#include "backends/cpu/few_rows.hpp"
#include "backends/cpu/simd.hpp"
#include "backends/cpu/team.hpp"

namespace luminal::cpugen {
namespace {

constexpr int kGroup = 4;         // query rows per group at most
constexpr int64_t kMinKeys = 32;  // keys per thread at least when a group's keys are split

// Where a group's data lies: its rows (of the output) with each one's mask row, and
// offsets into k and v. Its rows' scaled queries are rows kGroup * index.. of the scaled
// copy.
struct Group {
  int64_t row[kGroup] = {};
  int64_t mask[kGroup] = {};
  int rows = 0;
  int64_t k = 0, v = 0;

  bool one_mask_row() const {
    return std::all_of(mask, mask + rows, [&](int64_t m) { return m == mask[0]; });
  }
};

struct Shape {
  int64_t d = 0, dv = 0, keys = 0;
  int64_t k_stride = 0, v_stride = 0, mask_stride = 0;  // per key
};

#if defined(__x86_64__)
// 2^x for x <= 0 (a score less the row's max): Cephes' exp2f polynomial on the fraction,
// relative error about 2e-7; below -126 (a masked key's -inf among them) the result is 0.
LUM_AVX2 inline __m256 exp2_nonpositive(__m256 x) {
  const __m256 kept = _mm256_cmp_ps(x, _mm256_set1_ps(-126.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-126.0f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
  return _mm256_and_ps(_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e)), kept);
}

// score = 2^(score - max) in place over `count` values; returns their sum.
LUM_AVX2 float exponentiate_avx2(float* score, int64_t count, float max) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 total = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 e = exp2_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(score + i), m));
    _mm256_storeu_ps(score + i, e);
    total = _mm256_add_ps(total, e);
  }
  float sum = hsum(total);
  for (; i < count; ++i) sum += (score[i] = std::exp2(score[i] - max));
  return sum;
}
#endif

// Portable versions of the scores, the exponentials (above) and the value sums, over
// the kept keys and values (key(i), value(i)).
template <class KeyAt>
void scores_portable(const float* q, int rows, int64_t d, KeyAt&& key, int64_t count,
                     float* score) {
  for (int r = 0; r < rows; ++r)
    for (int64_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int64_t p = 0; p < d; ++p) sum += q[r * d + p] * load1(key(i) + p);
      score[r * count + i] = sum;
    }
}

template <class ValueAt>
void values_portable(const float* weight, int rows, ValueAt&& value, int64_t count, int64_t dv,
                     float* o) {
  std::fill(o, o + rows * dv, 0.0f);
  for (int64_t i = 0; i < count; ++i)
    for (int r = 0; r < rows; ++r) {
      const float w = weight[r * count + i];
      for (int64_t j = 0; j < dv; ++j) o[r * dv + j] += w * load1(value(i) + j);
    }
}

float exponentiate_portable(float* score, int64_t count, float max) {
  float sum = 0;
  for (int64_t i = 0; i < count; ++i) sum += (score[i] = std::exp2(score[i] - max));
  return sum;
}

// One group's rows against keys [t0, t1): o (rows x dv) gets the unnormalised output,
// max and sum each row's largest score and sum of 2^(score - max); a row with no kept
// key gets max -inf, sum 0 and o 0. The keys scored are those any row keeps; a row's
// others score -inf, which weighs 0.
template <class KT, class VT>
void attend(const Shape& s, const Group& g, const float* qg, const KT* k, const VT* v,
            const uint8_t* mask, int64_t t0, int64_t t1, bool avx2, float* o, float* max,
            float* sum) {
  thread_local std::vector<int32_t> kept;
  thread_local std::vector<float> score;
  kept.clear();
  const bool one_mask_row = g.one_mask_row();
  for (int64_t t = t0; t < t1; ++t) {
    bool keep = false;
    for (int r = 0; r < (one_mask_row ? 1 : g.rows) && !keep; ++r)
      keep = mask[g.mask[r] + t * s.mask_stride];
    if (keep) kept.push_back(static_cast<int32_t>(t));
  }
  const auto count = static_cast<int64_t>(kept.size());
  score.resize(static_cast<size_t>(g.rows * count));
  auto key = [&](int64_t i) { return k + g.k + kept[static_cast<size_t>(i)] * s.k_stride; };
  auto value = [&](int64_t i) { return v + g.v + kept[static_cast<size_t>(i)] * s.v_stride; };
#if defined(__x86_64__)
  if (avx2)
    with_rows(g.rows, [&](auto r) {
      dot_columns<decltype(r)::value>(qg, s.d, key, 0, count, score.data(), count);
    });
#endif
  if (!avx2) scores_portable(qg, g.rows, s.d, key, count, score.data());
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (int r = 0; r < g.rows; ++r) {
    float* row = score.data() + r * count;
    if (!one_mask_row)
      for (int64_t i = 0; i < count; ++i)
        if (!mask[g.mask[r] + kept[static_cast<size_t>(i)] * s.mask_stride]) row[i] = kMinusInf;
    max[r] = count ? *std::max_element(row, row + count) : kMinusInf;
    if (max[r] == kMinusInf) {  // none of the keys is this row's: it weighs them all 0
      std::fill(row, row + count, 0.0f);
      sum[r] = 0;
      continue;
    }
#if defined(__x86_64__)
    if (avx2) {
      sum[r] = exponentiate_avx2(row, count, max[r]);
      continue;
    }
#endif
    sum[r] = exponentiate_portable(row, count, max[r]);
  }
#if defined(__x86_64__)
  if (avx2) {
    with_rows(g.rows, [&](auto r) {
      row_panels<decltype(r)::value>(score.data(), count, value, 0, count, s.dv, o, s.dv);
    });
    return;
  }
#endif
  values_portable(score.data(), g.rows, value, count, s.dv, o);
}

template <class KT, class VT>
void run(const Shape& s, const std::vector<Group>& groups, const float* q, const KT* k, const VT* v,
         const uint8_t* mask, float* out) {
  const bool avx2 = use_avx2();
  const auto n_groups = static_cast<int64_t>(groups.size());
  int64_t rows = 0;
  for (const Group& g : groups) rows += g.rows;
  const int64_t work = rows * s.keys * (s.d + s.dv);
  int threads = work < (1 << 16) ? 1 : omp_get_max_threads();
  // Fewer groups than threads: split each group's keys.
  const int64_t splits =
      n_groups >= threads ? 1 : std::clamp<int64_t>(s.keys / kMinKeys, 1, threads);
  const int64_t items = n_groups * splits;
  threads = static_cast<int>(std::min<int64_t>(threads, items));
  const int64_t part = kGroup * (s.dv + 2);  // an item's o, max and sum
  std::vector<float> partial(static_cast<size_t>((splits > 1 ? items : threads) * part));
  std::atomic<int64_t> next{0};
  run_parallel(threads, [&](int id, int) {
    for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < items;) {
      const int64_t gi = item / splits, piece = item % splits;
      const Group& g = groups[static_cast<size_t>(gi)];
      const int64_t t0 = s.keys * piece / splits, t1 = s.keys * (piece + 1) / splits;
      // Pieces of a split group keep their results for the combination below; a whole
      // group's go straight to its output rows.
      float* p = partial.data() + (splits > 1 ? item : id) * part;
      float *o = p, *max = p + kGroup * s.dv, *sum = max + kGroup;
      attend(s, g, q + gi * kGroup * s.d, k, v, mask, t0, t1, avx2, o, max, sum);
      if (splits > 1) continue;
      for (int r = 0; r < g.rows; ++r) {
        float* row = out + g.row[r] * s.dv;
        std::fill(row, row + s.dv, 0.0f);
        axpy(1.0f / sum[r], o + r * s.dv, row, s.dv, avx2);
      }
    }
  });
  if (splits == 1) return;
  // Each row of a split group: its pieces' outputs rescaled to the largest max, over the
  // rescaled sums. Groups are split only when there are fewer of them than threads, so
  // these are a few rows, done here.
  for (int64_t at = 0; at < n_groups * kGroup; ++at) {
    const Group& g = groups[static_cast<size_t>(at / kGroup)];
    const int r = static_cast<int>(at % kGroup);
    if (r >= g.rows) continue;
    const float* first = partial.data() + at / kGroup * splits * part;
    auto max_of = [&](int64_t piece) { return first[piece * part + kGroup * s.dv + r]; };
    auto sum_of = [&](int64_t piece) { return first[piece * part + kGroup * s.dv + kGroup + r]; };
    // A piece without kept keys (max -inf, sum 0, output 0) weighs 0; a row without
    // any comes out NaN (weights 2^(-inf - -inf)), as the decomposition's 0 / 0.
    float top = -std::numeric_limits<float>::infinity(), total = 0;
    for (int64_t piece = 0; piece < splits; ++piece) top = std::max(top, max_of(piece));
    for (int64_t piece = 0; piece < splits; ++piece)
      total += std::exp2(max_of(piece) - top) * sum_of(piece);
    float* o = out + g.row[r] * s.dv;
    std::fill(o, o + s.dv, 0.0f);
    for (int64_t piece = 0; piece < splits; ++piece)
      axpy(std::exp2(max_of(piece) - top) / total, first + piece * part + r * s.dv, o, s.dv, avx2);
  }
}

}  // namespace

bool attention(const ConcreteView& q, const float* q_data, const ConcreteView& k,
               const void* k_data, DType k_type, const ConcreteView& v, const void* v_data,
               DType v_type, const ConcreteView& mask, const uint8_t* mask_data, double scale,
               float* out) {
  const size_t r = q.dims.size();
  if (r < 3 || q.has_mask() || k.has_mask() || v.has_mask() || mask.has_mask()) return false;
  Shape s{q.dims[r - 2],    v.dims[r - 1],    q.dims[r - 1],
          k.strides[r - 1], v.strides[r - 2], mask.strides[r - 2]};
  if ((s.d > 1 && k.strides[r - 2] != 1) || (s.dv > 1 && v.strides[r - 1] != 1)) return false;
  // Every row ([batch..., M]) with its offsets. Rows sharing keys and values are grouped,
  // up to kGroup at a time, those sharing a mask row as well first (the query heads of
  // one key head at one position: their keys are one list), then neighbours in mask
  // order (a prompt's positions of one head, whose kept keys differ by a few).
  struct RowAt {
    int64_t row, q, k, v, mask;
  };
  int64_t rows = 1;
  for (size_t i = 0; i + 2 < r; ++i) rows *= q.dims[i];
  std::vector<RowAt> all(static_cast<size_t>(rows));
  std::vector<int64_t> idx(r - 2, 0);
  for (RowAt& at : all) {
    at = {&at - all.data(), q.offset, k.offset, v.offset, mask.offset};
    for (size_t i = 0; i + 2 < r; ++i) {
      at.q += idx[i] * q.strides[i];
      at.k += idx[i] * k.strides[i];
      at.v += idx[i] * v.strides[i];
      at.mask += idx[i] * mask.strides[i];
    }
    for (size_t i = idx.size(); i-- > 0;) {
      if (++idx[i] < q.dims[i]) break;
      idx[i] = 0;
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const RowAt& a, const RowAt& b) {
    return std::tie(a.k, a.v, a.mask) < std::tie(b.k, b.v, b.mask);
  });
  std::vector<Group> groups;
  std::vector<float> scaled;  // kGroup rows of d per group
  // Scores go through 2^x: scale by log2(e) as well.
  const auto factor = static_cast<float>(scale * std::numbers::log2e);
  for (const RowAt& at : all) {
    if (groups.empty() || groups.back().rows == kGroup || groups.back().k != at.k ||
        groups.back().v != at.v) {
      groups.push_back({{}, {}, 0, at.k, at.v});
      scaled.resize(groups.size() * kGroup * static_cast<size_t>(s.d), 0.0f);
    }
    Group& g = groups.back();
    float* dst = scaled.data() + ((groups.size() - 1) * kGroup + static_cast<size_t>(g.rows)) * s.d;
    for (int64_t p = 0; p < s.d; ++p) dst[p] = q_data[at.q + p * q.strides[r - 2]] * factor;
    g.mask[g.rows] = at.mask;
    g.row[g.rows++] = at.row;
  }
  auto dispatch = [&](auto* kd) {
    if (v_type == DType::F16)
      run(s, groups, scaled.data(), kd, static_cast<const uint16_t*>(v_data), mask_data, out);
    else
      run(s, groups, scaled.data(), kd, static_cast<const float*>(v_data), mask_data, out);
  };
  if (k_type == DType::F16)
    dispatch(static_cast<const uint16_t*>(k_data));
  else
    dispatch(static_cast<const float*>(k_data));
  return true;
}

}  // namespace luminal::cpugen
