// What a DQN run reports at its end: summary.json and the printed summary.

#include "dice/logging/log.hpp"

#include "outputs.hpp"
#include "shared_run.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <sstream>

namespace dqn {

using demo::fixed;
using demo::json;

namespace {

/// The summary as a JSON object (see summary_json).
json summary_object(const run_summary& sum) {
  json j;
  if (!sum.roles.empty()) {
    j["node"] = sum.node;
    j["roles"] = sum.roles;
  }
  j["solved"] = static_cast<int>(sum.solved);
  j["solve_seconds"] = sum.solve_seconds;
  j["solve_env_steps"] = sum.solve_env_steps;
  j["best_eval"] = demo::number(sum.best_eval);
  j["last_eval"] = demo::number(sum.last_eval);
  j["evaluations"] = sum.evals.size();
  j["env_steps"] = sum.env_steps;
  j["train_iters"] = sum.train_iters;
  j["learner_iterations"] = sum.learner_iterations;
  j["seconds"] = sum.seconds;
  j["env_steps_per_s"] = demo::number(sum.env_steps_per_s());
  j["train_iters_per_s"] = demo::number(sum.train_iters_per_s());
  j["lag_min"] = sum.lag_min;
  j["lag_mean"] = sum.lag_mean;
  j["lag_max"] = sum.lag_max;
  j["stop_reason"] = sum.stop_reason;
  j["failed"] = sum.failed;
  return j;
}

} // namespace

void collect_results(shared_run& run, run_summary& sum) {
  std::lock_guard<std::mutex> guard{run.mtx};
  sum.evals = run.evals;
  sum.best_eval = run.best;
  if (!run.evals.empty())
    sum.last_eval = run.evals.back().mean;
  sum.solved = run.solve_seconds >= 0;
  sum.solve_seconds = run.solve_seconds;
  sum.solve_env_steps = run.solve_env_steps;
  if (run.lag_count > 0) {
    sum.lag_min = static_cast<double>(run.lag_min);
    sum.lag_max = static_cast<double>(run.lag_max);
    sum.lag_mean = run.lag_sum / static_cast<double>(run.lag_count);
  }
}

void write_summary(const run_options& opts, const run_summary& sum,
                   const std::string& name) {
  try {
    demo::write_json(path_in(opts, name), summary_object(sum));
  } catch (const std::exception& e) {
    dice::log::error(sum.node,
                     std::string{"cannot write summary: "} + e.what());
  }
}

std::string summary_json(const run_summary& sum) {
  return demo::dump(summary_object(sum));
}

std::string to_string(const run_summary& x) {
  std::ostringstream os;
  if (x.roles == "collector")
    // A collector knows only its own steps.
    return "== DQN CartPole-v1, node " + std::to_string(x.node)
      + " (collector) ==\nenv steps:         " + std::to_string(x.env_steps)
      + " (" + fixed(x.env_steps_per_s(), 0) + "/s)\nstop reason:       "
      + x.stop_reason + "\nwall time:         " + fixed(x.seconds, 2) + " s\n";
  os << "== DQN CartPole-v1 summary";
  if (!x.roles.empty())
    os << ", node " << x.node << " (" << x.roles << ")";
  os << " ==\n";
  // A learner in a cluster with an evaluator node never evaluates itself.
  if (x.roles == "learner" && x.evals.empty())
    os << "evaluations:       on the evaluator node (its summary)\n";
  else
    os << "solved:            "
       << (x.solved ? "yes, after " + fixed(x.solve_seconds, 2) + " s and "
               + std::to_string(x.solve_env_steps) + " env steps"
                    : std::string{"no"})
       << "\n"
       << "best / last eval:  " << fixed(x.best_eval) << " / "
       << fixed(x.last_eval) << " (" << x.evals.size() << " evaluations)\n";
  os << "stop reason:       " << x.stop_reason << "\n"
     << "env steps:         " << x.env_steps << " ("
     << fixed(x.env_steps_per_s(), 0) << "/s)\n"
     << "learner:           " << x.train_iters << " gradient steps ("
     << fixed(x.train_iters_per_s(), 0) << "/s), " << x.learner_iterations
     << " iterations ("
     << fixed(x.learner_iterations / std::max(x.seconds, 1e-9), 1) << "/s)\n"
     << "policy lag:        min " << fixed(x.lag_min, 0) << ", mean "
     << fixed(x.lag_mean, 2) << ", max " << fixed(x.lag_max, 0)
     << " model versions\n"
     << "wall time:         " << fixed(x.seconds, 2) << " s\n";
  return os.str();
}

} // namespace dqn
