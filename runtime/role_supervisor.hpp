#pragma once

// Restarts of one node's role actor (DI-engine's auto_recover, in-process):
// a middleware that throws while restarts are left makes the role actor
// quit with errc::user_exception; whoever monitors it (run_local,
// node::run) asks this helper, which spawns the next incarnation with a
// fresh context and a new incarnation on the same router.

#include "dice/actors/role_actor.hpp"
#include "dice/pipeline/middleware.hpp"

#include "caf/actor_system.hpp"
#include "caf/error.hpp"

#include <cstdint>
#include <functional>
#include <memory>

namespace dice {

/// The incarnations of one node's role actor.
class role_supervisor {
 public:
  /// `rebuild` makes the pipeline of each restarted incarnation (DI-engine
  /// re-runs `main`); without it a restart reuses `pipe` as it is (the
  /// quitting incarnation hands it back), so middleware keeps what it
  /// captured (e.g. an exchanger's sequence).
  role_supervisor(role_config cfg, pipeline pipe, std::int64_t max_restarts,
                  std::function<pipeline()> rebuild = {});

  /// Spawns the first incarnation.
  role_actor start(caf::actor_system& sys);

  /// The incarnation that runs now.
  const role_actor& current() const noexcept {
    return current_;
  }

  /// Restarts performed.
  std::int64_t restarts() const noexcept {
    return restarts_;
  }

  /// Called with the exit reason of the current incarnation: spawns the
  /// next one and returns true if it quit for a restart and restarts are
  /// left; false if the node is gone for good.
  bool restart(caf::actor_system& sys, const caf::error& reason);

 private:
  role_actor spawn(caf::actor_system& sys, pipeline pipe);

  role_config cfg_;
  pipeline pipe_;
  std::int64_t max_restarts_;
  std::function<pipeline()> rebuild_;
  /// Where a quitting incarnation leaves its pipeline (role_config::hand_back).
  std::shared_ptr<pipeline> returned_;
  std::int64_t restarts_ = 0;
  role_actor current_;
};

} // namespace dice
