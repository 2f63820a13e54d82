// The launcher of several ranks (`luminal generate --tp N`, data-parallel training) on stand-in
// ranks (shell scripts): what each rank is told, and that a rank that fails, outlives the others or
// goes silent stops the run with an error instead of leaving it waiting.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "luminal/ranks.hpp"

namespace luminal {
namespace {

struct Outcome {
  int status = -1;
  double seconds = 0;
};

Outcome launch(int n, const std::string& script, double finish_seconds = 60,
               double stall_seconds = 60) {
  LaunchOptions o;
  o.program = "/bin/sh";
  o.group_id = [] { return std::string("group-id"); };
  o.finish_seconds = finish_seconds;
  o.stall_seconds = stall_seconds;
  std::vector<std::string> args{"sh", "-c", script};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const int status = launch_ranks(n, argv.data(), o);
  return {status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

TEST(Launcher, EachRankLearnsItsRankTheSizeAndTheGroup) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("luminal_launcher_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const Outcome o = launch(3, "echo \"$LUMINAL_TP_RANK $LUMINAL_TP_SIZE $LUMINAL_TP_ID\" > " +
                                  dir.string() + "/rank$LUMINAL_TP_RANK");
  EXPECT_EQ(o.status, 0);
  for (int r = 0; r < 3; ++r) {
    std::ifstream in(dir / ("rank" + std::to_string(r)));
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, std::to_string(r) + " 3 group-id");
  }
  std::filesystem::remove_all(dir);
}

TEST(Launcher, AFailingRankStopsTheOthersWithItsStatus) {
  const Outcome o = launch(3, "[ \"$LUMINAL_TP_RANK\" = 1 ] && exit 3; exec sleep 30");
  EXPECT_EQ(o.status, 3);
  EXPECT_LT(o.seconds, 10);
}

TEST(Launcher, RanksStillRunningLongAfterOneFinishedAreStopped) {
  const Outcome o = launch(2, "[ \"$LUMINAL_TP_RANK\" = 0 ] && exit 0; exec sleep 30", 0.5);
  EXPECT_EQ(o.status, 2);
  EXPECT_LT(o.seconds, 10);
}

TEST(Launcher, ARankSilentTooLongIsStopped) {
  const Outcome o = launch(2, "printf x >&$LUMINAL_TP_PROGRESS_FD; exec sleep 30", 60, 1);
  EXPECT_EQ(o.status, 2);
  EXPECT_LT(o.seconds, 10);
}

TEST(Launcher, ProgressReportsKeepARankRunning) {
  // Three seconds of work, a report every quarter second, a one-second limit on silence.
  const Outcome o = launch(2,
                           "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do printf x "
                           ">&$LUMINAL_TP_PROGRESS_FD; sleep 0.25; done",
                           60, 1);
  EXPECT_EQ(o.status, 0);
  EXPECT_GT(o.seconds, 2.5);
}

}  // namespace
}  // namespace luminal
