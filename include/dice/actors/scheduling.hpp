#pragma once

// Where dice's actors run: their own thread or CAF's shared worker pool.

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/atom.hpp"
#include "caf/scheduler/test_coordinator.hpp"

namespace dice {

/// True if `sys` runs on CAF's test coordinator (dice's deterministic mode):
/// every actor must then run on the coordinator's one thread, so dice spawns
/// nothing detached there, whatever its options say.
inline bool deterministic_scheduler(caf::actor_system& sys) {
  return dynamic_cast<caf::scheduler::test_coordinator*>(&sys.scheduler())
    != nullptr;
}

/// Makes every actor system built from `cfg` deterministic: CAF's test
/// coordinator (one thread, FIFO order, a virtual clock). `run_local` then
/// drives the whole run, and role actors and loaders spawned with their
/// default (detached) options stay on the coordinator. Call it before the
/// actor system is constructed, e.g. in a GoogleTest or your own `main`;
/// `DICE_MAIN` programs get it from `--dice.deterministic`.
inline void make_deterministic(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
}

} // namespace dice
