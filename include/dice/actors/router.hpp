#pragma once

#include "dice/actors/relay_mode.hpp"
#include "dice/core/role.hpp"
#include "dice/messages/detail/forward_batch.hpp"
#include "dice/messages/detail/peer_hello.hpp"
#include "dice/messages/finish.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/message.hpp"
#include "caf/response_promise.hpp"
#include "caf/stateful_actor.hpp"
#include "caf/timespan.hpp"
#include "caf/typed_actor.hpp"
#include "caf/typed_event_based_actor.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dice::net {
class data_plane;
class data_item;
} // namespace dice::net

namespace dice {

/// A node's message router: role actors join it, subscribe to topics and
/// publish on them; it delivers each message once to every subscriber of
/// its topic on another node (DI-engine's `emit(only_remote=True)` +
/// `on`), holds messages for topics nobody subscribed to yet, and spreads
/// `finish`. Routers of different nodes connect through CAF's middleman
/// (`attach`): a handshake, then each peer gets one copy of every message on
/// a topic one of its members subscribed to.
///
/// Other nodes never talk to the router itself: each router spawns a gate
/// (actors/gate.hpp), the one actor a node publishes, and all traffic
/// with peers goes through it in both directions. Local control (join,
/// subscribe, publish, done, attach, peers, gate) is taken only from actors
/// of this node that name themselves and that no other node can name (see
/// security/senders.hpp); peer traffic only from an authenticated peer's
/// gate, and only in that peer's own name.
using router_actor = caf::typed_actor<
  // join(node, roles, member, topics) -> the finish, if the run is over.
  caf::replies_to<join_atom, std::uint32_t, role_set, caf::actor,
                  std::vector<std::string>>::with<std::vector<finish>>,
  // subscribe(topic, node, member)
  caf::reacts_to<subscribe_atom, std::string, std::uint32_t, caf::actor>,
  // publish(topic, sender node, message)
  caf::reacts_to<publish_atom, std::string, std::uint32_t, caf::message>,
  // the run is over (from a local member, or relayed by a peer)
  caf::reacts_to<finish>,
  // done(node, member): the member has finished its last iteration and will
  // publish nothing more; once every member is done, each gets (done).
  caf::reacts_to<done_atom, std::uint32_t, caf::actor>,
  // -- from this node's gate: another node's handshake -----------------------
  // hello(from, peer) -> hello: refused on a protocol mismatch, a wrong
  // secret, this node's own id, or (retry_later) a node id still connected
  // through another actor.
  caf::replies_to<hello_atom, caf::actor, peer_hello>::with<peer_hello>,
  // hello(from, nonce) -> (nonce, proof): the cluster-secret challenge that
  // comes before the hello when a secret is set (dice/security/auth.hpp).
  caf::replies_to<hello_atom, caf::actor, std::string>::with<std::string,
                                                             std::string>,
  // -- from peers (through the gate, sender kept) -----------------------------
  // subscribe(topic, peer node): a member of the peer subscribed later.
  caf::reacts_to<subscribe_atom, std::string, std::uint32_t>,
  // forward(topic, sender node, message): a peer's publish.
  caf::reacts_to<forward_atom, std::string, std::uint32_t, caf::message>,
  // forward(batch): forwards that queued while the peer's router was busy.
  caf::reacts_to<forward_atom, forward_batch>,
  // forward(chunk): a piece of a large snapshot a peer published.
  caf::reacts_to<forward_atom, snapshot_chunk>,
  // forward(topic, sender node, transfer, snapshot without its bytes): a
  // snapshot whose bytes travel on the data plane (net/data_plane.hpp).
  caf::reacts_to<forward_atom, std::string, std::uint32_t, std::uint64_t,
                 model_snapshot>,
  // forward(reference): a snapshot of the sending peer whose bytes come by
  // relay (actors/router_relay.cpp).
  caf::reacts_to<forward_atom, relay_reference>,
  // arrived(peer node, transfer, order, header): from this node's data plane
  // only, bytes that came with their header (net/data_wire.hpp).
  caf::reacts_to<arrived_atom, std::uint32_t, std::uint64_t, std::uint64_t,
                 std::string>,
  // relay(round, node, ok): a receiver's report on a relay round: `node`
  // is itself (ok: delivered; else: send it directly) or a child it could
  // not forward to.
  caf::reacts_to<relay_atom, std::uint32_t, std::uint32_t, bool>,
  // done(peer node): every member of the peer is done.
  caf::reacts_to<done_atom, std::uint32_t>,
  // -- control ----------------------------------------------------------------
  // attach(host, port): connect to a peer node and stay connected.
  caf::reacts_to<attach_atom, std::string, std::uint16_t>,
  // peers(n) -> connected peers, once at least n are connected.
  caf::replies_to<peers_atom, std::uint32_t>::with<std::uint32_t>,
  // gate -> the actor to publish for this node.
  caf::replies_to<gate_atom>::with<caf::actor>,
  // internal timers: (tick, kind, id)
  caf::reacts_to<tick_atom, std::uint32_t, std::uint64_t>,
  // internal: sends what queued for peers since the last (flush)
  caf::reacts_to<flush_atom>>;

/// Most messages a router keeps from a peer whose handshake answer has not
/// arrived yet (its backlog for this node, sent just before the answer).
inline constexpr std::size_t max_handshake_backlog = 1 << 16;

/// Settings of a router.
struct router_config {
  /// Messages held per topic while nobody subscribes (oldest dropped); a
  /// retained topic holds its last message only.
  std::size_t max_held_per_topic = 1024;
  /// This node's id (used in the handshake and in logs).
  std::uint32_t node = 0;
  /// This node's roles (told to peers).
  role_set roles;
  /// True in a cluster: the node expects peers and stops when it has none
  /// for `peer_loss_timeout`.
  bool expect_peers = false;
  /// A node without peers for this long stops with an error.
  caf::timespan peer_loss_timeout = std::chrono::seconds{30};
  /// Deadline of one connection attempt.
  caf::timespan connect_timeout = std::chrono::seconds{2};
  /// First delay before reconnecting; doubles up to `reconnect_max`.
  caf::timespan reconnect_min = std::chrono::milliseconds{100};
  /// Longest delay between reconnection attempts.
  caf::timespan reconnect_max = std::chrono::seconds{2};
  /// Topics whose last message a newly connected peer gets at once (the
  /// latest model and train_iter), as if it had been subscribed all along.
  std::vector<std::string> retained_topics;
  /// Cluster secret: peers must prove they know it before any data is
  /// exchanged (empty: no check).
  std::string secret;
  /// Every connection to and from this node proved the secret in dice's
  /// preamble before BASP read a byte (a `dice::node` with a secret: its
  /// listener takes every connection, its `dialer` makes every one), so the
  /// router's own challenge would prove it again: with a `dialer` the
  /// router attaches with its hello at once, and it takes a hello without
  /// the challenge's proof. False (CAF's own publish/connect, the
  /// deterministic tests): the challenge comes first, as always.
  bool preamble_proven = false;
  /// Connect through CAF's openssl module (TLS) instead of plain BASP; only
  /// without a `dialer` (with one, the dialer does TLS).
  bool tls = false;
  /// Who connects to peers: a node's dialer (net/dialer.hpp: raw connect,
  /// dice's preamble, then BASP; `node::start` always sets one). Null:
  /// CAF's own connect, for peers published with CAF's own publish, i.e.
  /// the deterministic tests' testing network backend, whose connections
  /// are simulated and carry no stranger's bytes.
  caf::actor dialer;
  /// Snapshots larger than this travel to peers in chunks of this size.
  std::size_t chunk_bytes = default_chunk_bytes;
  /// The node's data plane: large snapshots to peers it connected travel
  /// on their own connections beside BASP. Null: BASP only (the
  /// deterministic tests, and `--dice.data-channel=false`).
  std::shared_ptr<net::data_plane> data;
  /// Relay broadcast (actors/router_relay.cpp): a large snapshot for at
  /// least `relay_min_peers` remote peers with data connections (not
  /// same-host) reaches them through a tree of fan-out 2 of those peers,
  /// each forwarding on its data connections, instead of one copy each
  /// from this node. Off: `--dice.relay=false`, or a star topology. Auto
  /// (the default): the origin probes both ways (`relay_probes` rounds
  /// each, alternating) and keeps the faster, probing again every
  /// `relay_reprobe` rounds or when its number of receivers changes.
  relay_mode relay = relay_mode::automatic;
  /// Rounds of each way an auto probe times (the medians are compared).
  std::size_t relay_probes = 3;
  /// Rounds after an auto decision before the next probe.
  std::size_t relay_reprobe = 200;
  /// Fewest such peers for which a relay pays.
  std::size_t relay_min_peers = 3;
  /// Children per node of the relay tree (1: a chain; at most 8). This
  /// node sends `relay_fanout` copies a round.
  std::size_t relay_fanout = 2;
  /// A receiver that has not confirmed a round this long after it started
  /// gets the bytes directly.
  caf::timespan relay_deadline = std::chrono::seconds{5};
  /// Coalescing (router_routing.cpp): forwards that queue for a peer while
  /// the router is busy go out as one forward_batch. The first forward to an
  /// idle peer always goes at once. False: `--dice.coalesce=false`.
  bool coalesce = true;
  /// A context delta with more payload bytes than this is never batched
  /// (it is its own message already; batching would only delay it).
  std::size_t coalesce_bytes = 64 * 1024;
};

/// Process-wide coalescing counters (router_coalesce.cpp).
struct router_counters {
  /// forward_batch messages routers of this process sent.
  std::uint64_t batches_sent = 0;
  /// Forwards that went inside them.
  std::uint64_t forwards_batched = 0;
  /// forward_batch messages routers of this process took from peers.
  std::uint64_t batches_received = 0;
};

/// Current values of the coalescing counters.
router_counters router_stats() noexcept;

/// Process-wide handshake counters (router_auth.cpp).
struct router_handshake_counters {
  /// Secret challenges routers of this process answered.
  std::uint64_t challenges_answered = 0;
  /// Hellos taken without the challenge's proof, the preamble having
  /// proved the secret on their connection (`preamble_proven`).
  std::uint64_t hellos_on_preamble = 0;
};

/// Current values of the handshake counters.
router_handshake_counters router_handshake_stats() noexcept;

/// Spawns a router (a node's one; `node::start` and `run_local` spawn it).
router_actor spawn_router(caf::actor_system& sys, router_config cfg = {});

} // namespace dice
