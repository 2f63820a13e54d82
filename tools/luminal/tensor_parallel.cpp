// Starting, joining and watching the rank processes of `luminal generate --tp N`.
#include "tensor_parallel.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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

namespace luminal::cli {
namespace {

constexpr const char* kRank = "LUMINAL_TP_RANK";
constexpr const char* kSize = "LUMINAL_TP_SIZE";
constexpr const char* kId = "LUMINAL_TP_ID";

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by ") + strsignal(WTERMSIG(status));
  return "stopped";
}

int seconds_from_env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long s = std::strtol(v, &end, 10);
  LUM_CHECK(*end == '\0' && s > 0)
      << name << " must be a positive number of seconds, got '" << v << "'";
  return static_cast<int>(s);
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
  const char* id = std::getenv(kId);
  LUM_CHECK(id) << kId << " is not set (rank processes are started by luminal generate --tp)";
  return nccl_communicator(id, me.rank, me.size, me.rank);
}

int launch_ranks(int n, char** argv) {
  const int timeout = seconds_from_env("LUMINAL_TP_TIMEOUT", 120);
  const std::string id = nccl_unique_id();  // its bootstrap lives in this process
  std::vector<pid_t> ranks;
  const auto stop_all = [&](int signal) {
    for (pid_t p : ranks)
      if (p > 0) kill(p, signal);
  };
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "LUMINAL_TP_", 11) != 0) env.emplace_back(*e);
    env.push_back(std::string(kRank) + "=" + std::to_string(r));
    env.push_back(std::string(kSize) + "=" + std::to_string(n));
    env.push_back(std::string(kId) + "=" + id);
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (r > 0) posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    pid_t pid = 0;
    const int e = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (e != 0) {
      stop_all(SIGKILL);
      LUM_FAIL() << "cannot start rank " << r << ": " << std::strerror(e);
    }
    ranks.push_back(pid);
  }

  // Watch them: the first failure stops the rest (they would wait on it forever); once one
  // has finished, the others have `timeout` seconds to.
  using Clock = std::chrono::steady_clock;
  int status = 0, running = n;
  std::optional<Clock::time_point> first_done, stop_sent;
  while (running > 0) {
    int st = 0;
    const pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      const auto it = std::find(ranks.begin(), ranks.end(), p);
      if (it == ranks.end()) continue;
      const int r = static_cast<int>(it - ranks.begin());
      *it = -1;
      --running;
      if (!first_done) first_done = Clock::now();
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && status == 0) {
        status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (running > 0)
          std::fprintf(stderr, "luminal: rank %d of %d %s; stopping the other ranks\n", r, n,
                       describe(st).c_str());
        stop_all(SIGTERM);
        stop_sent = Clock::now();
      }
      continue;
    }
    const auto now = Clock::now();
    if (!stop_sent && first_done && now - *first_done > std::chrono::seconds(timeout)) {
      std::fprintf(stderr,
                   "luminal: %d of %d ranks did not finish within %d s of the first "
                   "(LUMINAL_TP_TIMEOUT); stopping them\n",
                   running, n, timeout);
      status = 2;
      stop_all(SIGTERM);
      stop_sent = now;
    }
    if (stop_sent && now - *stop_sent > std::chrono::seconds(5)) stop_all(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return status;
}

}  // namespace luminal::cli
