// Whole programs of other extractions, timed (see program_search.hpp).
#include "runtime/program_search.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <future>
#include <optional>
#include <set>
#include <sstream>

#include "luminal/collective.hpp"
#include "luminal/device_data.hpp"
#include "luminal/graph.hpp"
#include "luminal/hash.hpp"
#include "runtime/env.hpp"
#include "runtime/program.hpp"

namespace luminal::runtime {
namespace {

// How far an output of `type` may stray from the cost model's program's, relative to its
// largest magnitude, in a graph computing in `narrowest` (its narrowest float type):
// fused and unfused kernels round differently, by as much as that type allows (an f32
// output computed from bf16 values is known to bf16's precision). Integers and booleans
// (a token picked by argmax) must agree.
double tolerance(DType type, DType narrowest) {
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16) return 0;
  return narrowest == DType::F32 ? 1e-3 : 3e-2;
}

// F16 or BF16 where any node of `g` is of one, else F32.
DType narrowest_float(const Graph& g) {
  for (uint32_t i = 0; i < g.num_nodes(); ++i) {
    const DType t = g.node(NodeId{i}).dtype;
    if (t == DType::F16 || t == DType::BF16) return t;
  }
  return DType::F32;
}

// The reference program's outputs, kept to compare each candidate's with: an output left
// on a device that compares there is copied aside on it (reading a language model's
// logits back took about a second a candidate); others are read back as f32.
class ReferenceOutputs {
 public:
  explicit ReferenceOutputs(const Graph& g) {
    const DType narrowest = narrowest_float(g);
    for (NodeId o : g.outputs()) {
      Kept& k = kept_.emplace_back();
      k.tolerance = tolerance(g.node(o).dtype, narrowest);
      if (const Buffer* b = g.data(o)) {
        k.host = b->to_f32();
      } else if (const DeviceData* d = g.device_data(o)) {
        k.device = d->kept_for_comparison(k.tolerance);
        if (!k.device) k.host = d->to_host().to_f32();
      }
    }
  }

  // Why the graph's outputs stray from these, "" where none does.
  std::string mismatch(const Graph& g) const {
    const std::vector<NodeId> outputs = g.outputs();
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Kept& k = kept_[i];
      const std::string name = "output %" + std::to_string(outputs[i].value);
      const Buffer* b = g.data(outputs[i]);
      const DeviceData* d = g.device_data(outputs[i]);
      std::string why;
      if (k.device && d) {
        why = k.device->mismatch(*d);
      } else {
        const std::vector<float> got = b   ? b->to_f32()
                                       : d ? d->to_host().to_f32()
                                           : std::vector<float>();
        if (got.size() != k.host.size()) return name + " has another size";
        why = output_mismatch(got.data(), k.host, k.tolerance);
      }
      if (!why.empty()) return name + ": " + why;
    }
    return "";
  }

 private:
  struct Kept {
    double tolerance = 0;
    std::unique_ptr<DeviceComparison> device;
    std::vector<float> host;  // where device is null
  };
  std::vector<Kept> kept_;
};

std::string label(const std::vector<std::string>& avoid) {
  if (avoid.empty()) return "as extracted";
  std::string s = "without";
  for (const std::string& kind : avoid) s += " " + kind;
  return s;
}

// Why the graph's programs cannot be timed on its inputs ("" where they can).
std::string unsearchable(const Graph& g, SearchMode mode) {
  for (uint32_t i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(NodeId{i});
    if (n.op == Op::Custom && dynamic_cast<const CollectiveOp*>(n.custom.get()))
      return "it exchanges values with other ranks";
    // A decode step (its KV cache donated) is searched at its second run, mid-generation,
    // and again where the prompt length passes a power of two (dim_bucket); its winner is
    // compiled there too. On Gemma 3 270M's CPU decode that cost 0.1-0.6 s a process and
    // gained nothing a step: asked for, not by default.
    if (n.op == Op::Input && g.is_donated(NodeId{i}) && mode != SearchMode::Full)
      return "input '" + n.name +
             "' is donated (a decode step): searched under LUMINAL_SEARCH=full";
  }
  return "";
}

// The inputs a run consumes (donated: a decode step's KV cache, grown in place), kept
// while a search runs the program many times: each trial is lent them as they were, and
// they are given back for the run after the search when this goes (an error included).
// Device memory is shared with the trials, which only read it while this holds it too (a
// backend grows a cache in place only where it is the memory's sole holder); host data is
// copied.
class DonatedInputs {
 public:
  explicit DonatedInputs(Graph& g) : graph_(g) {
    for (uint32_t i = 0; i < g.num_nodes(); ++i) {
      const NodeId id{i};
      if (g.node(id).op != Op::Input || !g.is_donated(id)) continue;
      if (const DeviceData* d = g.device_data(id))
        kept_.push_back({id, std::nullopt, *d});
      else if (const Buffer* b = g.data(id))
        kept_.push_back({id, *b, std::nullopt});
    }
  }
  ~DonatedInputs() {
    for (Kept& k : kept_) {
      if (k.device)
        graph_.set_device_data(k.id, std::move(*k.device));
      else
        graph_.set_data(k.id, std::move(*k.host));
    }
  }
  DonatedInputs(const DonatedInputs&) = delete;
  DonatedInputs& operator=(const DonatedInputs&) = delete;

  void lend() const {
    for (const Kept& k : kept_) {
      if (k.device)
        graph_.set_device_data(k.id, *k.device);
      else
        graph_.set_data(k.id, *k.host);
    }
  }

 private:
  struct Kept {
    NodeId id;
    std::optional<Buffer> host;
    std::optional<DeviceData> device;
  };
  Graph& graph_;
  std::vector<Kept> kept_;
};

class ExtractionSearch final : public Executable {
 public:
  ExtractionSearch(std::unique_ptr<Executable> pick, std::vector<std::string> choices,
                   CompileAvoiding compile, const std::string& context, SearchSettings settings)
      : current_(std::move(pick)),
        choices_(std::move(choices)),
        compile_(std::move(compile)),
        searcher_(context, settings, "extraction rounds") {}

  void run(Graph& graph) override {
    if (search_now(graph)) {
      current_->wait();
      search(graph);
    }
    current_->run(graph);
  }
  void queue(Graph& graph) override {
    if (search_now(graph)) {
      current_->wait();
      search(graph);
    }
    current_->queue(graph);
  }
  void queue_on(Graph& graph, void* stream) override {
    if (search_now(graph)) {  // the inputs are written once the caller's work so far is done
      current_->queue_on(graph, stream);
      current_->wait();
      search(graph);
    }
    current_->queue_on(graph, stream);
  }
  void wait() override { current_->wait(); }
  RunStats last_run() const override { return current_->last_run(); }
  void prepare(const Graph& graph, const Bindings& dims) override {
    current_->prepare(graph, dims);
  }

 private:
  // Whether this run, the second, is the one to search before.
  bool search_now(const Graph& graph) {
    if (++runs_ != 2) return false;
    const std::string why = unsearchable(graph, searcher_.settings().mode);
    if (!why.empty() && env_has("LUMINAL_LOG", "info"))
      std::fprintf(stderr, "luminal: search: the program's extractions are not timed: %s\n",
                   why.c_str());
    return why.empty();
  }

  // Greedy over the choices: each round times the best program so far against it with
  // one more kind avoided, for every kind not yet avoided, and stops when none is faster.
  void search(Graph& graph) {
    const DonatedInputs donated(graph);
    const std::string signature = program_signature(graph);
    std::vector<std::string> avoided, left = choices_;
    double best = 0;  // the current program's time where it won a round
    while (!left.empty()) {
      std::vector<std::vector<std::string>> genomes = {avoided};
      for (const std::string& kind : left) {
        genomes.push_back(avoided);
        genomes.back().push_back(kind);
      }
      const size_t winner =
          round(graph, donated, avoided.empty() ? signature : signature + ", " + label(avoided),
                genomes, best);
      if (winner == 0) break;
      avoided = genomes[winner];
      left.erase(left.begin() + static_cast<std::ptrdiff_t>(winner - 1));
    }
  }

  // Times `genomes` (the first, current_'s, the reference), makes the winner current_
  // and returns its index. `best`: the reference's time where it won the round before (0
  // in the first), which the winner must beat too, and then this round's winner's time.
  // (At a transformer block's batch 1, programs of 0.06-0.09 ms, one program measured
  // 0.061 ms as a round's winner and 0.092 as the next round's reference, which a program
  // of 0.087 then beat.)
  size_t round(Graph& graph, const DonatedInputs& donated, const std::string& signature,
               const std::vector<std::vector<std::string>>& genomes, double& best) {
    std::vector<std::unique_ptr<Executable>> built(genomes.size());
    built[0] = std::move(current_);
    std::vector<std::string> failed(genomes.size());
    std::optional<ReferenceOutputs> reference;
    size_t running = 0;  // the candidate whose run the graph's outputs hold
    SearchProblem p;
    p.signature = signature;
    p.finish_once_begun = true;  // (the budget decides whether a round begins)
    p.reference_seconds = best;
    bool compiled = false;
    for (size_t i = 0; i < genomes.size(); ++i)
      p.candidates.push_back({label(genomes[i]), [&, i] {
                                running = i;
                                donated.lend();
                                if (i == 0) {
                                  built[0]->time_device_alone(true);
                                  return built[0]->run(graph);  // fails as it would
                                }
                                if (!compiled) {  // (a round whose winner is cached compiles none)
                                  compile_all(graph, signature, genomes, built, failed);
                                  compiled = true;
                                }
                                if (!failed[i].empty()) return;
                                // Those judged before go: each holds its own copy of the
                                // weights on a GPU once run.
                                for (size_t j = 1; j < i; ++j) built[j].reset();
                                try {
                                  built[i]->time_device_alone(true);
                                  built[i]->run(graph);
                                } catch (const std::exception& e) {
                                  failed[i] = e.what();
                                }
                              }});
    p.keep_reference = [&] { reference.emplace(graph); };
    p.mismatch = [&]() -> std::string {
      if (!failed[running].empty()) return "failed: " + failed[running];
      return reference->mismatch(graph);
    };
    // A GPU program's time is the longer of its kernels' (device events, the device held
    // until the run is queued) and the host's queuing them: runs called one after another
    // go at the pace of the slower. A run's wall time also holds the copies of its outputs
    // to the host, as long for every candidate, which can drown what tells them apart;
    // and the device's time from the run's start holds its waits for the host (a
    // recording, a library's host work) as if they were the device's own.
    std::vector<RunStats> last(genomes.size());  // each candidate's last timed run, for the log
    p.time = [&](const SearchCandidate& c) {
      const auto start = std::chrono::steady_clock::now();
      c.run();
      const double wall = seconds_since(start);
      if (!built[running]) return wall;
      const RunStats s = last[running] = built[running]->last_run();
      return s.device_seconds > 0 ? std::max(s.device_seconds, s.issue_seconds) : wall;
    };
    SearchResult r;
    try {
      r = searcher_.choose(p);
    } catch (...) {  // the reference failed: the error is the run's
      current_ = std::move(built[0]);
      current_->time_device_alone(false);
      throw;
    }
    if (r.searched && env_has("LUMINAL_LOG", "info")) {
      std::string line;
      for (size_t i = 0; i < r.trials.size(); ++i) {
        const SearchTrial& t = r.trials[i];
        char ms[96] = "";
        if (t.median > 0 && last[i].device_seconds > 0)
          std::snprintf(ms, sizeof ms, " %.3f ms (the last run: the device %.3f, queuing %.3f)",
                        t.median * 1e3, last[i].device_seconds * 1e3, last[i].issue_seconds * 1e3);
        else if (t.median > 0)
          std::snprintf(ms, sizeof ms, " %.3f ms", t.median * 1e3);
        line += (line.empty() ? "" : "; ") + t.label + ms + " (" +
                t.verdict.substr(0, t.verdict.find(':')) + ")";
      }
      std::fprintf(stderr, "luminal: search %s: %s\n", signature.c_str(), line.c_str());
    }
    if (!built[r.winner]) {  // released while others were judged, or read from the cache
      try {
        built[r.winner] = compile(graph, genomes[r.winner]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "luminal: warning: search %s: the winner %s no longer compiles (%s)\n",
                     signature.c_str(), label(genomes[r.winner]).c_str(), e.what());
        r.winner = 0;
      }
    }
    best = r.searched && r.winner < r.trials.size() ? r.trials[r.winner].median : 0;
    current_ = std::move(built[r.winner]);
    current_->time_device_alone(false);
    return r.winner;
  }

  // Compiles the candidates after the first side by side (the e-graph, code generation and
  // NVRTC or the C++ compiler are the time a round takes); a failure is that candidate's.
  void compile_all(const Graph& graph, const std::string& signature,
                   const std::vector<std::vector<std::string>>& genomes,
                   std::vector<std::unique_ptr<Executable>>& built,
                   std::vector<std::string>& failed) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::future<std::pair<std::unique_ptr<Executable>, double>>> compiling;
    for (size_t i = 1; i < genomes.size(); ++i)
      compiling.push_back(std::async(std::launch::async, [&, i] {
        const auto begun = std::chrono::steady_clock::now();
        std::unique_ptr<Executable> e = compile(graph, genomes[i]);
        return std::pair{std::move(e), seconds_since(begun)};
      }));
    double busy = 0;
    for (size_t i = 1; i < genomes.size(); ++i) {
      try {
        auto [e, seconds] = compiling[i - 1].get();
        built[i] = std::move(e);
        busy += seconds;
      } catch (const std::exception& e) {
        failed[i] = e.what();
      }
    }
    if (env_has("LUMINAL_LOG", "info"))
      std::fprintf(stderr,
                   "luminal: search %s: %zu programs compiled in %.2f s (%.2f s of compiling)\n",
                   signature.c_str(), genomes.size() - 1, seconds_since(start), busy);
  }

  std::unique_ptr<Executable> compile(const Graph& graph, const std::vector<std::string>& avoid) {
    std::vector<std::string> unused;
    return compile_(graph, avoid, unused);
  }

  std::unique_ptr<Executable> current_;
  std::vector<std::string> choices_;
  CompileAvoiding compile_;
  Searcher searcher_;
  size_t runs_ = 0;
};

}  // namespace

int64_t dim_bucket(int64_t value) {
  int64_t bucket = 1;
  while (bucket < value) bucket *= 2;
  return value < 1 ? value : bucket;
}

std::string program_signature(const Graph& graph) {
  std::ostringstream text;
  text << graph.to_text();
  std::set<std::string> dims;
  for (uint32_t i = 0; i < graph.num_nodes(); ++i)
    for (const Expr& d : graph.node(NodeId{i}).shape)
      for (const std::string& v : d.variables()) dims.insert(v);
  // Each dim by the power of two it is at most: a winner measured at 1101 cached
  // positions serves 1102 (a decode step is not searched again for every prompt length).
  for (const std::string& d : dims) {
    const std::optional<int64_t> v = graph.dims().get(d);
    text << d << '=' << (v ? std::to_string(dim_bucket(*v)) : "?") << ';';
  }
  char name[64];
  std::snprintf(name, sizeof name, "program %016llx (%zu nodes)",
                static_cast<unsigned long long>(hash_bytes(text.str())), graph.num_nodes());
  return name;
}

std::unique_ptr<Executable> compile_searching_extractions(const Graph& graph,
                                                          const CompileAvoiding& compile,
                                                          const std::string& context) {
  std::vector<std::string> choices;
  std::unique_ptr<Executable> pick = compile(graph, {}, choices);
  const SearchSettings settings = search_settings_from_env();
  if (choices.empty() || settings.mode == SearchMode::Off) return pick;
  return std::make_unique<ExtractionSearch>(std::move(pick), std::move(choices), compile, context,
                                            settings);
}

}  // namespace luminal::runtime
