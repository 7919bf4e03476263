#pragma once

// What the CartPole demos do with an evaluation the same way: the log line,
// best.pt / best.json on a new best, ending the run at the stop value, and
// printing an --eval-only run. The caller saves its own network type.

#include "dice/runtime/middleware.hpp"

#include "caf/expected.hpp"

#include "outputs.hpp"

#include <cstdint>
#include <functional>
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

/// The mean of `returns` (NaN when empty: no episode ended), which it
/// empties: the collectors' train return over one metrics interval.
double take_mean(std::vector<double>& returns);

/// Prints each episode's return and their mean (`--eval-only`); returns the
/// program's exit code (1 with the error on stderr).
int print_eval_only(const caf::expected<std::vector<double>>& returns);

} // namespace demo
