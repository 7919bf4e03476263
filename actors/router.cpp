#include "dice/actors/router.hpp"

#include "dice/actors/gate.hpp"
#include "dice/security/auth.hpp"
#include "dice/core/errc.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/learner_group_hello.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/messages/storage_ref.hpp"
#include "dice/net/data_plane.hpp"
#include "dice/net/data_wire.hpp"
#include "dice/security/trust.hpp"

#include "caf/actor_system.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/message_handler.hpp"
#include "caf/openssl/manager.hpp"
#include "caf/send.hpp"

#include <algorithm>
#include <set>

namespace dice {

namespace {

using router_ptr = router_actor::stateful_pointer<router_state>;

// Timer kinds of (tick, kind, id); kinds >= reconnect_kind name an endpoint.
constexpr std::uint32_t loss_kind = 0;
constexpr std::uint32_t reconnect_kind = 1;

std::string describe(const router_peer& p) {
  return "node " + std::to_string(p.node) + " (" + to_string(p.roles) + ")";
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

router_peer* find_peer(router_ptr self, std::uint32_t node) {
  for (auto& p : self->state.peers)
    if (p.node == node)
      return &p;
  return nullptr;
}

router_peer* find_peer(router_ptr self, const caf::actor_addr& handle) {
  for (auto& p : self->state.peers)
    if (p.handle.address() == handle)
      return &p;
  return nullptr;
}

// Sends to an actor of this node in the router's name (a typed actor may not
// send() to an untyped one; an anonymous message would be refused).
template <class... Ts>
void tell(router_ptr self, const caf::actor& dest, Ts&&... xs) {
  caf::send_as(caf::actor_cast<caf::actor>(self), dest,
               std::forward<Ts>(xs)...);
}

// Sends to a peer in the gate's name: no id but the gate's leaves the node.
template <class... Ts>
void to_peer(router_ptr self, const caf::actor& peer, Ts&&... xs) {
  caf::send_as(self->state.gate, peer, std::forward<Ts>(xs)...);
}

void drop(router_ptr self, trust_event ev, const caf::strong_actor_ptr& src,
          const std::string& what, const std::string& why) {
  self->state.drops.drop(self->state.cfg.node, ev, src, what, why,
                         self->clock().now());
}

// Local control: only from an actor of this node that names itself and that
// no other node can name (not the gate, nothing in CAF's registry).
bool local_only(router_ptr self, const char* what) {
  auto& src = self->current_sender();
  auto kind = classify(src, self->system());
  if (kind == sender_kind::local
      && src != caf::actor_cast<caf::strong_actor_ptr>(self->state.gate))
    return true;
  if (kind == sender_kind::anonymous)
    drop(self, trust_event::anonymous_dropped, src, what,
         "local control must name its sender");
  else
    drop(self, trust_event::stranger_dropped, src, what,
         "local control is taken from this node's own actors only");
  return false;
}

bool from_gate(router_ptr self, const char* what) {
  auto& src = self->current_sender();
  if (src && src == caf::actor_cast<caf::strong_actor_ptr>(self->state.gate))
    return true;
  drop(self,
       src ? trust_event::stranger_dropped : trust_event::anonymous_dropped,
       src, what, "the handshake reaches the router through its gate only");
  return false;
}

// Topics any local member subscribed to.
std::vector<std::string> local_topics(router_ptr self) {
  std::vector<std::string> result;
  for (auto& [topic, subs] : self->state.topics)
    if (!subs.empty())
      result.push_back(topic);
  return result;
}

bool subscribed_here(router_ptr self, const std::string& topic) {
  auto i = self->state.topics.find(topic);
  return i != self->state.topics.end() && !i->second.empty();
}

peer_hello make_hello(router_ptr self) {
  auto& st = self->state;
  peer_hello h;
  h.node = st.cfg.node;
  h.roles = st.cfg.roles;
  h.topics = local_topics(self);
  if (st.finished)
    h.finished.push_back(*st.finished);
  h.drained = st.drained;
  return h;
}

// What a new peer subscribed to `topics` should get at once: messages held
// because nobody listened, else the last message of a retained topic.
std::vector<std::pair<std::string, std::pair<std::uint32_t, caf::message>>>
take_backlog(router_ptr self, const std::vector<std::string>& topics) {
  auto& st = self->state;
  std::vector<std::pair<std::string, std::pair<std::uint32_t, caf::message>>>
    result;
  for (auto& topic : topics) {
    if (auto i = st.held.find(topic); i != st.held.end()) {
      for (auto& x : i->second)
        result.emplace_back(topic, x);
      st.held.erase(i);
    } else if (auto j = st.retained.find(topic); j != st.retained.end()) {
      result.emplace_back(topic, j->second);
    }
  }
  return result;
}

void hold(router_ptr self, const std::string& topic, std::uint32_t sender,
          const caf::message& msg) {
  auto& st = self->state;
  auto& q = st.held[topic];
  q.emplace_back(sender, msg);
  // Only the last message of a retained topic matters (e.g. the latest
  // model): keeping older ones only costs memory.
  auto limit = contains(st.cfg.retained_topics, topic)
    ? std::size_t{1}
    : st.cfg.max_held_per_topic;
  if (q.size() > limit) {
    q.pop_front();
    if (limit > 1 && ++st.held_dropped % 1024 == 1)
      log::warning(st.cfg.node,
                   "router: no subscriber for topic '" + topic
                     + "', dropped the oldest held message");
  }
}

// Per-route cache of what a message becomes on the wire: BASP chunks and
// the data plane's item, each made once for all peers.
struct wire_forms {
  std::vector<snapshot_chunk> chunks;
  std::shared_ptr<const net::data_item> item;
};

// Sends a large snapshot's bytes on the data plane and a reference over
// BASP; false if no data connection to `node` is up.
bool forward_on_data_plane(router_ptr self, const caf::actor& peer,
                           std::uint32_t node, const std::string& topic,
                           std::uint32_t sender, const caf::message& msg,
                           wire_forms& forms) {
  auto& dp = self->state.cfg.data;
  if (!dp || !dp->enabled()
      || !msg.match_elements<std::string, model_snapshot>())
    return false;
  auto& x = msg.get_as<model_snapshot>(1);
  if (x.data.size() < dp->config().min_bytes)
    return false;
  if (!forms.item)
    forms.item = std::make_shared<const net::data_item>(x.data);
  auto id = dp->send(node, forms.item);
  if (!id) {
    dp->fell_back(node);
    return false;
  }
  auto header = x;
  header.data = shared_bytes{};
  to_peer(self, peer, forward_atom::value, topic, sender, *id,
          std::move(header));
  return true;
}

// Sends a message to a peer (`node`: its id, none for BASP only); large
// snapshots on the data plane, else above the chunk size in chunks
// (`forms` caches both across peers).
void forward_to_peer(router_ptr self, const caf::actor& peer,
                     std::optional<std::uint32_t> node,
                     const std::string& topic, std::uint32_t sender,
                     const caf::message& msg, wire_forms& forms) {
  auto& st = self->state;
  if (node
      && forward_on_data_plane(self, peer, *node, topic, sender, msg, forms))
    return;
  auto& chunks = forms.chunks;
  if (!st.chunks.splits(msg)) {
    to_peer(self, peer, forward_atom::value, topic, sender, msg);
    return;
  }
  if (chunks.empty())
    chunks = st.chunks.split(st.cfg.node, topic, sender,
                             msg.get_as<model_snapshot>(1));
  for (auto& c : chunks)
    to_peer(self, peer, forward_atom::value, c);
}

// Hands a new peer what was held or retained for its topics, through the
// chunker like any other large snapshot.
void send_backlog(router_ptr self, const caf::actor& peer,
                  const std::vector<std::string>& topics) {
  // BASP only: the peer's data connections open after the handshake.
  for (auto& [topic, x] : take_backlog(self, topics)) {
    wire_forms forms;
    forward_to_peer(self, peer, std::nullopt, topic, x.first, x.second, forms);
  }
}

// Delivers to local subscribers (never back to the sender's node) and, for
// messages of local members, once to each peer subscribed to the topic.
// Holds a local member's message when nobody at all subscribed.
void route(router_ptr self, const std::string& topic, std::uint32_t sender,
           const caf::message& msg, bool from_peer) {
  auto& st = self->state;
  if (!from_peer && contains(st.cfg.retained_topics, topic))
    st.retained[topic] = std::make_pair(sender, msg);
  bool any = false;
  if (auto i = st.topics.find(topic); i != st.topics.end()) {
    // The same caf::message goes to every receiver: nothing is copied.
    for (auto& sub : i->second) {
      any = true;
      if (sub.node != sender)
        tell(self, sub.member, msg);
    }
  }
  // Peers never relay what they got from a peer: delivery is to direct
  // peers only, once (DI-engine's router semantics, minus the losses).
  if (from_peer)
    return;
  // Large snapshots go out on the data plane or in chunks, prepared (and
  // checksummed) once for all peers; both share the snapshot's buffer.
  wire_forms forms;
  for (auto& p : st.peers)
    if (p.node != sender && contains(p.topics, topic)) {
      any = true;
      forward_to_peer(self, p.handle, p.node, topic, sender, msg, forms);
    }
  if (!any)
    hold(self, topic, sender, msg);
}

void add_subscriber(router_ptr self, const std::string& topic, std::uint32_t node,
                    const caf::actor& member) {
  auto& st = self->state;
  auto& subs = st.topics[topic];
  auto same = [&](const router_subscriber& x) {
    return x.member == member;
  };
  // One subscription, one delivery: subscribing twice changes nothing.
  if (std::any_of(subs.begin(), subs.end(), same))
    return;
  subs.push_back(router_subscriber{node, member});
  // Peers learn about a topic when this node first listens to it.
  if (subs.size() == 1)
    for (auto& p : st.peers)
      to_peer(self, p.handle, subscribe_atom::value, topic, st.cfg.node);
  // Hand over what was published before anyone listened.
  auto i = st.held.find(topic);
  if (i == st.held.end())
    return;
  for (auto& [sender, msg] : i->second)
    if (sender != node)
      tell(self, member, msg);
  st.held.erase(i);
}

void deliver_waiters(router_ptr self) {
  auto& st = self->state;
  auto n = static_cast<std::uint32_t>(st.peers.size());
  auto& ws = st.peer_waiters;
  for (auto i = ws.begin(); i != ws.end();) {
    if (i->first <= n) {
      i->second.deliver(n);
      i = ws.erase(i);
    } else {
      ++i;
    }
  }
}

// Starts (or stops) the clock that ends a node left without peers.
void update_loss_timer(router_ptr self) {
  auto& st = self->state;
  if (!st.cfg.expect_peers || st.finished || !st.peers.empty()) {
    st.loss_timer = 0;
    return;
  }
  if (st.loss_timer != 0)
    return;
  st.loss_timer = ++st.next_timer;
  self->delayed_send(self, st.cfg.peer_loss_timeout, tick_atom::value,
                     loss_kind, st.loss_timer);
}

void release(router_ptr self) {
  auto& st = self->state;
  st.released = true;
  for (auto& m : st.done)
    tell(self, m, done_atom::value);
  st.done.clear();
}

// Once every local member is done, this node publishes nothing more: peers
// are told. Once, in addition, every peer is done, all messages they sent
// have arrived (BASP keeps the order of one connection and each peer's
// forwards precede its done), so each member may stop with nothing in
// flight.
void check_all_done(router_ptr self) {
  auto& st = self->state;
  if (!st.finished || st.done.empty())
    return;
  for (auto& m : st.members)
    if (std::find(st.done.begin(), st.done.end(), m.member) == st.done.end())
      return;
  if (!st.drained) {
    st.drained = true;
    for (auto& p : st.peers)
      to_peer(self, p.handle, done_atom::value, st.cfg.node);
  }
  for (auto& p : st.peers)
    if (!p.drained)
      return;
  release(self);
}

void on_finish(router_ptr self, const finish& x) {
  auto& st = self->state;
  if (st.finished)
    return;
  st.finished = x;
  if (st.cfg.expect_peers)
    log::info(st.cfg.node,
              "run finished by node " + std::to_string(x.sender) + ": "
                + x.reason);
  for (auto& m : st.members)
    if (m.node != x.sender)
      tell(self, m.member, x);
  // Relay to every peer (they drop duplicates): finish floods hop by hop
  // across star and alone topologies, as in DI-engine.
  for (auto& p : st.peers)
    to_peer(self, p.handle, x);
  st.loss_timer = 0;
  check_all_done(self);
}

// Ends the run with an error this node found itself.
void fail(router_ptr self, const std::string& why) {
  auto& st = self->state;
  log::error(st.cfg.node, why);
  finish x{st.cfg.node, "error: " + why, true};
  auto first = !st.finished;
  on_finish(self, x);
  // on_finish skips the sender's node; this finish is for it.
  if (first)
    for (auto& m : st.members)
      if (m.node == x.sender)
        tell(self, m.member, x);
}

void schedule_reconnect(router_ptr self, std::size_t idx) {
  auto& st = self->state;
  if (st.released)
    return;
  auto& ep = st.endpoints[idx];
  ep.busy = false;
  ep.timer = ++st.next_timer;
  if (ep.backoff.count() == 0)
    ep.backoff = st.cfg.reconnect_min;
  self->delayed_send(self, ep.backoff, tick_atom::value,
                     reconnect_kind + static_cast<std::uint32_t>(idx),
                     ep.timer);
  ep.backoff = std::min(ep.backoff * 2, st.cfg.reconnect_max);
}

// Forgets a peer whose connection is stale (it handshook again through the
// same gate): its partial transfers can never complete.
void forget_peer(router_ptr self, const caf::actor_addr& handle,
                 const std::string& why) {
  auto& st = self->state;
  auto i = std::find_if(st.peers.begin(), st.peers.end(),
                        [&](const router_peer& p) {
                          return p.handle.address() == handle;
                        });
  if (i == st.peers.end())
    return;
  self->demonitor(i->handle);
  st.chunks.drop_origin(i->node, st.cfg.node, why);
  if (st.cfg.data)
    st.cfg.data->drop_peer(i->node);
  st.peers.erase(i);
}

// Tells every local member that a peer connected or was lost (e.g. a
// collector resends what a learner has not acknowledged at once).
void notify_members(router_ptr self, const router_peer& p, bool up) {
  peer_event ev{p.node, p.roles, up};
  for (auto& m : self->state.members)
    tell(self, m.member, ev);
}

// Registers a peer after a successful handshake.
router_peer& insert_peer(router_ptr self, router_peer p) {
  auto& st = self->state;
  self->monitor(p.handle);
  log::info(st.cfg.node, "connected to peer " + describe(p));
  if (p.endpoint)
    st.endpoints[*p.endpoint].backoff = caf::timespan{0};
  notify_members(self, p, true);
  st.peers.push_back(std::move(p));
  return st.peers.back();
}

// What follows once the peer's backlog (if any) was handled.
void peer_added(router_ptr self, const peer_hello& h) {
  update_loss_timer(self);
  deliver_waiters(self);
  // A node that joins a finished cluster is told at once.
  if (!h.finished.empty())
    on_finish(self, h.finished.front());
  check_all_done(self);
}

// -- what peers send
// -----------------------------------------------------------

// A peer forwards what was published on its own node (peers never relay):
// the forward's sender, the content's topic and the sender or origin named
// inside must all be that peer.
bool speaks_for_itself(router_ptr self, const router_peer& p,
                       const caf::strong_actor_ptr& src,
                       const std::string& topic, std::uint32_t sender,
                       const caf::message& msg) {
  auto what = "a forward from node " + std::to_string(p.node);
  auto forged = [&](const std::string& why) {
    drop(self, trust_event::forged_origin, src, what, why);
    return false;
  };
  if (sender != p.node)
    return forged("it names node " + std::to_string(sender) + " as its sender");
  if (msg.size() != 2 || !msg.match_element<std::string>(0)) {
    drop(self, trust_event::message_rejected, src, what,
         "not a (topic, content) message");
    return false;
  }
  if (msg.get_as<std::string>(0) != topic)
    return forged("its content is labelled with another topic");
  std::uint32_t named = p.node;
  if (msg.match_element<context_delta>(1))
    named = msg.get_as<context_delta>(1).sender;
  else if (msg.match_element<model_snapshot>(1))
    named = msg.get_as<model_snapshot>(1).sender;
  else if (msg.match_element<storage_ref>(1))
    named = msg.get_as<storage_ref>(1).origin;
  else if (msg.match_element<std::string>(1)
           && (topic == learner_group_topic
               || topic == learner_group_alive_topic)) {
    // A learner group's text names no node; only learners may send it.
    if (!p.roles.has(role::learner)) {
      drop(self, trust_event::message_rejected, src, what,
           "only learners speak on a learner group's topics");
      return false;
    }
  } else {
    drop(self, trust_event::message_rejected, src, what,
         "its content is no delta, snapshot or storage reference");
    return false;
  }
  if (named != p.node)
    return forged("its content names node " + std::to_string(named));
  return true;
}

bool unknown_topic(router_ptr self, const router_peer& p, const std::string& topic) {
  // Peers forward only topics this node subscribed to; anything else is a
  // broken or hostile peer and would only pile up.
  if (subscribed_here(self, topic))
    return false;
  count(trust_event::unknown_topic);
  if (counter(trust_event::unknown_topic) % 1024 == 1)
    log::warning(self->state.cfg.node,
                 "dropped a message on unknown topic '" + topic.substr(0, 64)
                   + "' from node " + std::to_string(p.node));
  return true;
}

void peer_forward(router_ptr self, const router_peer& p,
                  const caf::strong_actor_ptr& src, const std::string& topic,
                  std::uint32_t sender, const caf::message& msg) {
  if (!speaks_for_itself(self, p, src, topic, sender, msg)
      || unknown_topic(self, p, topic))
    return;
  route(self, topic, sender, msg, true);
}

void peer_chunk(router_ptr self, const router_peer& p,
                const caf::strong_actor_ptr& src, snapshot_chunk& c) {
  auto& st = self->state;
  // Item 7: a transfer is keyed by its origin; only the peer's own.
  if (c.origin != p.node || c.sender != p.node) {
    drop(self, trust_event::forged_origin, src,
         "a snapshot chunk from node " + std::to_string(p.node),
         "it names node " + std::to_string(c.origin) + " as its origin and "
           + std::to_string(c.sender) + " as its sender");
    return;
  }
  if (c.seq == 0 && unknown_topic(self, p, c.topic))
    return;
  auto x = st.chunks.add(std::move(c), st.cfg.node);
  if (!x)
    return;
  if (x->snapshot.sender != p.node) {
    drop(self, trust_event::forged_origin, src,
         "a snapshot from node " + std::to_string(p.node),
         "it names node " + std::to_string(x->snapshot.sender)
           + " as its sender");
    return;
  }
  route(self, x->topic, x->sender,
        caf::make_message(x->topic, std::move(x->snapshot)), true);
}

// A peer's snapshot whose bytes come on the data plane: the router claims them
// and handles nothing else until they are there (or failed), so the
// snapshot keeps its place among the peer's messages (a finish or done
// sent after it is handled after it).
void peer_data_reference(router_ptr self, const router_peer& p,
                         const caf::strong_actor_ptr& src,
                         const std::string& topic, std::uint32_t sender,
                         std::uint64_t transfer, model_snapshot& header) {
  auto& st = self->state;
  if (!st.cfg.data) {
    drop(self, trust_event::message_rejected, src,
         "a data reference from node " + std::to_string(p.node),
         "this node has no data plane");
    return;
  }
  auto peer = p.node;
  auto& dp = *st.cfg.data;
  auto timeout = dp.config().io_timeout + std::chrono::seconds{1};
  if (sender != p.node || header.sender != p.node
      || unknown_topic(self, p, topic)) {
    if (sender != p.node || header.sender != p.node)
      drop(self, trust_event::forged_origin, src,
           "a data reference from node " + std::to_string(p.node),
           "it names another node as its sender");
    // Claimed and dropped, so its bytes do not hold the peer's budget.
    self
      ->request(dp.inbox(), timeout, net::data_take_atom::value, peer, transfer)
      .then([](shared_bytes&) {}, [](caf::error&) {});
    return;
  }
  self->request(dp.inbox(), timeout, net::data_take_atom::value, peer, transfer)
    .await(
      [=](shared_bytes& bytes) mutable {
        header.data = std::move(bytes);
        route(self, topic, sender, caf::make_message(topic, std::move(header)),
              true);
      },
      [=](caf::error& err) {
        log::warning(self->state.cfg.node,
                     "dropped model v" + std::to_string(header.version)
                       + " from node " + std::to_string(sender) + " on topic '"
                       + topic + "': " + render(err));
      });
}

void peer_subscribe(router_ptr self, router_peer& p, const caf::strong_actor_ptr& src,
                    const std::string& topic, std::uint32_t node) {
  auto& st = self->state;
  if (node != p.node) {
    drop(self, trust_event::forged_origin, src,
         "a subscription from node " + std::to_string(p.node),
         "it names node " + std::to_string(node));
    return;
  }
  if (contains(p.topics, topic))
    return;
  p.topics.push_back(topic);
  if (auto i = st.held.find(topic); i != st.held.end()) {
    for (auto& [sender, msg] : i->second) {
      wire_forms forms;
      forward_to_peer(self, p.handle, p.node, topic, sender, msg, forms);
    }
    st.held.erase(i);
  }
}

void peer_done(router_ptr self, router_peer& p, const caf::strong_actor_ptr& src,
               std::uint32_t node) {
  if (node != p.node) {
    drop(self, trust_event::forged_origin, src,
         "a done from node " + std::to_string(p.node),
         "it names node " + std::to_string(node));
    return;
  }
  p.drained = true;
  check_all_done(self);
}

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
      fn(*p, src);
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

// Handles what a peer sent before its handshake answer arrived, in order.
void replay(router_ptr self, const caf::actor& handle,
            std::vector<caf::message>& early) {
  auto src = caf::actor_cast<caf::strong_actor_ptr>(handle);
  for (auto& m : early) {
    auto p = find_peer(self, handle.address());
    if (!p)
      return;
    caf::message_handler h{
      [&](forward_atom, std::string& topic, std::uint32_t sender,
          caf::message& msg) {
        peer_forward(self, *p, src, topic, sender, msg);
      },
      [&](forward_atom, snapshot_chunk& c) {
        peer_chunk(self, *p, src, c);
      },
      [&](forward_atom, std::string& topic, std::uint32_t sender,
          std::uint64_t transfer, model_snapshot& header) {
        peer_data_reference(self, *p, src, topic, sender, transfer, header);
      },
      [&](subscribe_atom, std::string& topic, std::uint32_t node) {
        peer_subscribe(self, *p, src, topic, node);
      },
      [&](done_atom, std::uint32_t node) {
        peer_done(self, *p, src, node);
      },
      [&](finish& x) {
        on_finish(self, x);
      },
    };
    h(m);
  }
}

// -- attaching to a peer
// ---------------------------------------------------------

void send_hello(router_ptr self, std::size_t idx, caf::actor peer,
                std::string where, std::string proof);

// Connected to the node at endpoint `idx`: `peer` is what it published.
void on_connected(router_ptr self, std::size_t idx, caf::actor peer,
                  const std::set<std::string>& ifs, std::string where) {
  auto& st = self->state;
  // A node publishes its gate, an untyped actor; anything else is another
  // program or an older dice: retrying cannot help.
  if (!peer || !ifs.empty()) {
    log::error(st.cfg.node,
               "handshake with " + where
                 + " refused: not a dice node of protocol v"
                 + std::to_string(router_protocol_version));
    return;
  }
  if (st.cfg.secret.empty()) {
    send_hello(self, idx, peer, where, std::string{});
    return;
  }
  // Challenge first: the acceptor proves it knows the secret, then our
  // hello proves we do; no data moves before both hold.
  auto nonce_a = random_nonce();
  self
    ->request(st.gate, st.cfg.connect_timeout * 2, ask_atom::value, peer,
              nonce_a)
    .then(
      [=](std::string& nonce_b, std::string& mac) {
        auto& st = self->state;
        if (!same_mac(mac, acceptor_proof(st.cfg.secret, nonce_a, nonce_b))) {
          count(trust_event::auth_refused);
          log::error(st.cfg.node,
                     "handshake with " + where
                       + " refused: the peer does not know the "
                         "cluster secret");
          schedule_reconnect(self, idx);
          return;
        }
        send_hello(self, idx, peer, where,
                   attacher_proof(st.cfg.secret, nonce_a, nonce_b,
                                  st.cfg.node));
      },
      [=](caf::error& err) {
        log::debug(self->state.cfg.node, "challenge to {} failed: {}", where,
                   render(err));
        schedule_reconnect(self, idx);
      });
}

void attach(router_ptr self, std::size_t idx) {
  auto& st = self->state;
  auto& ep = st.endpoints[idx];
  ep.busy = true;
  auto host = ep.host;
  auto port = ep.port;
  auto where = host + ":" + std::to_string(port);
  // The node's dialer authenticates the connection before BASP reads it;
  // without one (the testing network backend) CAF connects by itself.
  caf::actor connector = st.cfg.dialer;
  if (!connector)
    connector = st.cfg.tls
      ? caf::actor_cast<caf::actor>(
        self->system().openssl_manager().actor_handle())
      : caf::actor_cast<caf::actor>(self->system().middleman().actor_handle());
  self
    ->request(connector, st.cfg.connect_timeout, caf::connect_atom::value, host,
              port)
    .then(
      [=](const caf::node_id&, caf::strong_actor_ptr& ptr,
          const std::set<std::string>& ifs) {
        on_connected(self, idx, caf::actor_cast<caf::actor>(ptr), ifs, where);
      },
      [=](caf::error& err) {
        log::debug(self->state.cfg.node, "cannot connect to {}: {}", where,
                   render(err));
        schedule_reconnect(self, idx);
      });
}

// The hello proper: our state (and proof), answered by the peer's state;
// its backlog for us arrives just before the answer.
void send_hello(router_ptr self, std::size_t idx, caf::actor peer,
                std::string where, std::string proof) {
  auto& st = self->state;
  auto sent = make_hello(self);
  sent.proof = std::move(proof);
  // The data plane's key exchange for this control session.
  std::shared_ptr<const net::data_offer> offer;
  if (st.cfg.data && st.cfg.data->enabled())
    offer = net::data_offer::make();
  if (offer)
    sent.data = offer->pub();
  st.handshakes[peer.address()] = router_handshake{idx, {}};
  self
    ->request(st.gate, st.cfg.connect_timeout * 2, ask_atom::value, peer, sent)
    .then(
      [=](peer_hello& h) {
        auto& st = self->state;
        auto early = std::move(st.handshakes[peer.address()].early);
        st.handshakes.erase(peer.address());
        if (h.version != router_protocol_version || h.node == st.cfg.node) {
          count(trust_event::wrong_version);
          log::error(st.cfg.node,
                     "handshake with " + where + " refused: node "
                       + std::to_string(h.node) + " answered with protocol v"
                       + std::to_string(h.version));
          return;
        }
        if (auto old = find_peer(self, h.node)) {
          if (old->handle.address() != peer.address()) {
            log::warning(st.cfg.node,
                         "node " + std::to_string(h.node) + " at " + where
                           + " is already connected through another "
                             "connection; retrying");
            schedule_reconnect(self, idx);
            return;
          }
          forget_peer(self, peer.address(), "the peer re-attached");
        }
        insert_peer(self,
                    router_peer{h.node, h.roles, peer, h.topics, h.drained, idx});
        // The acceptor's key: open the data connections beside BASP
        // (snapshots use BASP until they are up).
        if (st.cfg.data && offer && h.data.size() == net::data_key_size)
          st.cfg.data->dial(h.node, st.endpoints[idx].host,
                            st.endpoints[idx].port, offer, h.data);
        // What the peer held for us arrives before anything else.
        replay(self, peer, early);
        send_backlog(self, peer, h.topics);
        // State that changed while the handshake was in flight.
        if (st.finished && sent.finished.empty())
          to_peer(self, peer, *st.finished);
        if (st.drained && !sent.drained)
          to_peer(self, peer, done_atom::value, st.cfg.node);
        peer_added(self, h);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        st.handshakes.erase(peer.address());
        if (is(err, errc::handshake_failed) || is(err, errc::unauthorized)) {
          log::error(st.cfg.node,
                     "handshake with " + where + " refused: " + render(err));
          return;
        }
        if (is(err, errc::retry_later))
          log::warning(st.cfg.node,
                       "handshake with " + where + " deferred: " + render(err));
        else
          log::debug(st.cfg.node, "handshake with {} failed: {}", where,
                     render(err));
        schedule_reconnect(self, idx);
      });
}

// -- another node attaching to this one
// ------------------------------------------

caf::result<peer_hello> accept_hello(router_ptr self, const caf::actor& from,
                                     peer_hello& h) {
  auto& st = self->state;
  if (h.version != router_protocol_version) {
    count(trust_event::wrong_version);
    auto what = "node " + std::to_string(h.node) + " speaks protocol v"
      + std::to_string(h.version) + ", this node v"
      + std::to_string(router_protocol_version);
    log::error(st.cfg.node, "refused peer: " + what);
    return make_error(errc::handshake_failed, what);
  }
  if (!st.cfg.secret.empty()) {
    auto i = st.challenges.find(from.address());
    auto ok = i != st.challenges.end()
      && same_mac(h.proof,
                  attacher_proof(st.cfg.secret, i->second.first,
                                 i->second.second, h.node));
    if (i != st.challenges.end())
      st.challenges.erase(i);
    if (!ok) {
      count(trust_event::auth_refused);
      auto what = "node " + std::to_string(h.node)
        + (h.proof.empty() ? " sent no proof of the cluster secret"
                           : " does not know the cluster secret");
      log::error(st.cfg.node, "refused peer: " + what);
      return make_error(errc::unauthorized, what);
    }
  }
  if (h.node == st.cfg.node) {
    auto what = "node id " + std::to_string(h.node) + " is this node's own id";
    log::error(st.cfg.node, "refused peer: " + what);
    return make_error(errc::handshake_failed, what);
  }
  if (auto old = find_peer(self, h.node)) {
    if (old->handle.address() != from.address()) {
      // Another actor claims a connected node id: a restarted node whose
      // old connection is not seen dead yet (the heartbeat will tell), or
      // a duplicate id. It may retry; the stale one is not kicked out on
      // its word.
      auto what = "node id " + std::to_string(h.node)
        + " is still connected through another connection";
      log::warning(st.cfg.node, "deferred peer: " + what);
      return make_error(errc::retry_later, what);
    }
    // The same peer (same gate) handshakes again: it lost the connection
    // before this node noticed. Its state starts over.
    log::info(st.cfg.node,
              "node " + std::to_string(h.node)
                + " re-attached before its old connection was "
                  "seen lost");
    forget_peer(self, from.address(), "the peer re-attached");
  }
  auto reply = make_hello(self);
  if (st.cfg.data && st.cfg.data->enabled() && !h.data.empty())
    reply.data = st.cfg.data->accept_session(h.node, h.data);
  insert_peer(self, router_peer{h.node, h.roles, from, h.topics, h.drained, {}});
  // The backlog goes out now, before the answer: the gate sends the answer
  // once this handler returned, and one connection keeps the order.
  send_backlog(self, from, h.topics);
  peer_added(self, h);
  return reply;
}

void remove_member(router_ptr self, const caf::actor_addr& who) {
  auto& st = self->state;
  auto gone = [&](const router_subscriber& x) {
    return x.member.address() == who;
  };
  st.members.erase(std::remove_if(st.members.begin(), st.members.end(), gone),
                   st.members.end());
  st.done.erase(std::remove_if(st.done.begin(), st.done.end(),
                               [&](const caf::actor& x) {
                                 return x.address() == who;
                               }),
                st.done.end());
  for (auto& [topic, subs] : st.topics)
    subs.erase(std::remove_if(subs.begin(), subs.end(), gone), subs.end());
}

} // namespace

router_actor::behavior_type router_behavior(router_ptr self, router_config cfg) {
  self->state.chunks = snapshot_chunker{cfg.chunk_bytes};
  self->state.cfg = std::move(cfg);
  self->state.gate = spawn_gate(self->system(),
                                caf::actor_cast<caf::actor>(self),
                                self->state.cfg.node,
                                self->state.cfg.connect_timeout);
  self->monitor(self->state.gate);
  // Only the gate is reachable from other nodes, but an exit sent by a
  // remote actor must not stop this node in any case.
  self->set_exit_handler([=](caf::exit_msg& em) {
    if (em.source && em.source.node() != self->node()) {
      count(trust_event::remote_exit_ignored);
      log::warning(self->state.cfg.node,
                   "ignored an exit message from a remote actor");
      return;
    }
    if (em.reason != caf::exit_reason::normal)
      self->quit(em.reason);
  });
  // CAF's default error handler would stop the router. A member of this node
  // may answer a peer_event it does not handle with an error: ignored.
  self->set_error_handler([=](caf::error& err) {
    auto& src = self->current_sender();
    if (trusted_local(src, self->system())) {
      count(trust_event::message_rejected);
      log::debug(self->state.cfg.node,
                 "router ignored an error from a local actor: {}", render(err));
      return;
    }
    drop(self, trust_event::stranger_dropped, src,
         "an error message (" + render(err) + ")",
         "nobody sends the router errors");
  });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == st.gate.address()) {
      fail(self,
           "the gate stopped (" + caf::to_string(dm.reason)
             + "): no peer can reach this node");
      return;
    }
    auto i = std::find_if(st.peers.begin(), st.peers.end(),
                          [&](const router_peer& p) {
                            return p.handle.address() == dm.source;
                          });
    if (i != st.peers.end()) {
      auto p = std::move(*i);
      st.peers.erase(i);
      auto lvl = st.released ? log::level::info : log::level::warning;
      log::write(lvl, st.cfg.node,
                 "lost peer " + describe(p) + ": " + caf::to_string(dm.reason));
      st.chunks.drop_origin(p.node, st.cfg.node, "peer lost");
      if (st.cfg.data)
        st.cfg.data->drop_peer(p.node);
      notify_members(self, p, false);
      if (p.endpoint)
        schedule_reconnect(self, *p.endpoint);
      update_loss_timer(self);
    } else {
      remove_member(self, dm.source);
    }
    check_all_done(self);
  });
  update_loss_timer(self);
  return {
    [=](join_atom, std::uint32_t node, role_set, const caf::actor& member,
        const std::vector<std::string>& topics)
      -> caf::result<std::vector<finish>> {
      if (!local_only(self, "a join"))
        return make_error(errc::unauthorized, "join from a stranger");
      self->monitor(member);
      self->state.members.push_back(router_subscriber{node, member});
      for (auto& topic : topics)
        add_subscriber(self, topic, node, member);
      // A node that joins a finished run learns it at once.
      if (self->state.finished)
        return std::vector<finish>{*self->state.finished};
      return std::vector<finish>{};
    },
    [=](subscribe_atom, const std::string& topic, std::uint32_t node,
        const caf::actor& member) {
      if (!local_only(self, "a subscription"))
        return;
      self->monitor(member);
      add_subscriber(self, topic, node, member);
    },
    [=](publish_atom, const std::string& topic, std::uint32_t sender,
        const caf::message& msg) {
      if (!local_only(self, "a publish"))
        return;
      route(self, topic, sender, msg, false);
    },
    [=](done_atom, std::uint32_t, const caf::actor& member) {
      if (!local_only(self, "a done"))
        return;
      auto& st = self->state;
      if (std::find(st.done.begin(), st.done.end(), member) == st.done.end())
        st.done.push_back(member);
      check_all_done(self);
    },
    [=](finish& x) {
      auto& src = self->current_sender();
      auto kind = classify(src, self->system());
      if (kind == sender_kind::local
          && src != caf::actor_cast<caf::strong_actor_ptr>(self->state.gate)) {
        on_finish(self, x);
        return;
      }
      // From a peer: relayed across the cluster, any sender node.
      with_peer(
        self, "a finish",
        [&](router_peer&, const caf::strong_actor_ptr&) {
          on_finish(self, x);
        },
        [&] {
          return caf::make_message(x);
        });
    },
    [=](hello_atom, const caf::actor& from,
        peer_hello& h) -> caf::result<peer_hello> {
      if (!from_gate(self, "a hello"))
        return make_error(errc::unauthorized, "not through the gate");
      if (!from)
        return make_error(errc::handshake_failed, "anonymous hello");
      return accept_hello(self, from, h);
    },
    [=](hello_atom, const caf::actor& from,
        const std::string& nonce_a) -> caf::result<std::string, std::string> {
      auto& st = self->state;
      if (!from_gate(self, "a challenge"))
        return make_error(errc::unauthorized, "not through the gate");
      // No secret here: an empty proof, which an attacher with a secret
      // refuses.
      if (st.cfg.secret.empty())
        return {std::string{}, std::string{}};
      if (!from || nonce_a.size() != 32)
        return make_error(errc::unauthorized, "malformed challenge");
      auto nonce_b = random_nonce();
      // Bounded: a stranger flooding challenges only evicts its own.
      if (st.challenges.size() >= 1024)
        st.challenges.erase(st.challenges.begin());
      st.challenges[from.address()] = {nonce_a, nonce_b};
      return {nonce_b, acceptor_proof(st.cfg.secret, nonce_a, nonce_b)};
    },
    [=](subscribe_atom, std::string& topic, std::uint32_t node) {
      with_peer(
        self, "a peer subscription",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_subscribe(self, p, src, topic, node);
        },
        [&] {
          return caf::make_message(subscribe_atom::value, topic, node);
        });
    },
    [=](forward_atom, snapshot_chunk& c) {
      with_peer(
        self, "a snapshot chunk",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_chunk(self, p, src, c);
        },
        [&] {
          return caf::make_message(forward_atom::value, std::move(c));
        });
    },
    [=](forward_atom, std::string& topic, std::uint32_t sender,
        std::uint64_t transfer, model_snapshot& header) {
      with_peer(
        self, "a data reference",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_data_reference(self, p, src, topic, sender, transfer, header);
        },
        [&] {
          return caf::make_message(forward_atom::value, topic, sender, transfer,
                                   std::move(header));
        });
    },
    [=](forward_atom, std::string& topic, std::uint32_t sender,
        caf::message& msg) {
      with_peer(
        self, "a forward",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_forward(self, p, src, topic, sender, msg);
        },
        [&] {
          return caf::make_message(forward_atom::value, topic, sender, msg);
        });
    },
    [=](done_atom, std::uint32_t node) {
      with_peer(
        self, "a peer's done",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_done(self, p, src, node);
        },
        [&] {
          return caf::make_message(done_atom::value, node);
        });
    },
    [=](attach_atom, const std::string& host, std::uint16_t port) {
      if (!local_only(self, "an attach"))
        return;
      auto& st = self->state;
      st.endpoints.push_back(
        router_endpoint{host, port, caf::timespan{0}, false, 0});
      attach(self, st.endpoints.size() - 1);
    },
    [=](peers_atom, std::uint32_t n) -> caf::result<std::uint32_t> {
      if (!local_only(self, "a peers request"))
        return make_error(errc::unauthorized, "peers from a stranger");
      auto& st = self->state;
      if (st.peers.size() >= n)
        return static_cast<std::uint32_t>(st.peers.size());
      auto rp = self->make_response_promise<std::uint32_t>();
      st.peer_waiters.emplace_back(n, rp);
      return rp;
    },
    [=](gate_atom) -> caf::result<caf::actor> {
      if (!local_only(self, "a gate request"))
        return make_error(errc::unauthorized, "gate from a stranger");
      return self->state.gate;
    },
    [=](tick_atom, std::uint32_t kind, std::uint64_t id) {
      auto& st = self->state;
      if (self->current_sender().get() != self->ctrl()) {
        drop(self,
             self->current_sender() ? trust_event::stranger_dropped
                                    : trust_event::anonymous_dropped,
             self->current_sender(), "a timer tick",
             "only the router arms its timers");
        return;
      }
      if (kind == loss_kind) {
        if (id != st.loss_timer || st.finished || !st.peers.empty())
          return;
        auto secs = std::chrono::duration_cast<std::chrono::milliseconds>(
                      st.cfg.peer_loss_timeout)
                      .count()
          / 1000.0;
        fail(self, "no peer connected for " + std::to_string(secs) + " s");
        return;
      }
      auto idx = static_cast<std::size_t>(kind - reconnect_kind);
      if (idx >= st.endpoints.size() || st.endpoints[idx].timer != id
          || st.endpoints[idx].busy || st.released)
        return;
      attach(self, idx);
    },
  };
}

} // namespace dice
