#pragma once

// What every node of one CartPole demo process shares, whatever the
// algorithm: the clock, the metrics file, the progress line and the
// evaluation history. Each demo's shared_run derives from it and adds its own.

#include "outputs.hpp"

#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

namespace demo {

/// The run state a demo's nodes (and the shared evaluator) share.
struct run_record {
  /// Start of the run (reset when the nodes start).
  clock_type::time_point start = clock_type::now();
  /// Guards the evaluation history and what a demo adds under it.
  std::mutex mtx;
  /// The process's metrics file.
  metrics_log metrics;
  /// Every evaluation, in order.
  std::vector<eval_point> evals;
  /// Best evaluation mean (best.pt holds its model).
  double best = -std::numeric_limits<double>::infinity();
  /// When the stop value was first reached (-1: not yet).
  double solve_seconds = -1;
  /// Env steps when the stop value was first reached (-1: not yet).
  std::int64_t solve_env_steps = -1;
  /// The live progress line (null: none).
  progress_line* progress = nullptr;

  /// Seconds since the start of the run.
  double seconds() const {
    return std::chrono::duration<double>(clock_type::now() - start).count();
  }

  /// Appends one metrics line for `node` in `role`.
  void write_metrics(std::uint32_t node, const std::string& role,
                     const json& fields) {
    metrics.write(seconds(), node, role, fields);
  }

  /// The last evaluation's mean (NaN before the first).
  double last_eval() {
    std::lock_guard<std::mutex> guard{mtx};
    return evals.empty() ? std::numeric_limits<double>::quiet_NaN()
                         : evals.back().mean;
  }
};

} // namespace demo
