#pragma once

#include "dice/actors/router.hpp"
#include "dice/actors/scheduling.hpp"
#include "dice/core/node_report.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/event.hpp"
#include "dice/messages/finish.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/pipeline/context.hpp"
#include "dice/pipeline/middleware.hpp"
#include "dice/type_ids.hpp"

#include "caf/stateful_actor.hpp"
#include "caf/typed_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dice {

/// A learner, collector, evaluator or fetcher: runs a pipeline iteration by
/// iteration and handles the messages its exchangers subscribed to.
// clang-format off
using role_actor = caf::typed_actor<
  caf::reacts_to<std::string, context_delta>,
  caf::reacts_to<std::string, model_snapshot>,
  caf::reacts_to<std::string, storage_ref>,
  caf::reacts_to<std::string, context_ack>,
  // any other type a user emits on a topic (dice::topic<T>)
  caf::reacts_to<std::string, event>,
  caf::reacts_to<finish>,
  caf::reacts_to<start_atom>,
  caf::replies_to<ready_atom>::with<bool>,
  caf::replies_to<report_atom>::with<node_report>,
  caf::reacts_to<iterate_atom>,
  caf::reacts_to<deadline_atom, std::uint64_t>,
  caf::reacts_to<timer_atom, std::uint64_t>,
  caf::reacts_to<peer_event>,
  caf::reacts_to<done_atom>>;
// clang-format on

/// Settings of a role actor.
struct role_config {
  /// Node id (unique in the cluster).
  std::uint32_t node = 0;
  /// Roles this node holds.
  role_set roles;
  /// Iterations to run; 0 runs until the cluster finishes.
  std::int64_t max_step = 0;
  /// The node's router.
  router_actor router;
  /// Wait for `start_atom` before the first iteration (lets a launcher
  /// join every actor to the router first).
  bool wait_for_start = false;
  /// Incarnation id; 0 picks a random one.
  std::uint64_t incarnation = 0;
  /// Print the final report as one JSON line on stdout.
  bool print_report = false;
  /// Receives the final report (e.g. a launcher waiting for the run).
  caf::actor report_to;
  /// After its last iteration a node keeps receiving until every member of
  /// the router is done (so nothing in flight is lost), at most this long.
  caf::timespan drain_timeout = std::chrono::seconds{10};
  /// Longest wait for one load a middleware started (node_services::load).
  caf::timespan load_timeout = std::chrono::seconds{30};
  /// Restarts still allowed: while positive, a middleware that throws makes
  /// the actor quit with `errc::user_exception` (no finish, no report) so
  /// that its supervisor (run_local, node::run) starts it again; at 0 the
  /// exception ends the run as an error finish.
  std::int64_t restarts_left = 0;
  /// Restarts before this incarnation (node_report::restarts).
  std::int64_t restarts = 0;
  /// Run on its own thread (CAF `detached`): middleware that trains,
  /// evaluates or writes files then never holds a worker of the pool the
  /// router routes on (bench/router_latency_bench). Ignored on CAF's test
  /// coordinator (deterministic mode), where every actor shares one thread.
  bool detached = true;
  /// A detached role actor adds this to its thread's nice value when it
  /// starts (lower_this_thread; 0: unchanged): its compute, and LibTorch's
  /// threads it starts, then yield to the router and CAF's I/O threads
  /// when both want a core (bench/router_latency_bench). An actor on the
  /// pool never renices (the worker is shared).
  int thread_nice = default_role_nice;
  /// Where a collector's context exchanger spools unacknowledged deltas
  /// (node_services::spool_dir; empty: no spool).
  std::string spool_dir;
  /// fdatasync every spool write (node_services::spool_fsync).
  bool spool_fsync = false;
  /// Key the spool authenticates its records with (node_services::spool_key).
  std::string spool_key;
  /// Where the actor leaves its pipeline when it quits for a restart
  /// (role_supervisor runs it again when it has no `rebuild`): middleware
  /// is move-only, so an incarnation hands its pipeline to the next one
  /// instead of two sharing copies. Null: the pipeline dies with the actor.
  std::shared_ptr<pipeline> hand_back;
};

/// Spawns a role actor running `pipe`: detached when `cfg.detached` and
/// `sys` is not deterministic (see dice/actors/scheduling.hpp).
role_actor spawn_role(caf::actor_system& sys, role_config cfg, pipeline pipe);

} // namespace dice
