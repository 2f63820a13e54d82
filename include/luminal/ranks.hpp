// Runs over several GPUs, one process a GPU (`luminal generate --tp N`, data-parallel
// training): a program starts N copies of itself, the ranks (rank r on GPU r, joined
// through NCCL), and waits for them. Rank 0 prints; the others run silent. A rank that fails, hangs
// or stops making progress stops the others: the command exits with an error instead of leaving
// them waiting forever on a collective.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "luminal/collective.hpp"

namespace luminal {

/// In a rank's process: its rank and the group's size; nullopt in the launching process.
struct RankOf {
  int rank = 0, size = 1;
};
std::optional<RankOf> this_rank();

/// In a rank's process: joins the group (every rank must) on GPU `rank`.
std::shared_ptr<Communicator> join_ranks(const RankOf& me);

/// In a rank's process: tells the launcher this rank made progress (a stage done, a
/// token); nothing elsewhere.
void report_progress();

struct LaunchOptions {
  std::string program = "/proc/self/exe";  // what each rank runs, with the argv given
  std::function<std::string()> group_id;   // the NCCL group's id (default: a new one)
  /// After one rank has finished, how long the others may take (LUMINAL_TP_TIMEOUT).
  double finish_seconds = 120;
  /// How long a rank may go without reporting progress (LUMINAL_TP_STALL): loading a
  /// large model's weights is the longest quiet stage.
  double stall_seconds = 600;
  /// The two limits from the environment, where set (a malformed value is an Error).
  static LaunchOptions from_env();
};

/// Runs `options.program` (`argv`, as main received it) as `n` rank processes; returns the
/// exit status: 0 once all finished well, else the first failure's (each rank prints its
/// own error; this adds which rank failed), or 2 where ranks were stopped for a limit.
int launch_ranks(int n, char** argv, const LaunchOptions& options = LaunchOptions::from_env());

}  // namespace luminal
