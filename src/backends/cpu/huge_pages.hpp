// Long-lived memory backed by 2 MiB pages where the kernel grants them (private to
// src/backends/cpu), for the weights a decoding step streams through once per token.
//
// With 4 KiB pages every 64 cache lines of a weight cost a page walk; on a 2-core Zen 2
// that held a streaming read to 34 GB/s against 40 GB/s with 2 MiB pages (bench_quant
// BM_ReadBandwidth/huge_pages). Most weight matrices are smaller than 2 MiB, so they are
// carved out of shared 2 MiB-aligned chunks; a chunk is freed with its last user.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace luminal::cpugen {

class HugePageBytes {
 public:
  HugePageBytes() = default;
  /// `bytes` uninitialised bytes, 64-byte aligned.
  static HugePageBytes allocate(size_t bytes);
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  std::shared_ptr<uint8_t> data_;  // shares ownership of the whole chunk
  size_t size_ = 0;
};

}  // namespace luminal::cpugen
