// `luminal generate --tp N`: one process a GPU. The command starts N copies of itself, the
// ranks (rank r on GPU r, joined through NCCL), and waits for them. Rank 0 prints; the
// others run silent. A rank that fails stops the others: the command exits with its
// error instead of leaving them waiting forever on a collective.
#pragma once

#include <memory>
#include <optional>

#include "luminal/collective.hpp"

namespace luminal::cli {

/// In a rank's process: its rank and the group's size; nullopt in the launching process.
struct RankOf {
  int rank = 0, size = 1;
};
std::optional<RankOf> this_rank();

/// In a rank's process: joins the group (every rank must) on GPU `rank`.
std::shared_ptr<Communicator> join_ranks(const RankOf& me);

/// Runs this program (`argv`, as main received it) as `n` rank processes; returns the exit
/// status: 0 once all finished well, else the first failure's (each rank prints its own
/// error; this adds which rank failed). LUMINAL_TP_TIMEOUT (seconds, default 120): how long
/// the others may take to finish after one has; past it they are stopped.
int launch_ranks(int n, char** argv);

}  // namespace luminal::cli
