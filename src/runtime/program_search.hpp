// Search over extraction choices: whole programs, timed.
//
// The saturated e-graph holds many equivalent programs; the cost model extracts one.
// Where it chose a fused kernel whose e-class also holds the unfused form (a product that
// adds its bias as it stores, fused attention: compiler::Optimized::choices), other
// extractions avoid such kinds (compiler::OptimizeOptions::avoid). They are compiled and
// timed whole (each round's compiled side by side), on the program's own inputs, through
// the kernel search's Searcher, greedily:
// each round times the best program so far (the cost model's, first) against it with one
// more kind avoided, for each kind not yet avoided, and the search ends with a round the
// reference wins. A candidate whose outputs differ from the reference's beyond the output
// type's tolerance, or that fails to compile, is never chosen; each round's winner is
// cached by the graph's signature and the kinds avoided before it. The winner then runs
// from there on.
//
// When: at the program's second run (a program run once gains nothing from a search of
// its whole, and its first run settles its kernels' own searches), for a graph without
// collectives (every rank would have to time the same candidates in step); not under
// LUMINAL_SEARCH=off. Donated inputs, which a run consumes (a decode step's KV cache),
// are given to every trial run as the caller set them; such graphs are searched only
// under LUMINAL_SEARCH=full (a decode step's search and its winner's compile land
// mid-generation, again where the prompt length passes a power of two).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "luminal/backend.hpp"
#include "runtime/search.hpp"

namespace luminal::runtime {

/// Compiles `graph` with the extraction avoiding the kernel kinds `avoid`, and sets
/// `choices` to its Optimized::choices.
using CompileAvoiding = std::function<std::unique_ptr<Executable>(
    const Graph& graph, const std::vector<std::string>& avoid, std::vector<std::string>& choices)>;

/// The cost model's program, compiled now, which searches the alternatives as above where
/// the program offers any (else it is the cost model's program as it is). `context` names
/// what else fixes a winner (the device).
std::unique_ptr<Executable> compile_searching_extractions(const Graph& graph,
                                                          const CompileAvoiding& compile,
                                                          const std::string& context);

/// The signature a program's winner is cached under: its nodes, views, types and outputs
/// and the dims it runs with, each as dim_bucket gives it (not its inputs' data).
std::string program_signature(const Graph& graph);

/// The least power of two at or above `value` (`value` itself below 1): the dims a
/// program's signature tells apart.
int64_t dim_bucket(int64_t value);

}  // namespace luminal::runtime
