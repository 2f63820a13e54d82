// QMatMul weights re-laid out for the AVX2 and AVX-512 integer kernels (private to
// src/backends/cpu).
//
// In a ggml file each weight row is a run of blocks, so a dot product with one row ends
// every 32 elements in a horizontal sum and a scalar scale. Interleaving eight rows
// turns that around: one 32-byte register holds four consecutive values of each of the
// eight rows, `maddubs` against four activation bytes broadcast to all lanes leaves each
// row's partial sum in its own lane, and the eight rows' scales are one vector. The
// layouts keep each format's bits (same size, or within 3% for Q4_K), so the product
// stays bound by reading the weights rather than by unpacking them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cpu/huge_pages.hpp"

namespace luminal::cpugen {

struct InterleavedWeights {
  uint32_t format = 0;  // the ggml format the blocks came from
  int64_t n = 0, k = 0;
  HugePageBytes data;  // tiles: eight rows by one block, groups of eight rows in order
};

/// Whether [n, k] weights in `format` have an interleaved layout and kernel here (AVX2,
/// n a multiple of 8).
bool interleavable(uint32_t format, int64_t n, int64_t k);

/// Re-lays out n rows of k elements of ggml blocks (interleavable must hold).
InterleavedWeights interleave(uint32_t format, const uint8_t* w, int64_t n, int64_t k);

/// One weight of a group of products and where its [rows, n] result goes.
struct InterleavedProduct {
  const InterleavedWeights* w = nullptr;
  float* out = nullptr;
};

/// out[i, j] = rows[i] . W[j] for every activation row (each k floats) and every product
/// of the group (all with that k), with the activations quantised to int8 per 32
/// elements as QMatMul's other integer kernels do. Products that read the same
/// activations (a layer's query, key and value projections) run as one: one
/// quantisation, one thread team and one stream of weights instead of one each.
void qmatmul_interleaved(const std::vector<const float*>& rows,
                         std::span<const InterleavedProduct> products);

}  // namespace luminal::cpugen
