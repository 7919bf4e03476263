#include "runtime/role_supervisor.hpp"

#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"

#include <exception>
#include <string>

namespace dice {

role_supervisor::role_supervisor(role_config cfg, pipeline pipe,
                                 std::int64_t max_restarts,
                                 std::function<pipeline()> rebuild)
  : cfg_(std::move(cfg)), pipe_(std::move(pipe)), max_restarts_(max_restarts),
    rebuild_(std::move(rebuild)), returned_(std::make_shared<pipeline>()) {
  // nop
}

role_actor role_supervisor::spawn(caf::actor_system& sys, pipeline pipe) {
  auto rc = cfg_;
  rc.restarts = cfg_.restarts + restarts_;
  rc.restarts_left = max_restarts_ - restarts_;
  // Without `rebuild` the next incarnation runs this pipeline again: the
  // quitting actor hands it back (middleware is move-only).
  if (!rebuild_)
    rc.hand_back = returned_;
  current_ = spawn_role(sys, std::move(rc), std::move(pipe));
  return current_;
}

role_actor role_supervisor::start(caf::actor_system& sys) {
  return spawn(sys, std::move(pipe_));
}

bool role_supervisor::restart(caf::actor_system& sys,
                              const caf::error& reason) {
  if (!is(reason, errc::user_exception) || restarts_ >= max_restarts_)
    return false;
  ++restarts_;
  // The others already run: this one starts as soon as it joined.
  cfg_.wait_for_start = false;
  cfg_.incarnation = 0;
  log::warning(cfg_.node,
               "restarting the role actor (restart " + std::to_string(restarts_)
                 + " of " + std::to_string(max_restarts_)
                 + ") with a fresh context");
  pipeline next;
  try {
    next = rebuild_ ? rebuild_() : std::move(*returned_);
  } catch (const std::exception& e) {
    log::error(cfg_.node,
               std::string{"cannot rebuild the pipeline: "} + e.what());
    return false;
  }
  spawn(sys, std::move(next));
  return true;
}

} // namespace dice
