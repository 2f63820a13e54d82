// Starting, joining and watching the rank processes of a run over several GPUs.
#include "luminal/ranks.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "luminal/cuda.hpp"
#include "luminal/error.hpp"

extern char** environ;

namespace luminal {
namespace {

constexpr const char* kRank = "LUMINAL_TP_RANK";
constexpr const char* kSize = "LUMINAL_TP_SIZE";
constexpr const char* kId = "LUMINAL_TP_ID";
constexpr const char* kProgress = "LUMINAL_TP_PROGRESS_FD";  // a pipe's end, to the launcher

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by ") + strsignal(WTERMSIG(status));
  return "stopped";
}

double seconds_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  LUM_CHECK(*end == '\0' && s > 0)
      << name << " must be a positive number of seconds, got '" << v << "'";
  return s;
}

}  // namespace

std::optional<RankOf> this_rank() {
  const char* rank = std::getenv(kRank);
  const char* size = std::getenv(kSize);
  if (!rank || !size) return std::nullopt;
  RankOf me{std::atoi(rank), std::atoi(size)};
  LUM_CHECK(me.size >= 1 && me.rank >= 0 && me.rank < me.size)
      << kRank << "=" << rank << " and " << kSize << "=" << size << " do not fit";
  return me;
}

std::shared_ptr<Communicator> join_ranks(const RankOf& me) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // a launcher killed takes its ranks with it
  const char* id = std::getenv(kId);
  LUM_CHECK(id) << kId
                << " is not set (rank processes are started by launch_ranks: luminal generate "
                   "--tp, bench_train_ranks --ranks)";
  return nccl_communicator(id, me.rank, me.size, me.rank);
}

void report_progress() {
  static const int fd = [] {
    const char* v = std::getenv(kProgress);
    if (!v) return -1;
    const int f = std::atoi(v);
    fcntl(f, F_SETFL, fcntl(f, F_GETFL) | O_NONBLOCK);  // a full pipe skips a report
    signal(SIGPIPE, SIG_IGN);  // a launcher gone: the write fails, the rank goes on
    return f;
  }();
  if (fd < 0) return;
  const char beat = 1;
  [[maybe_unused]] const ssize_t written = write(fd, &beat, 1);
}

LaunchOptions LaunchOptions::from_env() {
  LaunchOptions o;
  o.finish_seconds = seconds_from_env("LUMINAL_TP_TIMEOUT", o.finish_seconds);
  o.stall_seconds = seconds_from_env("LUMINAL_TP_STALL", o.stall_seconds);
  return o;
}

int launch_ranks(int n, char** argv, const LaunchOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  // Made before the ranks: NCCL's bootstrap for the id lives in this process.
  const std::string id = options.group_id ? options.group_id() : nccl_unique_id();
  struct Rank {
    pid_t pid = -1;           // -1 once it has exited
    int progress = -1;        // the read end of its progress pipe (-1 once closed)
    Clock::time_point heard;  // its last progress report, or its start
  };
  std::vector<Rank> ranks(static_cast<size_t>(n));
  const auto stop_all = [&](int signal) {
    for (const Rank& r : ranks)
      if (r.pid > 0) kill(r.pid, signal);
  };
  for (int r = 0; r < n; ++r) {
    int pipe_ends[2];
    LUM_CHECK(pipe2(pipe_ends, O_CLOEXEC) == 0) << "cannot make a pipe: " << std::strerror(errno);
    fcntl(pipe_ends[1], F_SETFD, 0);  // this rank's write end alone crosses the exec
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "LUMINAL_TP_", 11) != 0) env.emplace_back(*e);
    env.push_back(std::string(kRank) + "=" + std::to_string(r));
    env.push_back(std::string(kSize) + "=" + std::to_string(n));
    env.push_back(std::string(kId) + "=" + id);
    env.push_back(std::string(kProgress) + "=" + std::to_string(pipe_ends[1]));
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (r > 0) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int e = posix_spawn(&pid, options.program.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_ends[1]);
    fcntl(pipe_ends[0], F_SETFL, O_NONBLOCK);
    ranks[static_cast<size_t>(r)] = {e == 0 ? pid : -1, pipe_ends[0], Clock::now()};
    if (e != 0) {
      stop_all(SIGKILL);
      LUM_FAIL() << "cannot start rank " << r << " (" << options.program
                 << "): " << std::strerror(e);
    }
  }

  // Watch them: the first failure stops the rest (they would wait on it forever), as does
  // a rank silent for stall_seconds; once one has finished, the others have finish_seconds.
  int status = 0, running = n;
  std::optional<Clock::time_point> first_done, stop_sent;
  const auto stop = [&](int exit_status) {
    if (stop_sent) return;
    status = exit_status;
    stop_all(SIGTERM);
    stop_sent = Clock::now();
  };
  while (running > 0) {
    const auto now = Clock::now();
    for (Rank& r : ranks) {
      char buf[256];
      ssize_t got = 0;
      while (r.progress >= 0 && (got = read(r.progress, buf, sizeof buf)) > 0) r.heard = now;
      if (r.progress >= 0 && got == 0) close(r.progress), r.progress = -1;  // it exited
    }
    int st = 0;
    const pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      const auto it =
          std::find_if(ranks.begin(), ranks.end(), [&](const Rank& r) { return r.pid == p; });
      if (it == ranks.end()) continue;
      const int r = static_cast<int>(it - ranks.begin());
      it->pid = -1;
      --running;
      if (!first_done) first_done = now;
      if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && status == 0) {
        if (running > 0)
          std::fprintf(stderr, "luminal: rank %d of %d %s; stopping the other ranks\n", r, n,
                       describe(st).c_str());
        stop(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
      }
      continue;
    }
    if (!stop_sent && first_done && now - *first_done > seconds(options.finish_seconds)) {
      std::fprintf(stderr,
                   "luminal: %d of %d ranks did not finish within %g s of the first "
                   "(LUMINAL_TP_TIMEOUT); stopping them\n",
                   running, n, options.finish_seconds);
      stop(2);
    }
    for (size_t r = 0; r < ranks.size() && !stop_sent; ++r)
      if (ranks[r].pid > 0 && now - ranks[r].heard > seconds(options.stall_seconds)) {
        std::fprintf(stderr,
                     "luminal: rank %zu of %d made no progress for %g s (LUMINAL_TP_STALL); "
                     "stopping the ranks\n",
                     r, n, options.stall_seconds);
        stop(2);
      }
    if (stop_sent && now - *stop_sent > std::chrono::seconds(5)) stop_all(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const Rank& r : ranks)
    if (r.progress >= 0) close(r.progress);
  return status;
}

}  // namespace luminal
