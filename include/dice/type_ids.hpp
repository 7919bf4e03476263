#pragma once

// The one type-ID block of dice. Every program and every test fixture calls
// `dice::add_message_types(cfg)` (or
// `cfg.add_message_types<caf::id_block::dice>()`) so that both ends of a
// connection know the same names; an unregistered type arrives as an empty
// message `()` in CAF 0.17.

#include "dice/core/node_report.hpp"
#include "dice/core/role.hpp"
#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/forward_batch.hpp"
#include "dice/messages/detail/peer_hello.hpp"
#include "dice/messages/detail/relay_reference.hpp"
#include "dice/messages/detail/snapshot_chunk.hpp"
#include "dice/messages/event.hpp"
#include "dice/messages/finish.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/payload.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/messages/storage_ref.hpp"

#include "caf/actor_system_config.hpp"
#include "caf/type_id.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(dice, caf::first_custom_type_id)

  CAF_ADD_TYPE_ID(dice, (dice::role_set))
  CAF_ADD_TYPE_ID(dice, (dice::payload))
  CAF_ADD_TYPE_ID(dice, (dice::context_delta))
  CAF_ADD_TYPE_ID(dice, (dice::tensor_entry))
  CAF_ADD_TYPE_ID(dice, (dice::model_snapshot))
  CAF_ADD_TYPE_ID(dice, (dice::storage_ref))
  CAF_ADD_TYPE_ID(dice, (dice::finish))
  CAF_ADD_TYPE_ID(dice, (dice::node_report))
  CAF_ADD_TYPE_ID(dice, (dice::peer_hello))
  CAF_ADD_TYPE_ID(dice, (dice::snapshot_chunk))
  CAF_ADD_TYPE_ID(dice, (dice::peer_event))
  CAF_ADD_TYPE_ID(dice, (dice::context_ack))
  CAF_ADD_TYPE_ID(dice, (dice::event))
  CAF_ADD_TYPE_ID(dice, (dice::relay_reference))
  CAF_ADD_TYPE_ID(dice, (dice::forwarded))
  CAF_ADD_TYPE_ID(dice, (dice::forward_batch))

  /// Subscribes an actor to a topic on a router.
  CAF_ADD_ATOM(dice, dice, subscribe_atom, "subscribe")
  /// Publishes a message on a topic through a router.
  CAF_ADD_ATOM(dice, dice, publish_atom, "publish")
  /// Registers a role actor with its node's router.
  CAF_ADD_ATOM(dice, dice, join_atom, "join")
  /// Lets a role actor begin its first iteration.
  CAF_ADD_ATOM(dice, dice, start_atom, "start")
  /// Asks a role actor whether it has joined its router.
  CAF_ADD_ATOM(dice, dice, ready_atom, "ready")
  /// Internal: run the next pipeline iteration.
  CAF_ADD_ATOM(dice, dice, iterate_atom, "iterate")
  /// Internal: a wait's deadline has passed.
  CAF_ADD_ATOM(dice, dice, deadline_atom, "deadline")
  /// A member will publish nothing more; from the router: every member is done.
  CAF_ADD_ATOM(dice, dice, done_atom, "done")
  /// Asks for a node's report.
  CAF_ADD_ATOM(dice, dice, report_atom, "report")
  /// Handshake between the routers of two nodes.
  CAF_ADD_ATOM(dice, dice, hello_atom, "hello")
  /// A message a peer node's router forwards to this node.
  CAF_ADD_ATOM(dice, dice, forward_atom, "forward")
  /// Asks a router to connect (and stay connected) to a peer node.
  CAF_ADD_ATOM(dice, dice, attach_atom, "attach")
  /// Asks a router about its peers (waits for a minimum number).
  CAF_ADD_ATOM(dice, dice, peers_atom, "peers")
  /// Internal: a router timer (reconnect, peer loss) fired.
  CAF_ADD_ATOM(dice, dice, tick_atom, "tick")
  /// Asks a loader to store data and return (or publish) its storage_ref.
  CAF_ADD_ATOM(dice, dice, save_atom, "save")
  /// Asks a loader to read what a storage_ref points at.
  CAF_ADD_ATOM(dice, dice, load_atom, "load")
  /// Answered once everything queued before it has been handled (a barrier).
  CAF_ADD_ATOM(dice, dice, flush_atom, "flush")
  /// Internal: a timer a middleware scheduled on its role actor fired.
  CAF_ADD_ATOM(dice, dice, timer_atom, "timer")
  /// Asks a router for its gate (the one actor of a node that peers address).
  CAF_ADD_ATOM(dice, dice, gate_atom, "gate")
  /// A router asks its gate to send a handshake request to a peer in the gate's
  /// name.
  CAF_ADD_ATOM(dice, dice, ask_atom, "ask")
  /// A relay receiver tells the origin how a round went (router_relay.cpp).
  CAF_ADD_ATOM(dice, dice, relay_atom, "relay")
  /// Internal: a data plane's inbox tells its router that a snapshot's bytes
  /// came with their header (net/data_wire.hpp).
  CAF_ADD_ATOM(dice, dice, arrived_atom, "arrived")

CAF_END_TYPE_ID_BLOCK(dice)

namespace dice {

/// Registers every dice message type with `cfg` (call before creating the
/// actor system).
inline caf::actor_system_config&
add_message_types(caf::actor_system_config& cfg) {
  return cfg.add_message_types<caf::id_block::dice>();
}

} // namespace dice
