// softmax(where(mask, q k^T * scale, -inf)) v as nn::Attention writes it (caches
// position-major, [past + seq, kv_heads, d]), which the compiler makes one Attention
// kernel: compiled for a backend and compared with the reference interpreter on the
// decomposition. One query row and prompts of several tiles of rows (on a GPU, the
// prompts over half-precision caches run on tensor cores, on Hopper's warpgroup
// instructions where queries, keys and values share one half type, short ones and decoding
// through the streaming kernel where rows are whole 16-byte pieces), caches long enough
// that keys are split between threads or blocks, windowed masks, key heads shared by 1-8
// query heads, f16 and f32 caches, head dims that allow 16-byte loads and some that do
// not, graphs computed in bf16 and f16 throughout, and padding masks of each key head's
// own.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "luminal/compiler/attention_op.hpp"
#include "luminal/compiler/optimize.hpp"
#include "luminal/luminal.hpp"
#include "luminal/nn/attention.hpp"
#include "testing/run_outputs.hpp"

namespace luminal::testing {

inline void expect_attention_matches_reference(const Backend& backend, const std::string& label) {
  struct Case {
    int64_t kv_heads, group, seq, past, d, dv, window;
    DType cache;
    DType compute = DType::F32;  // of queries, scores and output
    bool padding = false;        // a random mask of each key head's own instead of the causal one
  };
  std::mt19937 rng(11);
  for (const Case& c :
       std::vector<Case>{{1, 4, 1, 37, 256, 256, 0, DType::F16},
                         {1, 4, 1, 300, 64, 64, 0, DType::F16},
                         {2, 4, 1, 5000, 128, 128, 0, DType::F16},
                         {2, 2, 1, 200, 40, 24, 50, DType::F32},
                         {1, 1, 1, 0, 16, 16, 0, DType::F32},
                         {2, 3, 7, 12, 32, 48, 0, DType::F16},
                         {1, 4, 9, 0, 24, 24, 4, DType::F32},
                         {1, 3, 21, 140, 36, 20, 0, DType::F16},
                         {2, 4, 100, 30, 64, 64, 0, DType::F16},
                         {1, 2, 130, 0, 128, 128, 0, DType::F16},
                         {1, 4, 70, 200, 128, 128, 33, DType::F16},
                         {8, 2, 9, 3000, 64, 64, 0, DType::F16},
                         {1, 1, 40, 10, 256, 256, 0, DType::F16},
                         {1, 4, 5, 0, 32, 32, 0, DType::F16},
                         {2, 4, 90, 20, 64, 64, 0, DType::BF16, DType::BF16},
                         {1, 2, 70, 300, 128, 128, 40, DType::BF16, DType::BF16},
                         {2, 2, 33, 500, 64, 32, 0, DType::F16, DType::F16},
                         {1, 4, 1, 700, 128, 128, 0, DType::BF16, DType::BF16},
                         {2, 2, 64, 64, 64, 64, 0, DType::F16},
                         {1, 4, 96, 32, 128, 128, 50, DType::BF16, DType::BF16},
                         {2, 2, 50, 142, 64, 64, 0, DType::F16, DType::F32, true},
                         {3, 2, 40, 0, 32, 32, 0, DType::F16, DType::F32, true},
                         {2, 4, 1, 900, 128, 128, 0, DType::F16, DType::F32, true},
                         {1, 8, 1, 2000, 64, 64, 0, DType::BF16, DType::BF16},
                         {2, 4, 3, 400, 128, 128, 0, DType::F16},
                         {2, 4, 1, 1000, 128, 128, 0, DType::F32},
                         {1, 4, 1, 700, 128, 128, 100, DType::F16},
                         {2, 2, 1, 50, 8, 8, 0, DType::F16},
                         {2, 2, 1, 600, 12, 7, 0, DType::F32},  // split rows of 7 values
                         {1, 1, 300, 0, 128, 128, 0, DType::F16, DType::F16},
                         {1, 2, 80, 100, 256, 128, 0, DType::F16, DType::F16},
                         {2, 4, 40, 60, 64, 64, 0, DType::BF16, DType::BF16, true},
                         // Prompts of many tiles of rows and keys: tiles wholly inside a
                         // causal or windowed mask, wholly outside it, and rows of two heads.
                         {1, 2, 300, 100, 64, 64, 150, DType::BF16, DType::BF16},
                         {1, 1, 384, 0, 64, 64, 0, DType::BF16, DType::BF16},
                         {1, 4, 200, 77, 64, 64, 0, DType::F16, DType::F16}}) {
    const std::string what =
        label + ": kv " + std::to_string(c.kv_heads) + " group " + std::to_string(c.group) +
        " seq " + std::to_string(c.seq) + " past " + std::to_string(c.past) + " d " +
        std::to_string(c.d) + " dv " + std::to_string(c.dv) + " window " +
        std::to_string(c.window) + " " + std::string(dtype_name(c.cache)) + " cache, computed in " +
        std::string(dtype_name(c.compute)) + (c.padding ? ", padding mask" : "");
    const int64_t total = c.past + c.seq;
    Graph cx;
    Tensor q = cx.named_tensor("q", {c.kv_heads, c.group, "seq", c.d}, c.compute);
    const Expr positions = Expr("seq") + Expr(c.past);
    Tensor k = cx.named_tensor("k", {positions, c.kv_heads, c.d}, c.cache);
    Tensor v = cx.named_tensor("v", {positions, c.kv_heads, c.dv}, c.cache);
    const Tensor keys = k.cast(c.compute).permute({1, 0, 2});
    const Tensor values = v.cast(c.compute).permute({1, 0, 2});
    Tensor scores =
        q.matmul(keys.unsqueeze(1).transpose(-1, -2)) * (1.0 / std::sqrt(static_cast<double>(c.d)));
    // A padding mask: each key head's own, keeping four keys in five, and every row its
    // first key (a row keeping none is NaN on both sides).
    Tensor padding = cx.named_tensor("padding", {c.kv_heads, 1, "seq", positions}, DType::Bool);
    scores = where(c.padding ? padding : nn::causal_mask(cx, "seq", Expr(c.past), c.window), scores,
                   -std::numeric_limits<double>::infinity());
    Tensor y = scores.softmax(-1).matmul(values.unsqueeze(1)).retrieve();
    cx.set_dim("seq", c.seq);
    auto random = [&](int64_t n, DType t) {
      const std::vector<float> x = uniform_floats(rng, static_cast<size_t>(n), -2.0f, 2.0f);
      return Buffer::from_doubles(std::vector<double>(x.begin(), x.end()), t);
    };
    q.set_buffer(random(c.kv_heads * c.group * c.seq * c.d, c.compute));
    k.set_buffer(random(total * c.kv_heads * c.d, c.cache));
    v.set_buffer(random(total * c.kv_heads * c.dv, c.cache));
    if (c.padding) {
      std::vector<double> keep(static_cast<size_t>(c.kv_heads * c.seq * total));
      std::bernoulli_distribution kept(0.8);
      for (size_t i = 0; i < keep.size(); ++i)
        keep[i] = i % static_cast<size_t>(total) == 0 || kept(rng);
      padding.set_buffer(Buffer::from_doubles(keep, DType::Bool));
    }
    const compiler::Optimized opt = compiler::optimize(cx);
    ASSERT_TRUE(dynamic_cast<const compiler::AttentionOp*>(
        opt.graph->node(opt.outputs[0].second).custom.get()))
        << what << "\n"
        << opt.graph->to_text();
    const std::vector<float> want = run_outputs(cx, reference(), {y})[0];
    const std::vector<float> got = run_outputs(cx, backend, {y})[0];
    EXPECT_EQ(cx.last_run_stats().host_fallbacks, 0u) << what;
    ASSERT_EQ(got.size(), want.size()) << what;
    // Half-precision graphs: the reference rounds every op's result (scores, weights,
    // output) to that type where the kernel keeps f32 between them.
    const double tolerance = c.compute == DType::F32 ? 1e-4 : 2e-2;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::fabs(want[i])))
          << what << " element " << i;
  }
}

}  // namespace luminal::testing
