#pragma once

#include "dice/core/role.hpp"

#include "caf/meta/type_name.hpp"

#include <cstdint>
#include <string>

namespace dice {

/// What a role actor reports about itself at the end of a run (and on
/// request): the figures the examples print as one JSON line.
struct node_report {
  /// Node id.
  std::uint32_t node = 0;
  /// Roles of the node.
  role_set roles;
  /// DI-engine's ctx.total_step (0-based index of the last iteration).
  std::int64_t total_step = 0;
  /// Iterations completed.
  std::int64_t iterations = 0;
  /// ctx.env_step.
  std::int64_t env_step = 0;
  /// ctx.env_episode.
  std::int64_t env_episode = 0;
  /// ctx.train_iter.
  std::int64_t train_iter = 0;
  /// Version of the model this node holds (-1: none loaded or sent).
  std::int64_t model_version = -1;
  /// Trajectory items received from peers (learners).
  std::int64_t trajectories_received = 0;
  /// Context deltas received from peers.
  std::int64_t deltas_received = 0;
  /// Model snapshots loaded (receivers) or sent (senders).
  std::int64_t models_loaded = 0;
  /// Model snapshots sent.
  std::int64_t models_sent = 0;
  /// Snapshots dropped as stale, out of order or invalid.
  std::int64_t models_dropped = 0;
  /// Waits that ended by their deadline.
  std::int64_t timeouts = 0;
  /// Times this node was started again after a failure: its role actor
  /// after a middleware threw (--dice.max-restarts), plus its process by
  /// dice-launch --max-restarts (DICE_RESTART_COUNT).
  std::int64_t restarts = 0;
  /// Why the node stopped ("max_step", "finish from node 3", ...).
  std::string stop_reason;
  /// The node stopped on an error of its own (a failed step, no router, no
  /// peer left); a node told to finish by a failed peer did not fail.
  bool failed = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_report& x) {
  return f(caf::meta::type_name("dice::node_report"), x.node, x.roles,
           x.total_step, x.iterations, x.env_step, x.env_episode, x.train_iter,
           x.model_version, x.trajectories_received, x.deltas_received,
           x.models_loaded, x.models_sent, x.models_dropped, x.timeouts,
           x.restarts, x.stop_reason, x.failed);
}

/// The report as one JSON object on one line (bytes of stop_reason that are
/// not UTF-8, say from a peer's finish, become U+FFFD).
std::string to_json(const node_report& x);

} // namespace dice
