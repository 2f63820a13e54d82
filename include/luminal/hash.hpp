// Hashing helpers shared by the interning tables, the e-graph and the kernel cache.
// All are stable across runs and platforms (cache keys and canonical orders rely on it).
#pragma once

#include <cstdint>
#include <string_view>

namespace luminal {

/// Combines a value into a running hash.
inline uint64_t hash_mix(uint64_t h, uint64_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

/// MurmurHash3's fmix64: spreads every input bit over the low bits tables index by.
inline uint64_t hash_avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

/// FNV-1a over bytes.
inline uint64_t hash_bytes(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace luminal
