#pragma once

// Internal: the state of a router (peers, subscribers, relay rounds,
// outboxes) and its behaviour; the public side is dice/actors/router.hpp.

#include "dice/actors/router.hpp"
#include "net/chunker.hpp"
#include "security/senders.hpp"

#include "caf/response_promise.hpp"
#include "caf/stateful_actor.hpp"

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
class data_offer;
} // namespace dice::net

namespace dice {

/// A relay round this node started, until every receiver confirmed it.
struct router_relay_round {
  /// Topic and publisher of the snapshot.
  std::string topic;
  std::uint32_t sender = 0;
  /// The bytes in pieces (and their transport checksums), for direct
  /// sends: piece j is tagged round + j.
  std::vector<std::shared_ptr<const net::data_item>> pieces;
  /// Each receiver's upstream (this node or another receiver).
  std::map<std::uint32_t, std::uint32_t> upstream;
  /// Receivers that have not confirmed delivery.
  std::set<std::uint32_t> pending;
  /// Receivers this node already sent the bytes directly.
  std::set<std::uint32_t> direct;
  /// When the round started (auto mode times its probes).
  std::chrono::steady_clock::time_point started;
  /// An auto-mode probe: none, of the tree, or of the star (direct sends
  /// followed by an echo request each; `pending` awaits the echoes).
  enum class probe_kind : std::uint8_t { none, tree, star };
  probe_kind probe = probe_kind::none;
  /// The probe series it belongs to (`router_relay_auto::series`).
  std::uint64_t series = 0;
};

/// Auto relay mode (router_relay_auto.cpp): what the origin measured and
/// chose.
struct router_relay_auto {
  /// Receivers the figures are for (a change starts a new probe).
  std::size_t receivers = 0;
  /// Seconds a probe round of each way took, completed probes only.
  std::vector<double> tree_s;
  std::vector<double> star_s;
  /// Probe rounds started since the last decision.
  std::size_t probes = 0;
  /// The way chosen (none: probing), and the one before a new probe.
  router_relay_round::probe_kind choice = router_relay_round::probe_kind::none;
  router_relay_round::probe_kind previous = router_relay_round::probe_kind::
    none;
  /// Rounds since the decision.
  std::size_t rounds = 0;
  /// A star probe round whose echo requests follow the direct sends.
  std::uint32_t star_round = 0;
  /// Bumped whenever the figures start over (older probes are ignored).
  std::uint64_t series = 0;
};

/// One subscriber of a topic.
struct router_subscriber {
  /// The subscriber's node id (messages from that node are not echoed).
  std::uint32_t node = 0;
  /// The subscriber.
  caf::actor member;
};

/// A data-plane transfer whose bytes came with their header (arrived_atom).
struct router_arrival {
  std::uint64_t transfer = 0;
  /// Messages the peer sent over BASP before it (net/data_wire.hpp).
  std::uint64_t order = 0;
  /// Its header (net/data_meta.hpp).
  std::string meta;
};

/// A connected peer node.
struct router_peer {
  /// Its node id.
  std::uint32_t node = 0;
  /// Its roles.
  role_set roles;
  /// Its gate (a proxy of a remote actor): everything to and from the peer.
  caf::actor handle;
  /// Topics its members subscribed to.
  std::vector<std::string> topics;
  /// Every member of the peer is done.
  bool drained = false;
  /// Index into `router_state::endpoints` if this node attached to the peer.
  std::optional<std::size_t> endpoint;
  /// Messages handled from the peer over BASP (every kind `with_peer`
  /// takes): a data-plane snapshot whose header frame names an order up to
  /// this is routed when its bytes arrive (net/data_wire.hpp).
  std::uint64_t basp_handled = 0;
  /// Transfers routed (or dropped) when their bytes arrived, whose BASP
  /// reference may still come (it then changes nothing); at most
  /// `max_settled`, the oldest forgotten first.
  std::set<std::uint64_t> settled;
  /// Transfers whose bytes and header arrived before messages the peer
  /// sent ahead of them (order above `basp_handled`), in arrival order;
  /// routed once those are handled, or by their reference.
  std::deque<router_arrival> pending;
};

/// Most transfers a peer's `settled` remembers, and most it may have
/// pending (a peer that sends more loses the oldest).
constexpr std::size_t max_settled = 4096;
constexpr std::size_t max_pending = 4096;

/// A reference to a data-plane snapshot that waits for the next BASP message
/// to its peer: it orders the snapshot only against what follows it, and a
/// receiver routes the snapshot when its bytes arrive (net/data_wire.hpp),
/// so a learner that only sends models sends no reference at all.
struct router_deferred_ref {
  std::string topic;
  std::uint32_t sender = 0;
  std::uint64_t transfer = 0;
  /// The snapshot without its bytes.
  model_snapshot header;
};

/// Most references that wait for a peer: then they go at once.
constexpr std::size_t max_deferred_refs = 64;

/// A peer address this node attaches to (and re-attaches to when lost).
struct router_endpoint {
  /// Host name or address.
  std::string host;
  /// Port.
  std::uint16_t port = 0;
  /// Delay before the next attempt.
  caf::timespan backoff{0};
  /// A connection or handshake is in progress, or the peer is connected.
  bool busy = false;
  /// Identifies the pending retry timer.
  std::uint64_t timer = 0;
  /// The data plane's key pair for the next hello to this endpoint, made
  /// while the dialer connects (each is sent once; null: none yet).
  std::shared_ptr<const net::data_offer> offer;
};

/// A handshake this node started whose hello answer is in flight.
struct router_handshake {
  /// Index into `router_state::endpoints`.
  std::size_t endpoint = 0;
  /// What the peer sent before its answer arrived (its backlog for us),
  /// handled in order once the answer names the peer.
  std::vector<caf::message> early;
};

/// Forwards waiting for one peer (router_routing.cpp, "Coalescing").
struct router_outbox {
  /// The peer's gate.
  caf::actor peer;
  /// Queued since the last flush, in publish order.
  std::vector<forwarded> items;
  /// Payload bytes of `items` (context deltas only; others count as small).
  std::size_t bytes = 0;
  /// A forward went out since the last flush: more may follow while the
  /// router is busy, so they queue here until the next (flush).
  bool armed = false;
};

/// State of a router.
struct router_state {
  /// Settings.
  router_config cfg;
  /// Every joined role actor.
  std::vector<router_subscriber> members;
  /// Subscribers per topic, each once.
  std::map<std::string, std::vector<router_subscriber>> topics;
  /// Messages published while a topic had no subscriber.
  std::map<std::string, std::deque<std::pair<std::uint32_t, caf::message>>>
    held;
  /// Last message per retained topic, with its sender.
  std::map<std::string, std::pair<std::uint32_t, caf::message>> retained;
  /// Members that finished their last iteration.
  std::vector<caf::actor> done;
  /// Set once the run is over.
  std::optional<finish> finished;
  /// Messages dropped from the hold because it was full.
  std::uint64_t held_dropped = 0;
  /// Connected peer nodes.
  std::vector<router_peer> peers;
  /// Addresses this node attaches to.
  std::vector<router_endpoint> endpoints;
  /// Requests waiting for a number of peers.
  std::vector<
    std::pair<std::uint32_t, caf::typed_response_promise<std::uint32_t>>>
    peer_waiters;
  /// Every local member is done and the peers were told.
  bool drained = false;
  /// The members got (done): the node may stop.
  bool released = false;
  /// Open secret challenges: nonces sent and received, per challenger.
  std::map<caf::actor_addr, std::pair<std::string, std::string>> challenges;
  /// Refused hellos per kind: only the first and every 1024th are logged.
  std::map<std::string, std::uint64_t> refusals;
  /// Identifies the pending peer-loss timer (0: none).
  std::uint64_t loss_timer = 0;
  /// Source of timer ids.
  std::uint64_t next_timer = 0;
  /// Splits snapshots for peers and reassembles the peers' chunks.
  snapshot_chunker chunks;
  /// This node's gate: the only actor peers address or hear from.
  caf::actor gate;
  /// Messages sent to each peer (by its gate) over BASP: a data-plane
  /// snapshot's header frame carries the count before it.
  std::map<caf::actor_addr, std::uint64_t> basp_sent;
  /// References waiting for the next BASP message to each peer.
  std::map<caf::actor_addr, std::vector<router_deferred_ref>> deferred_refs;
  /// Handshakes in flight that this node started, by the peer gate.
  std::map<caf::actor_addr, router_handshake> handshakes;
  /// Messages dropped from strangers, logged once per source.
  drop_log drops;
  /// Open relay rounds this node started, by round.
  std::map<std::uint32_t, router_relay_round> relay_rounds;
  /// The last relay round this node started.
  std::uint32_t relay_next = 0;
  /// Auto relay mode's probes and choice.
  router_relay_auto relay_auto;
  /// Forwards waiting per peer gate.
  std::map<caf::actor_addr, router_outbox> outboxes;
  /// A (flush) to itself is in the mailbox.
  bool flush_pending = false;
  /// Name in CAF's logs.
  static inline const char* name = "dice.router";
};

namespace router_detail {
/// Counts a hello taken on the preamble's proof (router_handshake_stats).
void count_hello_on_preamble() noexcept;
} // namespace router_detail

/// Behaviour of a router.
router_actor::behavior_type
router_behavior(router_actor::stateful_pointer<router_state> self,
                router_config cfg);

} // namespace dice
