#pragma once

// What the CartPole demos do with an evaluation the same way: the log line,
// best.pt / best.json on a new best, ending the run at the stop value, and
// printing an --eval-only run, and the evaluator middleware itself. The
// caller plays and saves its own network type.

#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/expected.hpp"

#include "outputs.hpp"
#include "run_record.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace demo {

/// Logs one evaluation (info for a new best or a solved run, debug
/// otherwise: evaluations come several times a second) and, on a new best,
/// writes OUT/best.pt through `save_best` and OUT/best.json. A failed write
/// is logged and the run goes on.
void report_eval(std::uint32_t node, const eval_point& pt, bool best,
                 bool solved, const std::string& out,
                 const std::function<void(const std::string&)>& save_best);

/// Asks the cluster to finish (reason "stop_value") once `solved`, unless it
/// already finished.
void stop_when_solved(dice::node_services& svc, std::uint32_t node, bool solved,
                      double stop_value, double seconds);

/// Asks the cluster to finish once the run reached `max_env_steps` (reason
/// "max_env_steps") or `max_seconds` (reason "max_seconds"); 0 means no
/// limit. The learner calls it after each iteration.
void finish_at_limits(dice::node_services& svc, std::int64_t env_step,
                      std::int64_t max_env_steps, double seconds,
                      double max_seconds);

/// The mean of `returns` (NaN when empty: no episode ended), which it
/// empties: the collectors' train return over one metrics interval.
double take_mean(std::vector<double>& returns);

/// What an evaluator needs of its demo's options.
struct eval_settings {
  /// Learner iterations between evaluations.
  std::int64_t every = 0;
  /// Greedy episodes per evaluation.
  int episodes = 0;
  /// The run's seed (each evaluation plays from its own seed derived from it).
  std::uint64_t seed = 0;
  /// Mean return that solves the run.
  double stop_value = 0;
  /// The output folder (best.pt, best.json).
  std::string out;
};

/// What an evaluator does with its own network type.
struct eval_hooks {
  /// Plays `episodes` greedy episodes from `seed`; returns their returns.
  std::function<std::vector<double>(int episodes, std::uint64_t seed)> play;
  /// Writes the network to `path` (best.pt); may throw.
  std::function<void(const std::string& path)> save;
  /// The model version reported in the metrics line.
  std::function<std::int64_t(const dice::context&)> version;
  /// Only a model with version > 0 solves the run (some seeds' initial
  /// weights already balance the pole when played greedily).
  bool trained_to_solve = false;
  /// Runs first on the first iteration (empty: nothing), e.g. to restore
  /// resumed counters.
  std::function<void(dice::context&, dice::node_services&)> first;
};

/// The evaluator: every `s.every` learner iterations plays `s.episodes`
/// greedy episodes, records them in `run` and its metrics, keeps best.pt
/// and ends the run at the stop value.
dice::middleware eval_step(std::shared_ptr<run_record> run, std::uint32_t node,
                           eval_settings s, eval_hooks hooks);

/// Prints each episode's return and their mean (`--eval-only`); returns the
/// program's exit code (1 with the error on stderr).
int print_eval_only(const caf::expected<std::vector<double>>& returns);

} // namespace demo
