// Internal to the router: what its sources (router.cpp, router_routing.cpp,
// router_finish.cpp, router_peers.cpp, router_auth.cpp, router_data.cpp, ...)
// share. Not public.
#pragma once

#include "actors/gate.hpp"
#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/detail/learner_group_hello.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/security/auth.hpp"
#include "dice/security/trust.hpp"
#include "net/data_meta.hpp"
#include "net/data_plane.hpp"
#include "net/data_wire.hpp"

#include "caf/actor_system.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/message_handler.hpp"
#include "caf/openssl/manager.hpp"
#include "caf/send.hpp"

#include "router_state.hpp"

#include <algorithm>
#include <limits>
#include <set>

namespace dice::router_detail {

using router_ptr = router_actor::stateful_pointer<router_state>;

// Timer kinds of (tick, kind, id); kinds >= reconnect_kind name an endpoint.
constexpr std::uint32_t loss_kind = 0;
constexpr std::uint32_t relay_kind = 1;
constexpr std::uint32_t reconnect_kind = 2;

inline bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

// Sends to an actor of this node in the router's name (a typed actor may not
// send() to an untyped one; an anonymous message would be refused). Through
// the router's own execution unit: send_as enqueued every delivery on the
// scheduler from outside (a lock and often a sleeping worker woken per
// receiver), which led the profile of a fan-out to 16 members.
template <class... Ts>
void tell(router_ptr self, const caf::actor& dest, Ts&&... xs) {
  caf::unsafe_send_as(self, dest, std::forward<Ts>(xs)...);
}

// -- coalescing (router_coalesce.cpp) ----------------------------------------

// Sends the references that wait for `peer` (router_deferred_ref), before
// any other message to it.
void flush_refs(router_ptr self, const caf::actor& peer);
// Sends what queued for `peer` now (anything else to it must not overtake).
void flush_outbox(router_ptr self, const caf::actor& peer);
// The (flush) the router sent itself: sends what queued for every peer.
void flush_outboxes(router_ptr self);
// A forward to a peer: at once to an idle peer, else queued for the flush.
void send_forward(router_ptr self, const caf::actor& peer,
                  const std::string& topic, std::uint32_t sender,
                  const caf::message& msg);

// Sends to a peer in the gate's name: no id but the gate's leaves the node.
// What queued for the peer goes first, so nothing overtakes a forward.
// Every message to a peer over BASP is counted (router_state::basp_sent).
template <class... Ts>
void to_peer(router_ptr self, const caf::actor& peer, Ts&&... xs) {
  flush_refs(self, peer);
  flush_outbox(self, peer);
  ++self->state.basp_sent[peer.address()];
  caf::send_as(self->state.gate, peer, std::forward<Ts>(xs)...);
}

// Per-route cache of what a message becomes on the wire: BASP chunks and
// the data plane's item, each made once for all peers.
struct wire_forms {
  std::vector<snapshot_chunk> chunks;
  std::shared_ptr<const net::data_item> item;
};

// -- routing, hold and retain (router_routing.cpp) ----------------------------

std::vector<std::string> local_topics(router_ptr self);
bool subscribed_here(router_ptr self, const std::string& topic);
void forward_to_peer(router_ptr self, const caf::actor& peer,
                     std::optional<std::uint32_t> node,
                     const std::string& topic, std::uint32_t sender,
                     const caf::message& msg, wire_forms& forms);
void send_backlog(router_ptr self, const caf::actor& peer,
                  const std::vector<std::string>& topics);
void route(router_ptr self, const std::string& topic, std::uint32_t sender,
           const caf::message& msg, bool from_peer);
void add_subscriber(router_ptr self, const std::string& topic,
                    std::uint32_t node, const caf::actor& member);

// -- relay broadcast (router_relay.cpp: the origin; router_relay_receive.cpp:
// a receiver; router_relay_auto.cpp: relay or star, by measurement) ----------

// Most children a relay reference may name.
constexpr std::size_t max_relay_fanout = 8;

// Most pieces a round's bytes travel in, and the least bytes a piece holds.
constexpr std::uint32_t max_relay_pieces = 16;
constexpr std::size_t min_relay_piece = std::size_t{1} << 20;

// Starts a relay round for a local member's message if it pays; the peers
// it serves (empty: none, send directly).
std::vector<std::uint32_t> relay_route(router_ptr self,
                                       const std::string& topic,
                                       std::uint32_t sender,
                                       const caf::message& msg);
// After the direct sends of a star probe round (router_relay_auto.cpp): one
// echo request per receiver, answered once the snapshot was delivered.
void relay_direct_sent(router_ptr self);
// Which way auto mode sends a round to `receivers` peers, and whether it is
// a timed probe (router_relay_auto.cpp).
struct relay_plan {
  router_relay_round::probe_kind way = router_relay_round::probe_kind::tree;
  bool probe = false;
};
relay_plan relay_auto_plan(router_ptr self, std::size_t receivers);
// A round is settled (all confirmed, or its deadline passed): a probe's
// time counts, and the last probe of a series decides.
void relay_settled(router_ptr self, const router_relay_round& r);
void relay_deadline(router_ptr self, std::uint32_t round);
void relay_peer_lost(router_ptr self, std::uint32_t node);
void peer_relay_report(router_ptr self, const router_peer& p,
                       const caf::strong_actor_ptr& src, std::uint32_t round,
                       std::uint32_t node, bool ok);
// A relay reference from the origin `p`: checks it, then claims the round's
// pieces from its upstream (router_relay_receive.cpp).
void peer_relay_reference(router_ptr self, const router_peer& p,
                          const caf::strong_actor_ptr& src, relay_reference& x);

// -- the run's end: finish, done, peer loss (router_finish.cpp) ---------------

void deliver_waiters(router_ptr self);
void update_loss_timer(router_ptr self);
void check_all_done(router_ptr self);
void on_finish(router_ptr self, const finish& x);
void fail(router_ptr self, const std::string& why);

// -- peers: handshake, reconnect, endpoints (router_peers.cpp) ----------------

std::string describe(const router_peer& p);
router_peer* find_peer(router_ptr self, std::uint32_t node);
router_peer* find_peer(router_ptr self, const caf::actor_addr& handle);
void schedule_reconnect(router_ptr self, std::size_t idx);
void notify_members(router_ptr self, const router_peer& p, bool up);
void attach(router_ptr self, std::size_t idx);
caf::result<peer_hello> accept_hello(router_ptr self, const caf::actor& from,
                                     peer_hello& h);

// -- who may send what (router_auth.cpp) --------------------------------------

void drop(router_ptr self, trust_event ev, const caf::strong_actor_ptr& src,
          const std::string& what, const std::string& why);
// Drops the current message of a sender that may not send it (a stranger,
// or anonymous).
void drop_sender(router_ptr self, const std::string& what,
                 const std::string& why);
bool local_only(router_ptr self, const char* what);
bool from_gate(router_ptr self, const char* what);
caf::result<std::string, std::string>
answer_challenge(router_ptr self, const caf::actor& from,
                 const std::string& nonce_a);
// True (counted, logged) if no local member subscribed to `topic`.
bool unknown_topic(router_ptr self, const router_peer& p,
                   const std::string& topic);
void peer_forward(router_ptr self, const router_peer& p,
                  const caf::strong_actor_ptr& src, const std::string& topic,
                  std::uint32_t sender, const caf::message& msg);
void peer_batch(router_ptr self, const router_peer& p,
                const caf::strong_actor_ptr& src, forward_batch& b);
void peer_chunk(router_ptr self, const router_peer& p,
                const caf::strong_actor_ptr& src, snapshot_chunk& c);
void peer_data_reference(router_ptr self, router_peer& p,
                         const caf::strong_actor_ptr& src,
                         const std::string& topic, std::uint32_t sender,
                         std::uint64_t transfer, model_snapshot& header);
void peer_data_arrived(router_ptr self, std::uint32_t peer,
                       std::uint64_t transfer, std::uint64_t order,
                       std::string& meta);
// Routes the peer's pending arrivals below `upto` whose order is handled.
void route_pending(
  router_ptr self, router_peer& p,
  std::uint64_t upto = std::numeric_limits<std::uint64_t>::max());
void peer_subscribe(router_ptr self, router_peer& p,
                    const caf::strong_actor_ptr& src, const std::string& topic,
                    std::uint32_t node);
void peer_done(router_ptr self, router_peer& p,
               const caf::strong_actor_ptr& src, std::uint32_t node);
void replay(router_ptr self, const caf::actor& handle,
            std::vector<caf::message>& early);

// Runs `fn` with the peer that sent the current message. A message from a
// peer whose handshake answer is still in flight waits for it; anything
// else is a stranger's.
template <class Fn, class Early>
void with_peer(router_ptr self, const char* what, Fn fn, Early early) {
  auto& st = self->state;
  auto& src = self->current_sender();
  auto addr = caf::actor_cast<caf::actor_addr>(src);
  if (src && src->node() != self->node()) {
    if (auto p = find_peer(self, addr)) {
      ++p->basp_handled;
      fn(*p, src);
      // Snapshots that waited for this message (router_peer::pending).
      if (auto q = find_peer(self, addr); q && !q->pending.empty())
        route_pending(self, *q);
      return;
    }
    if (auto i = st.handshakes.find(addr); i != st.handshakes.end()) {
      if (i->second.early.size() < max_handshake_backlog)
        i->second.early.push_back(early());
      else
        drop(self, trust_event::oversize, src, what,
             "more than " + std::to_string(max_handshake_backlog)
               + " messages before its handshake answer");
      return;
    }
  }
  drop(self,
       src ? trust_event::stranger_dropped : trust_event::anonymous_dropped,
       src, what, "not an authenticated peer");
}

} // namespace dice::router_detail
