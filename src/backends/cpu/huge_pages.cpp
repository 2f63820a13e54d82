#include "backends/cpu/huge_pages.hpp"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>

#include "luminal/error.hpp"

namespace luminal::cpugen {
namespace {

constexpr size_t kPage = 2u << 20, kChunk = 16 * kPage;

std::shared_ptr<uint8_t> new_chunk(size_t bytes) {
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kPage, bytes));
  LUM_CHECK(p) << "out of memory: " << bytes << " bytes for weights";
  // Advice only: where transparent huge pages are off this is a no-op.
  madvise(p, bytes, MADV_HUGEPAGE);
  return {p, [](uint8_t* q) { std::free(q); }};
}

// The chunk small allocations are carved from; it lives only while something uses it.
struct Arena {
  std::mutex mu;
  std::weak_ptr<uint8_t> chunk;
  size_t used = 0;
};

}  // namespace

HugePageBytes HugePageBytes::allocate(size_t bytes) {
  HugePageBytes out;
  out.size_ = bytes;
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded > kChunk / 4) {  // large enough to round up to whole pages of its own
    out.data_ = new_chunk((bytes + kPage - 1) / kPage * kPage);
    return out;
  }
  static Arena arena;
  std::lock_guard lock(arena.mu);
  std::shared_ptr<uint8_t> chunk = arena.chunk.lock();
  if (!chunk || arena.used + rounded > kChunk) {
    chunk = new_chunk(kChunk);
    arena.chunk = chunk;
    arena.used = 0;
  }
  out.data_ = std::shared_ptr<uint8_t>(chunk, chunk.get() + arena.used);
  arena.used += rounded;
  return out;
}

}  // namespace luminal::cpugen
