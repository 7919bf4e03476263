#pragma once

// What an RL run writes to its output folder, shared by every node of a
// process: metrics.jsonl (one JSON line per event), the live progress line,
// the evaluation history with eval_return.png, the resume point, and at the
// end summary.json and a printed summary. In a cluster each process writes
// metrics-ID.jsonl and summary-ID.json; the node that evaluated writes the
// plot.

#include "dice/rl/cpu_time.hpp"
#include "dice/rl/files.hpp"
#include "dice/runtime/run.hpp"

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dice::rl {

/// What a run writes where.
struct outputs_options {
  /// Output folder (created with its parents).
  std::string out = "runs/dice";
  /// Title of the plot and the printed summary ("DQN CartPole-v1").
  std::string title = "dice";
  /// Mean eval return that solves the run (drawn in the plot).
  double stop_value = std::numeric_limits<double>::infinity();
  /// Show the live progress line on stderr.
  bool progress = true;
  /// Write eval_return.png (needs gnuplot).
  bool plot = true;
  /// Continue a run: the metrics file is appended to and the counters of
  /// OUT/latest.json are the starting point.
  bool resume = false;
};

/// Where a resumed run starts (OUT/latest.json and OUT/best.json).
struct resume_point {
  /// `outputs_options::resume` was set.
  bool resumed = false;
  /// Counters the last checkpoint saved (0 if none).
  std::int64_t env_step = 0, train_iter = 0, env_episode = 0;
  /// The return best.pt reached (-inf if none).
  double best = -std::numeric_limits<double>::infinity();
};

/// What record_eval says about an evaluation.
struct eval_outcome {
  /// Better than every earlier one (best.pt is replaced).
  bool best = false;
  /// The first that reached the stop value.
  bool first_solve = false;
};

/// A process's outputs (see the top of this header).
class run_outputs {
 public:
  /// This process's outputs, made on the first call of any node (the
  /// others get the same object): creates OUT, opens the metrics file and
  /// reads the resume point; after every node stopped it writes the summary
  /// and the plot. Throws std::runtime_error if OUT cannot be written
  /// (dice::run reports it as the node's build error).
  static std::shared_ptr<run_outputs> of(node_setup& n,
                                         const outputs_options& opts);

  /// Outputs without a cluster (tests, a plain loop): nothing happens at
  /// exit unless `finish` is called.
  static caf::expected<std::shared_ptr<run_outputs>>
  make(const outputs_options& opts, bool distributed = false,
       std::uint32_t node = 0);

  /// The settings.
  const outputs_options& options() const noexcept {
    return opts_;
  }

  /// OUT/`name`.
  std::string path(const std::string& name) const;

  /// Seconds since the outputs were made (about the start of the run).
  double seconds() const;

  /// Appends one metrics line for `node` in `role`.
  void metrics(std::uint32_t node, const std::string& role, const json& fields);

  /// Replaces the progress line (shown only with `options().progress`).
  void progress(const std::string& text);

  /// Records an evaluation: the history, the best and the first solve.
  eval_outcome record_eval(const eval_point& pt, bool solved);

  /// The last evaluation's mean (NaN before the first).
  double last_eval() const;

  /// Every evaluation so far.
  std::vector<eval_point> evals() const;

  /// Where a resumed run starts.
  const resume_point& resumed() const noexcept {
    return resume_;
  }

  /// Adds what `node` knows to the summary: JSON fields and lines of the
  /// printed summary (the learner's lag, gradient steps, ...).
  void summarize(std::uint32_t node, json fields, std::string text = {});

  /// Adds `seconds` of thread CPU time (cpu_span) to `component` ("env",
  /// "inference", "learner", "evaluator"); the summary sets the components
  /// against the process's CPU time and wall time x cores.
  void add_cpu(const std::string& component, double seconds);

  /// The CPU seconds added so far, by component.
  cpu_components cpu() const;

  /// Writes the plot, the summary file and the printed summary for the
  /// nodes in `result` (dice::run calls it after the last node stopped).
  void finish(const run_result& result);

  /// The summary `finish` writes, as a JSON object.
  json summary(const run_result& result) const;

 private:
  run_outputs(outputs_options opts, bool distributed, std::uint32_t node);
  caf::error open();

  outputs_options opts_;
  bool distributed_;
  std::uint32_t node_;
  std::chrono::steady_clock::time_point start_;
  resume_point resume_;
  metrics_log metrics_;
  mutable std::mutex mtx_;
  std::vector<eval_point> evals_;
  double best_ = -std::numeric_limits<double>::infinity();
  double solve_seconds_ = -1;
  std::int64_t solve_env_steps_ = -1;
  std::map<std::uint32_t, std::pair<json, std::string>> extra_;
  cpu_components cpu_;
  // The process's CPU time when the outputs were made (LibTorch's loading
  // and the actor system's start are not the run's).
  double cpu_start_ = 0;
  std::optional<progress_line> progress_;
};

} // namespace dice::rl
