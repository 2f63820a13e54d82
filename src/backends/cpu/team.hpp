// Parallel work for the CPU kernels: on a thread team held open for a whole executor run,
// or on a fresh OpenMP region (private to src/backends/cpu).
//
// A decode step runs about ninety parallel kernels (products, attention) with a few small
// serial kernels between each two. Opening an OpenMP region for each costs its fork and
// join: the other thread starts about 1.3 us late and the calling one waits about as long
// at the join. Inside with_team the other threads spin on one cache line for the next
// parallel call instead: a call is a store, and a wait for each thread's answer.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace luminal::cpugen {

namespace team_detail {
using Body = void (*)(void* context, int id, int count);
// Runs body(context, id, count) for id in [0, count): on the calling thread's open team
// when there is one and `count` fits it, else in an OpenMP region of `count` threads.
void dispatch(int count, Body body, void* context);
}  // namespace team_detail

/// Runs body(id, count) for every id in [0, count), one id per thread, and returns when
/// all have. The body must not throw. `count` 1 runs it on the calling thread alone.
template <class F>
void run_parallel(int count, F&& body) {
  if (count <= 1) return body(0, 1);
  using Fn = std::remove_reference_t<F>;
  team_detail::dispatch(
      count, [](void* c, int id, int n) { (*static_cast<Fn*>(c))(id, n); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

/// Runs body(begin, end) over [0, n) split into one contiguous range per thread of
/// `threads` (fewer where fewer are given).
template <class F>
void run_parallel_for(int threads, int64_t n, F&& body) {
  run_parallel(threads, [&](int id, int count) { body(n * id / count, n * (id + 1) / count); });
}

/// Runs `main` on the calling thread while `threads - 1` other threads wait, spinning, for
/// its run_parallel calls, which then start without a fork. Kernels that open OpenMP
/// regions of their own inside `main` get one thread, so this suits runs of many small
/// parallel calls. Exceptions from `main` come out of here.
void with_team(int threads, void (*main)(void*), void* context);

template <class F>
void with_team(int threads, F&& main) {
  using Fn = std::remove_reference_t<F>;
  with_team(
      threads, [](void* c) { (*static_cast<Fn*>(c))(); },
      const_cast<void*>(static_cast<const void*>(&main)));
}

}  // namespace luminal::cpugen
