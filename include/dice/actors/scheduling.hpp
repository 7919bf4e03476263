#pragma once

// Where dice's actors run: their own thread or CAF's shared worker pool.

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/atom.hpp"
#include "caf/error.hpp"
#include "caf/expected.hpp"
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

/// Nice value by which a role actor lowers its own thread by default
/// (role_config::thread_nice, --dice.role-nice): its middleware computes
/// (gradient steps, environments, evaluation) while the router and CAF's
/// I/O threads must answer within their idle latency (issue 25, item 4;
/// bench/router_latency_bench).
constexpr int default_role_nice = 5;

/// Lowers the calling thread's scheduling priority by `nice` (added to its
/// nice value, capped at 19; 0 changes nothing). Linux nice values are per
/// thread and inherited by threads it starts later (LibTorch's OpenMP pool),
/// never by others. Returns the new nice value, or an error if the kernel
/// refused (the thread then keeps its priority).
caf::expected<int> lower_this_thread(int nice);

} // namespace dice
