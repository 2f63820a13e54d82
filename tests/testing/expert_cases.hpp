// ExpertMatMul against brute force over the decoded experts (luminal::dequantize, then
// double), on any backend: rows routed to experts with repeats (two slots of a row on the
// same expert, several rows on one), x shared by a row's slots or one row a slot, i32
// and i64 ids, and the experts no row chose filled with NaN (NaN scales for block
// formats), so an implementation that reads them, or multiplies them by a zero weight,
// fails.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "luminal/luminal.hpp"
#include "testing/quant_blocks.hpp"

namespace luminal::testing {

/// Experts of ggml type `type` (kPlainStorage: a plain f32 input), `count` of them, n x k.
struct ExpertCase {
  uint32_t type;
  int64_t rows, slots, x_slots;
  bool ids64;
  int64_t count = 5, n = 40, k = 512;
};

// The byte offset of a block's f16 scale d, or -1 where values are stored directly.
inline int64_t scale_offset(uint32_t type) {
  return type == 14 ? 208 : (type == 0 || type == 1 || type == 30) ? -1 : 0;
}

/// Runs the case on `backend`; each output within int8 activations' rounding (block
/// formats: half a step of each 32 elements' largest magnitude over 127, times |w|) plus
/// 1e-5 of sum |w x|. Returns the graph's last run stats' host fallbacks.
inline size_t check_expert_products(const ExpertCase& c, const Backend& backend) {
  const bool plain = c.type == kPlainStorage;
  const std::string what = (plain ? std::string("plain f32") : ggml_type_name(c.type)) +
                           " rows " + std::to_string(c.rows) + " slots " +
                           std::to_string(c.slots) + " x_slots " + std::to_string(c.x_slots) +
                           (c.ids64 ? " i64" : " i32");
  Graph cx;
  Tensor x = cx.named_tensor("x", {c.rows, c.x_slots, c.k});
  Tensor w = cx.named_tensor("experts", {c.count, c.n, c.k});
  Tensor ids = cx.named_tensor("ids", {c.rows, c.slots}, c.ids64 ? DType::I64 : DType::I32);
  Tensor y = expert_matmul(x, w, ids).retrieve();
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
  const int64_t matrix = c.n * c.k;
  std::vector<float> wd;  // the decoded experts (the poisoned ones never read below)
  if (plain) {
    wd.resize(static_cast<size_t>(c.count * matrix));
    for (float& v : wd) v = normal(rng) * 0.1f;
    for (int64_t e = 1; e < c.count; e += 2)
      std::fill_n(wd.begin() + e * matrix, matrix, std::nanf(""));
    w.set(wd);
  } else {
    Buffer raw = random_blocks(c.type, static_cast<size_t>(c.count * c.n), static_cast<size_t>(c.k),
                               static_cast<uint64_t>(c.type) + 3);
    size_t block_elems = 0, block_bytes = 0;
    ggml_block_layout(c.type, block_elems, block_bytes);
    const size_t expert_bytes = raw.bytes() / static_cast<size_t>(c.count);
    auto* p = static_cast<uint8_t*>(raw.data());
    const uint16_t nan16 = c.type == 30 ? 0x7FC0 : 0x7E00;
    for (int64_t e = 1; e < c.count; e += 2) {
      uint8_t* at = p + static_cast<size_t>(e) * expert_bytes;
      if (c.type == 0) {
        const float nan = std::nanf("");
        for (size_t i = 0; i < expert_bytes; i += 4) std::memcpy(at + i, &nan, 4);
      } else if (scale_offset(c.type) < 0) {
        for (size_t i = 0; i < expert_bytes; i += 2) std::memcpy(at + i, &nan16, 2);
      } else {
        for (size_t b = 0; b < expert_bytes; b += block_bytes)
          std::memcpy(at + b + static_cast<size_t>(scale_offset(c.type)), &nan16, 2);
      }
    }
    w.set_quantized(c.type, std::move(raw));
    wd = w.to_f32();
  }
  size_t block_elems = 1, block_bytes = 0;
  if (!plain) ggml_block_layout(c.type, block_elems, block_bytes);
  const bool int8 = block_elems > 1;
  cx.compile(backend);
  cx.execute();
  const std::vector<float> got = y.to_f32();
  EXPECT_EQ(got.size(), static_cast<size_t>(c.rows * c.slots * c.n)) << what;
  for (int64_t t = 0; t < c.rows; ++t)
    for (int64_t s = 0; s < c.slots; ++s) {
      const int64_t e = chosen[static_cast<size_t>(t * c.slots + s)];
      const float* xr = xv.data() + (t * c.x_slots + (c.x_slots == 1 ? 0 : s)) * c.k;
      for (int64_t j = 0; j < c.n; ++j) {
        const float* wr = wd.data() + e * matrix + j * c.k;
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
        const size_t at = static_cast<size_t>((t * c.slots + s) * c.n + j);
        EXPECT_NEAR(got[at], want, bound)
            << what << ": row " << t << " slot " << s << " (expert " << e << ") col " << j;
        if (::testing::Test::HasFailure()) return cx.last_run_stats().host_fallbacks;
      }
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
  return out;
}

}  // namespace luminal::testing
