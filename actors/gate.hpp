#pragma once

#include "dice/actors/router.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/expected.hpp"
#include "caf/timespan.hpp"

#include <cstdint>

namespace dice {

/// Spawns the gate of `router` (the router does this itself when it starts; see
/// router_state::gate). The gate is the only actor of a node that other nodes
/// ever address or hear from:
/// - inbound, it takes the handshake (challenge, hello) from anyone and
///   answers it in its own name; peer traffic (forward, chunk, subscribe,
///   done, finish) goes on to the router with its sender, which checks that it
///   is an authenticated peer's gate; everything else is dropped, counted
///   and logged once per source: anonymous messages, local control from
///   another node, senders this node's registry holds (BASP lets a remote
///   node claim those), exits (even `kill`, which no handler can trap),
///   error and down messages (CAF's default handlers would stop it);
/// - outbound, the router sends peer traffic as the gate (`caf::send_as`) and
///   asks the gate to make its handshake requests, so no id of the router, a
///   role actor or a loader ever leaves the node.
/// It quits when the router does.
/// `node` names this node in log lines; `timeout` bounds each handshake
/// request the gate makes or relays.
caf::actor spawn_gate(caf::actor_system& sys, caf::actor router,
                      std::uint32_t node, caf::timespan timeout);

/// The gate of a running router (asks it; blocks, so only outside of actors
/// and never on CAF's test coordinator).
caf::expected<caf::actor> gate_of(caf::actor_system& sys,
                                  const router_actor& router);

/// The actor a node publishes for `router`: its gate (gate_of; null if the
/// router does not answer). Kept under this name for dice::node.
caf::actor spawn_gate(caf::actor_system& sys, const router_actor& router);

} // namespace dice
