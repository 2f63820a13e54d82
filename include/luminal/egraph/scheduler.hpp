// Equality saturation: search every rule, apply the matches, rebuild; repeat until
// nothing changes or a limit is hit. Rules that explode are banned for a while
// (exponential back-off, as egg's BackoffScheduler).
#pragma once

#include <string>
#include <vector>

#include "luminal/egraph/rules.hpp"

namespace luminal::eg {

struct RunLimits {
  size_t max_iterations = 30;
  size_t max_nodes = 1'000'000;
  double max_seconds = 10.0;
  /// A rule whose matches in one iteration exceed this (doubled per past ban) is
  /// banned for `ban_length` iterations (also doubled per past ban). 0 disables.
  size_t match_limit = 10'000;
  size_t ban_length = 5;
};

enum class StopReason { Saturated, IterationLimit, NodeLimit, TimeLimit };
std::string_view stop_reason_name(StopReason r);

struct RuleStats {
  std::string name;
  uint64_t matches = 0;  // total over the run
  uint64_t unions = 0;   // applications that merged two classes
  size_t times_banned = 0;
  double search_seconds = 0, apply_seconds = 0;
};

struct IterationStats {
  size_t nodes = 0, classes = 0;  // after the iteration's rebuild
  uint64_t matches = 0, unions = 0;
  size_t repairs = 0;  // parent nodes the rebuild re-canonicalised
  double seconds = 0, rebuild_seconds = 0;
};

struct RunReport {
  StopReason reason = StopReason::Saturated;
  std::vector<IterationStats> iterations;
  std::vector<RuleStats> rules;
  double seconds = 0;
  /// A human-readable table (what LUMINAL_LOG=info prints).
  std::string to_string() const;
};

/// Runs the rule sets together until saturation or a limit.
RunReport run_rules(EGraph& g, const std::vector<const RuleSet*>& sets, const Functions& fns,
                    const RunLimits& limits = {});

/// Applies one rule everywhere it matches now (search then apply, no rebuild); returns
/// (matches, unions). Exposed for tests and custom schedules.
std::pair<uint64_t, uint64_t> apply_rule(EGraph& g, const Rule& rule, const Functions& fns);

}  // namespace luminal::eg
