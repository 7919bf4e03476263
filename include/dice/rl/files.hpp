#pragma once

// What an RL run writes besides checkpoints: JSON files written whole
// (through a temporary file and a rename, so a reader never sees half of
// one), one metrics line per event (metrics.jsonl), the eval-return plot,
// and the live progress line on stderr. Plain C++ and nlohmann-json: any
// string (a stop reason with a quote, a path) still gives valid JSON.

#include "caf/error.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dice::rl {

/// JSON objects keep their fields in the order they were added.
using json = nlohmann::ordered_json;

/// `dir`/`name`.
std::string path_in(const std::string& dir, const std::string& name);

/// Creates the folder `dir` and its parents; an error names it.
caf::error make_run_dir(const std::string& dir);

/// `x` with `digits` decimals ("nan" and "inf" as printf writes them).
std::string fixed(double x, int digits = 1);

/// A number for JSON: NaN and infinities become null (JSON has neither).
json number(double x);

/// `j` on one line; bytes that are not UTF-8 (a peer's error text) are
/// replaced instead of throwing.
std::string dump(const json& j);

/// Writes `j` and a newline to `path` through a temporary file and a
/// rename.
caf::error write_json(const std::string& path, const json& j);

/// Reads a JSON object from `path`; an empty object if the file is missing
/// or does not parse.
json read_json(const std::string& path);

/// One JSON object per line, appended by every node of a process
/// (thread-safe); each line starts with time, node and role.
class metrics_log {
 public:
  /// Opens `path`, appending (a resumed run) or truncating.
  caf::error open(const std::string& path, bool append);

  /// Writes {"time": seconds, "node": node, "role": role, fields...}.
  void write(double seconds, std::uint32_t node, const std::string& role,
             const json& fields);

 private:
  std::mutex mtx_;
  std::ofstream file_;
};

/// One evaluation.
struct eval_point {
  /// Env steps (all collectors) when the evaluated model was current.
  std::int64_t env_step = 0;
  /// Learner iterations (train_iter).
  std::int64_t train_iter = 0;
  /// Seconds since the start of the run.
  double seconds = 0;
  /// Mean, lowest and highest return of the episodes.
  double mean = 0, min = 0, max = 0;
};

/// Mean, min and max of `returns` at the given point of the run.
eval_point make_eval_point(const std::vector<double>& returns,
                           std::int64_t env_step, std::int64_t train_iter,
                           double seconds);

/// Writes OUT/eval_return.dat and, when `png` and gnuplot is installed,
/// OUT/eval_return.png: mean and min-max of every evaluation against env
/// steps and wall time, with the stop value. `node` tags the log lines.
void write_eval_plot(const std::string& out,
                     const std::vector<eval_point>& evals,
                     const std::string& title, double stop_value, bool png,
                     std::uint32_t node);

/// The mean of `returns` (NaN when empty), which it empties: a collector's
/// train return over one metrics interval.
double take_mean(std::vector<double>& returns);

/// The live progress line on stderr: redrawn in place on a terminal (log
/// lines clear it first and redraw it after), one line per update
/// otherwise. Installs its log sink for its lifetime.
class progress_line {
 public:
  /// Shows nothing unless `enabled`.
  explicit progress_line(bool enabled);
  ~progress_line();
  progress_line(const progress_line&) = delete;
  progress_line& operator=(const progress_line&) = delete;

  /// Replaces the line with `text`.
  void show(const std::string& text);

  /// Whether lines are shown at all.
  bool enabled() const noexcept {
    return enabled_;
  }

 private:
  struct shared;
  bool enabled_;
  bool tty_;
  std::shared_ptr<shared> shared_;
};

} // namespace dice::rl
