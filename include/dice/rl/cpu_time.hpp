#pragma once

// Where a run's CPU time goes, without perf: each node measures the CPU
// time of its own thread around the work it does (env steps, the policy's
// forward pass, the learner's update, evaluation episodes) and adds it to
// its process's run_outputs; the summary sets the sum against the process's
// CPU time (the rest is dice: exchangers, codecs, segment building, actors)
// and against wall time x cores (the rest is idle).

#include <map>
#include <string>

namespace dice::rl {

/// CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID): a
/// thread that waits or is descheduled does not count, so spans of nodes
/// sharing a core add up to at most the core.
double thread_cpu_seconds() noexcept;

/// CPU seconds the whole process has used, user + system (getrusage).
double process_cpu_seconds() noexcept;

/// Adds the calling thread's CPU time from construction to destruction to
/// `sink` (one thread from start to end: CAF runs a middleware's step on
/// one worker).
class cpu_span {
 public:
  /// Starts measuring.
  explicit cpu_span(double& sink) noexcept
    : sink_(sink), start_(thread_cpu_seconds()) {
    // nop
  }

  ~cpu_span() {
    sink_ += thread_cpu_seconds() - start_;
  }

  cpu_span(const cpu_span&) = delete;
  cpu_span& operator=(const cpu_span&) = delete;

 private:
  double& sink_;
  double start_;
};

/// CPU seconds by component ("env", "inference", "learner", "evaluator").
using cpu_components = std::map<std::string, double>;

} // namespace dice::rl
