#pragma once

#include "dice/actors/role_actor.hpp"
#include "dice/core/node_report.hpp"
#include "dice/core/role.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/actor_system.hpp"
#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace dice {

/// One node of an in-process cluster.
struct local_node {
  /// Node id.
  std::uint32_t id = 0;
  /// Roles of the node.
  role_set roles;
  /// What the node runs each iteration.
  pipeline pipe;
  /// Iterations of this node; -1 takes `local_run_options::max_step`, 0 runs
  /// until another node finishes the run.
  std::int64_t max_step = -1;
  /// Builds the pipeline of a restarted incarnation (DI-engine re-runs
  /// `main`); empty: a restart reuses `pipe` with the state its middleware
  /// kept.
  std::function<pipeline()> rebuild = nullptr;
  /// False keeps this node's role actor on CAF's worker pool even when
  /// `local_run_options::detached_roles` is set (a node that only routes
  /// or answers needs no thread of its own).
  bool detached = true;
};

/// Options of an in-process run.
struct local_run_options {
  /// Iterations per node; 0 runs until a node finishes the run.
  std::int64_t max_step = 0;
  /// Print each node's final report as one JSON line on stdout.
  bool print_reports = true;
  /// Give up (and stop every node) after this long.
  caf::timespan deadline = std::chrono::minutes{30};
  /// Per node: a role actor whose middleware throws is started again on
  /// the same router with a fresh context this many times (node_report::
  /// restarts); the next exception ends the run as an error
  /// (--dice.max-restarts).
  std::int64_t max_restarts = 0;
  /// Run each role actor on its own thread, so that one that trains never
  /// holds a worker the router needs (see role_config::detached).
  bool detached_roles = true;
  /// Nice value each detached role actor adds to its thread
  /// (role_config::thread_nice, --dice.role-nice).
  int role_nice = default_role_nice;
  /// SIGINT or SIGTERM finishes the run as the first node's own finish
  /// (reason "SIGTERM", not failed; stop_signals.hpp); dice::run sets it.
  bool stop_on_signals = false;
};

/// Runs every node as a role actor in `sys` on one router: joins them all
/// before any starts (no early message is lost), waits for all to stop,
/// and returns their reports in node order. The embedded default of dice.
caf::expected<std::vector<node_report>> run_local(caf::actor_system& sys,
                                                  std::vector<local_node> nodes,
                                                  local_run_options opts = {});

} // namespace dice
