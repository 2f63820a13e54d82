// The CPU kernels' thread team (src/backends/cpu/team.hpp): every id of a parallel call
// runs once, its writes are seen by the caller, and nesting, OpenMP regions and exceptions
// inside a team behave as outside one.
#include <gtest/gtest.h>

#include <omp.h>

#include <atomic>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backends/cpu/team.hpp"

namespace {

using luminal::cpugen::run_parallel;
using luminal::cpugen::with_team;

// Runs one parallel call of `count` and checks that ids 0..n-1 ran once each, n the count
// the body was given, and that what they wrote is there when the call returns.
void check_call(int count, int expected_threads) {
  std::vector<int> ran(static_cast<size_t>(count), 0);
  std::atomic<int> given{0};
  run_parallel(count, [&](int id, int n) {
    ran[static_cast<size_t>(id)] += 1;  // plain writes: the call's return must publish them
    given.store(n);
  });
  const int n = given.load();
  EXPECT_EQ(n, expected_threads);
  for (int id = 0; id < count; ++id) EXPECT_EQ(ran[static_cast<size_t>(id)], id < n ? 1 : 0);
}

TEST(Team, ParallelCallsOutsideATeamGetAnOpenMpRegion) {
  check_call(1, 1);
  check_call(2, 2);
}

TEST(Team, ParallelCallsInsideATeamRunOnItsThreads) {
  std::set<std::thread::id> threads;
  std::mutex m;
  with_team(2, [&] {
    for (int call = 0; call < 2000; ++call) check_call(2, 2);
    run_parallel(2, [&](int, int) {
      std::lock_guard<std::mutex> lock(m);
      threads.insert(std::this_thread::get_id());
    });
    check_call(1, 1);
  });
  EXPECT_EQ(threads.size(), 2u) << "the call did not run on two threads";
}

TEST(Team, WorkSplitByTheCallsAddsUp) {
  // Many small calls in a row, as a decode step makes, each reading what the last wrote.
  std::vector<long> values(1000);
  std::iota(values.begin(), values.end(), 0);
  with_team(2, [&] {
    for (int round = 0; round < 500; ++round)
      run_parallel(2, [&](int id, int n) {
        const size_t size = values.size();
        for (size_t i = size * id / n; i < size * (id + 1) / n; ++i) values[i] += 1;
      });
  });
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], static_cast<long>(i) + 500);
}

TEST(Team, NestedCallsRunOnTheCallingThread) {
  with_team(2, [&] {
    run_parallel(2, [&](int, int) { check_call(2, 1); });
    with_team(2, [&] { check_call(2, 2); });  // a team inside a team: the same one
  });
}

TEST(Team, OpenMpRegionsInsideATeamStillComputeEverything) {
  long total = 0;
  with_team(2, [&] {
#pragma omp parallel for reduction(+ : total)
    for (long i = 1; i <= 100000; ++i) total += i;
  });
  EXPECT_EQ(total, 100000L * 100001 / 2);
}

TEST(Team, ExceptionsLeaveTheTeamClosed) {
  EXPECT_THROW(with_team(2,
                         [&] {
                           check_call(2, 2);
                           throw std::runtime_error("kernel failed");
                         }),
               std::runtime_error);
  check_call(2, 2);  // an OpenMP region again: no team is left open on this thread
  with_team(2, [&] { check_call(2, 2); });
}

}  // namespace
