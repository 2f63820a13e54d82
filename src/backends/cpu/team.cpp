// The thread team of with_team and run_parallel (see team.hpp).
#include "backends/cpu/team.hpp"

#include <omp.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace luminal::cpugen {
namespace {

// One cache line per worker for it to say which call it last finished, which only the
// caller reads: a call then moves the call's line to each worker and each worker's line
// back, 0.2 us on two cores of a shared machine. A counter every thread incremented took
// 0.9 us, about the 1.2 us of an OpenMP region's fork and join.
struct alignas(64) Finished {
  std::atomic<uint64_t> call{0};
};

struct Team {
  // The call: written by the caller, then published by advancing `call`; one cache line,
  // which is all a waiting thread reads.
  alignas(64) std::atomic<uint64_t> call{0};
  team_detail::Body body = nullptr;
  void* context = nullptr;
  int count = 0;
  bool stop = false;
  std::vector<Finished> finished;  // by thread id; 0 is the caller's and unused
};

thread_local Team* open_team = nullptr;  // the calling thread's, while with_team runs
thread_local bool in_call = false;       // a run_parallel body is running on it

// Waits until `ready()`: spinning at first, as the next call comes within microseconds;
// after about a millisecond yielding, so that a thread left waiting does not hold a core
// another program wants.
template <class Ready>
void wait_until(Ready&& ready) {
  constexpr unsigned kSpins = 1u << 14;
  for (unsigned spins = 0; !ready(); ++spins) {
    if (spins < kSpins) {
#if defined(__x86_64__)
      _mm_pause();
#endif
    } else {
      std::this_thread::yield();
    }
  }
}

void serve(Team& t, int id) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = seen;
    wait_until([&] { return (now = t.call.load(std::memory_order_acquire)) != seen; });
    seen = now;
    if (t.stop) return;
    if (id < t.count) t.body(t.context, id, t.count);
    // Every thread answers, so that the call's fields are not rewritten while one still
    // reads them.
    t.finished[static_cast<size_t>(id)].call.store(seen, std::memory_order_release);
  }
}

}  // namespace

namespace team_detail {

void dispatch(int count, Body body, void* context) {
  Team* t = open_team;
  if (t && !in_call && static_cast<size_t>(count) <= t->finished.size()) {
    in_call = true;
    t->body = body;
    t->context = context;
    t->count = count;
    const uint64_t call = t->call.load(std::memory_order_relaxed) + 1;
    t->call.store(call, std::memory_order_release);  // only this thread writes it
    body(context, 0, count);
    for (size_t id = 1; id < t->finished.size(); ++id)
      wait_until([&] { return t->finished[id].call.load(std::memory_order_acquire) == call; });
    in_call = false;
    return;
  }
#pragma omp parallel num_threads(count)
  body(context, omp_get_thread_num(), omp_get_num_threads());
}

}  // namespace team_detail

void with_team(int threads, void (*main)(void*), void* context) {
  if (threads <= 1 || open_team || omp_in_parallel()) return main(context);
  Team t;
  std::exception_ptr error;
#pragma omp parallel num_threads(threads)
  {
    if (omp_get_thread_num() == 0) {
      t.finished = std::vector<Finished>(static_cast<size_t>(omp_get_num_threads()));
      open_team = &t;
      try {
        main(context);
      } catch (...) {
        error = std::current_exception();
      }
      open_team = nullptr;
      t.stop = true;
      t.call.store(t.call.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    } else {
      serve(t, omp_get_thread_num());
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace luminal::cpugen
