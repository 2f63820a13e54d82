// The on-disk kernel cache every backend keeps its compiled code in, keyed by a hash of
// what determines the code (source, compiler, flags, target).
#pragma once

#include <cstdint>
#include <string>

namespace luminal::runtime {

/// The cache directory: $LUMINAL_CACHE_DIR, else $XDG_CACHE_HOME/luminal, else
/// ~/.cache/luminal (created on demand).
std::string cache_dir();

/// `v` as 16 hex digits (cache file names).
std::string hex(uint64_t v);

/// A name part no other process or earlier call uses: a file written under it and then
/// renamed into place is never seen half-written by a concurrent compile.
std::string unique_tag();

}  // namespace luminal::runtime
