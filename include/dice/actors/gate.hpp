#pragma once

#include "dice/actors/bus.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"

namespace dice {

/// Spawns the actor a node publishes on its port in front of `bus`: it hands
/// every message to the bus unchanged (sender and request id kept, so
/// replies go straight back), and no message can stop it — in CAF 0.17 any
/// remote peer can `send_exit` a published actor, even with
/// `exit_reason::kill`, which no handler can trap. It quits when the bus
/// does.
caf::actor spawn_gate(caf::actor_system& sys, const bus_actor& bus);

} // namespace dice
