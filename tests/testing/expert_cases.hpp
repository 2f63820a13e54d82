// ExpertMatMul against brute force over the decoded experts (luminal::dequantize, then
// double), on any backend: rows routed to experts with repeats (two slots of a row on the
// same expert, several rows on one), x shared by a row's slots or one row a slot, i32
// and i64 ids, one stack or two (of the same format, as a mixture's gate and up, or of
// two), and the experts no row chose filled with NaN (NaN scales for block formats), so
// an implementation that reads them, or multiplies them by a zero weight, fails.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "luminal/luminal.hpp"
#include "testing/quant_blocks.hpp"

namespace luminal::testing {

/// Experts of ggml type `type` (kPlainStorage: a plain f32 input), `count` of them, n x k;
/// where n2 > 0, a second stack of n2 x k in `type2` beside them.
struct ExpertCase {
  uint32_t type;
  int64_t rows, slots, x_slots;
  bool ids64;
  int64_t count = 5, n = 40, k = 512;
  int64_t n2 = 0;
  uint32_t type2 = 0;
};

// The byte offset of a block's f16 scale d, or -1 where values are stored directly.
inline int64_t scale_offset(uint32_t type) {
  return type == 14 ? 208 : (type == 0 || type == 1 || type == 30) ? -1 : 0;
}

/// Runs the case on `backend`; each output within int8 activations' rounding (block
/// formats: half a step of each 32 elements' largest magnitude over 127, times |w|) plus
/// 1e-5 of sum |w x|. Returns the graph's last run stats' host fallbacks.
// A stack of `count` experts of n x k in `type`, the odd ones poisoned; returns the
// input and its decoded values.
inline std::pair<Tensor, std::vector<float>> poisoned_experts(Graph& cx, const std::string& name,
                                                              uint32_t type, int64_t count,
                                                              int64_t n, int64_t k, uint64_t seed) {
  Tensor w = cx.named_tensor(name, {count, n, k});
  const int64_t matrix = n * k;
  std::vector<float> wd;
  if (type == kPlainStorage) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> normal(0, 0.1f);
    wd.resize(static_cast<size_t>(count * matrix));
    for (float& v : wd) v = normal(rng);
    for (int64_t e = 1; e < count; e += 2)
      std::fill_n(wd.begin() + e * matrix, matrix, std::nanf(""));
    w.set(wd);
    return {w, wd};
  }
  Buffer raw = random_blocks(type, static_cast<size_t>(count * n), static_cast<size_t>(k), seed);
  size_t block_elems = 0, block_bytes = 0;
  ggml_block_layout(type, block_elems, block_bytes);
  const size_t expert_bytes = raw.bytes() / static_cast<size_t>(count);
  auto* p = static_cast<uint8_t*>(raw.data());
  const uint16_t nan16 = type == 30 ? 0x7FC0 : 0x7E00;
  for (int64_t e = 1; e < count; e += 2) {
    uint8_t* at = p + static_cast<size_t>(e) * expert_bytes;
    if (type == 0) {
      const float nan = std::nanf("");
      for (size_t i = 0; i < expert_bytes; i += 4) std::memcpy(at + i, &nan, 4);
    } else if (scale_offset(type) < 0) {
      for (size_t i = 0; i < expert_bytes; i += 2) std::memcpy(at + i, &nan16, 2);
    } else {
      for (size_t b = 0; b < expert_bytes; b += block_bytes)
        std::memcpy(at + b + static_cast<size_t>(scale_offset(type)), &nan16, 2);
    }
  }
  w.set_quantized(type, std::move(raw));
  return {w, w.to_f32()};
}

/// Runs the case on `backend`; each output within int8 activations' rounding (block
/// formats: half a step of each 32 elements' largest magnitude over 127, times |w|) plus
/// 1e-5 of sum |w x|. Returns the graph's last run stats' host fallbacks.
inline size_t check_expert_products(const ExpertCase& c, const Backend& backend) {
  const auto name_of = [](uint32_t t) {
    return t == kPlainStorage ? std::string("plain f32") : ggml_type_name(t);
  };
  const std::string what = name_of(c.type) + (c.n2 ? " + " + name_of(c.type2) : "") + " rows " +
                           std::to_string(c.rows) + " slots " + std::to_string(c.slots) +
                           " x_slots " + std::to_string(c.x_slots) + (c.ids64 ? " i64" : " i32");
  Graph cx;
  Tensor x = cx.named_tensor("x", {c.rows, c.x_slots, c.k});
  Tensor ids = cx.named_tensor("ids", {c.rows, c.slots}, c.ids64 ? DType::I64 : DType::I32);
  struct Stack {
    uint32_t type;
    int64_t n;
    Tensor w;
    std::vector<float> decoded;
  };
  std::vector<Stack> stacks = {{c.type, c.n, {}, {}}};
  if (c.n2 > 0) stacks.push_back({c.type2, c.n2, {}, {}});
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < stacks.size(); ++i) {
    std::tie(stacks[i].w, stacks[i].decoded) =
        poisoned_experts(cx, "experts" + std::to_string(i), stacks[i].type, c.count, stacks[i].n,
                         c.k, stacks[i].type + 3 + i);
    inputs.push_back(stacks[i].w);
  }
  Tensor y = expert_matmul(x, inputs, ids).retrieve();
  // Ids over the even experts only (0, 2, 4, ...), with repeats; the odd ones are poison.
  std::vector<int64_t> chosen(static_cast<size_t>(c.rows * c.slots));
  for (size_t i = 0; i < chosen.size(); ++i)
    chosen[i] = static_cast<int64_t>((i * 7 / 3) % static_cast<size_t>((c.count + 1) / 2)) * 2;
  if (c.ids64) {
    ids.set(chosen);
  } else {
    ids.set(std::vector<int32_t>(chosen.begin(), chosen.end()));
  }
  std::mt19937 rng(static_cast<uint32_t>(c.type * 131 + c.rows * 7 + c.slots));
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> xv(static_cast<size_t>(c.rows * c.x_slots * c.k));
  for (float& v : xv) v = normal(rng);
  x.set(xv);
  cx.compile(backend);
  cx.execute();
  const std::vector<float> got = y.to_f32();
  const int64_t width = c.n + c.n2;
  EXPECT_EQ(got.size(), static_cast<size_t>(c.rows * c.slots * width)) << what;
  int64_t column = 0;
  for (const Stack& st : stacks) {
    size_t block_elems = 1, block_bytes = 0;
    if (st.type != kPlainStorage) ggml_block_layout(st.type, block_elems, block_bytes);
    const bool int8 = block_elems > 1;
    for (int64_t t = 0; t < c.rows; ++t)
      for (int64_t s = 0; s < c.slots; ++s) {
        const int64_t e = chosen[static_cast<size_t>(t * c.slots + s)];
        const float* xr = xv.data() + (t * c.x_slots + (c.x_slots == 1 ? 0 : s)) * c.k;
        for (int64_t j = 0; j < st.n; ++j) {
          const float* wr = st.decoded.data() + (e * st.n + j) * c.k;
          double want = 0, magnitude = 0, bound = 1e-6;
          for (int64_t p = 0; p < c.k; p += 32) {
            double amax = 0;
            for (int64_t q = p; q < p + 32; ++q) amax = std::max(amax, double{std::fabs(xr[q])});
            for (int64_t q = p; q < p + 32; ++q) {
              want += double{wr[q]} * xr[q];
              magnitude += std::fabs(double{wr[q]} * xr[q]);
              if (int8) bound += std::fabs(double{wr[q]}) * amax / 254;
            }
          }
          bound += 1e-5 * magnitude;
          const size_t at = static_cast<size_t>((t * c.slots + s) * width + column + j);
          EXPECT_NEAR(got[at], want, bound) << what << ": row " << t << " slot " << s << " (expert "
                                            << e << ") stack " << st.type << " col " << j;
          if (::testing::Test::HasFailure()) return cx.last_run_stats().host_fallbacks;
        }
      }
    column += st.n;
  }
  return cx.last_run_stats().host_fallbacks;
}

/// The cases every backend runs: each storage, decode (one row, the experts' ids on a
/// row of their own) and prompt-like rows, shared and per-slot x, both id types.
inline std::vector<ExpertCase> expert_cases() {
  std::vector<ExpertCase> out;
  for (const uint32_t type : {kPlainStorage, 0u, 1u, 30u, 2u, 8u, 12u, 13u, 14u}) {
    out.push_back({type, 1, 2, 1, false});
    out.push_back({type, 1, 8, 8, true, 9});
    out.push_back({type, 6, 2, 2, false});
    out.push_back({type, 5, 3, 1, true});
  }
  // Two stacks: a gate and up pair (one format; 24 rows, not a whole kernel block of the
  // float path's eight), and formats that take different kernels.
  for (const auto& [a, b] : std::vector<std::pair<uint32_t, uint32_t>>{
           {12, 12}, {8, 8}, {30, 30}, {2, 2}, {12, 14}, {kPlainStorage, 8}}) {
    ExpertCase two{a, 1, 8, 1, false, 9};
    two.n2 = 24, two.type2 = b;
    out.push_back(two);
    ExpertCase prompt{a, 6, 2, 1, true};
    prompt.n2 = 24, prompt.type2 = b;
    out.push_back(prompt);
  }
  return out;
}

}  // namespace luminal::testing
