#include "dice/actors/bus.hpp"

#include "dice/auth.hpp"
#include "dice/errc.hpp"
#include "dice/log.hpp"
#include "dice/trust.hpp"

#include "caf/actor_system.hpp"
#include "caf/exit_reason.hpp"
#include "caf/io/middleman.hpp"
#include "caf/openssl/manager.hpp"
#include "caf/send.hpp"

#include <algorithm>
#include <set>

namespace dice {

namespace {

using bus_ptr = bus_actor::stateful_pointer<bus_state>;

// Timer kinds of (tick, kind, id); kinds >= reconnect_kind name an endpoint.
constexpr std::uint32_t loss_kind = 0;
constexpr std::uint32_t reconnect_kind = 1;

std::string describe(const bus_peer& p) {
  return "node " + std::to_string(p.node) + " (" + to_string(p.roles) + ")";
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

bus_peer* find_peer(bus_ptr self, std::uint32_t node) {
  for (auto& p : self->state.peers)
    if (p.node == node)
      return &p;
  return nullptr;
}

// True if the current message comes from the bus of a connected peer (i.e.
// one that passed the handshake, and the secret check if any).
bool from_peer(bus_ptr self) {
  auto& src = self->current_sender();
  if (!src)
    return false;
  for (auto& p : self->state.peers)
    if (p.handle.address().node() == src->node())
      return true;
  return false;
}

// True if the current message comes from another CAF node that is no
// connected peer: a stranger, or a peer before its handshake. (CAF 0.17
// cannot tell an anonymous remote message from a local one; TLS keeps
// strangers off the port altogether.)
bool from_stranger(bus_ptr self) {
  auto& src = self->current_sender();
  return src && src->node() != self->node() && !from_peer(self);
}

// Drops a message that only a connected peer (or a local member) may send.
void refuse(bus_ptr self, const char* what) {
  count(trust_event::message_rejected);
  if (counter(trust_event::message_rejected) % 1024 == 1)
    log::warning(self->state.cfg.node,
                 std::string{"dropped "} + what
                   + " from a node that is not a connected peer");
}

// Topics any local member subscribed to.
std::vector<std::string> local_topics(bus_ptr self) {
  std::vector<std::string> result;
  for (auto& [topic, subs] : self->state.topics)
    if (!subs.empty())
      result.push_back(topic);
  return result;
}

peer_hello make_hello(bus_ptr self) {
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
take_backlog(bus_ptr self, const std::vector<std::string>& topics) {
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

void hold(bus_ptr self, const std::string& topic, std::uint32_t sender,
          const caf::message& msg) {
  auto& st = self->state;
  auto& q = st.held[topic];
  q.emplace_back(sender, msg);
  if (q.size() > st.cfg.max_held_per_topic) {
    q.pop_front();
    if (++st.held_dropped % 1024 == 1)
      log::warning(st.cfg.node,
                   "bus: no subscriber for topic '" + topic
                     + "', dropped the oldest held message");
  }
}

// Sends a message to a peer bus; snapshots above the chunk size in chunks
// (`chunks` caches the split across peers).
void forward_to_peer(bus_ptr self, const bus_actor& peer,
                     const std::string& topic, std::uint32_t sender,
                     const caf::message& msg,
                     std::vector<snapshot_chunk>& chunks) {
  auto& st = self->state;
  if (!st.chunks.splits(msg)) {
    self->send(peer, forward_atom::value, topic, sender, msg);
    return;
  }
  if (chunks.empty())
    chunks = st.chunks.split(st.cfg.node, topic, sender,
                             msg.get_as<model_snapshot>(1));
  for (auto& c : chunks)
    self->send(peer, forward_atom::value, c);
}

// Delivers to local subscribers (never back to the sender's node) and, for
// messages of local members, once to each peer subscribed to the topic.
// Holds the message when nobody at all subscribed.
void route(bus_ptr self, const std::string& topic, std::uint32_t sender,
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
        caf::anon_send(sub.member, msg);
    }
  }
  // Peers never relay what they got from a peer: delivery is to direct
  // peers only, once (DI-engine's bus semantics, minus the losses).
  if (!from_peer) {
    // Large snapshots go out in chunks, split (and checksummed) once for
    // all peers; the chunks share the snapshot's buffer.
    std::vector<snapshot_chunk> chunks;
    for (auto& p : st.peers)
      if (p.node != sender && contains(p.topics, topic)) {
        any = true;
        forward_to_peer(self, p.handle, topic, sender, msg, chunks);
      }
  }
  if (!any)
    hold(self, topic, sender, msg);
}

void add_subscriber(bus_ptr self, const std::string& topic, std::uint32_t node,
                    const caf::actor& member) {
  auto& st = self->state;
  auto& subs = st.topics[topic];
  auto same = [&](const bus_subscriber& x) {
    return x.member == member;
  };
  // One subscription, one delivery: subscribing twice changes nothing.
  if (std::any_of(subs.begin(), subs.end(), same))
    return;
  subs.push_back(bus_subscriber{node, member});
  // Peers learn about a topic when this node first listens to it.
  if (subs.size() == 1)
    for (auto& p : st.peers)
      self->send(p.handle, subscribe_atom::value, topic, st.cfg.node);
  // Hand over what was published before anyone listened.
  auto i = st.held.find(topic);
  if (i == st.held.end())
    return;
  for (auto& [sender, msg] : i->second)
    if (sender != node)
      caf::anon_send(member, msg);
  st.held.erase(i);
}

void deliver_waiters(bus_ptr self) {
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
void update_loss_timer(bus_ptr self) {
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

void release(bus_ptr self) {
  auto& st = self->state;
  st.released = true;
  for (auto& m : st.done)
    caf::anon_send(m, done_atom::value);
  st.done.clear();
}

// Once every local member is done, this node publishes nothing more: peers
// are told. Once, in addition, every peer is done, all messages they sent
// have arrived (BASP keeps the order of one connection and each peer's
// forwards precede its done), so each member may stop with nothing in
// flight.
void check_all_done(bus_ptr self) {
  auto& st = self->state;
  if (!st.finished || st.done.empty())
    return;
  for (auto& m : st.members)
    if (std::find(st.done.begin(), st.done.end(), m.member) == st.done.end())
      return;
  if (!st.drained) {
    st.drained = true;
    for (auto& p : st.peers)
      self->send(p.handle, done_atom::value, st.cfg.node);
  }
  for (auto& p : st.peers)
    if (!p.drained)
      return;
  release(self);
}

void on_finish(bus_ptr self, const finish& x) {
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
      caf::anon_send(m.member, x);
  // Relay to every peer (they drop duplicates): finish floods hop by hop
  // across star and alone topologies, as in DI-engine.
  for (auto& p : st.peers)
    self->send(p.handle, x);
  st.loss_timer = 0;
  check_all_done(self);
}

void schedule_reconnect(bus_ptr self, std::size_t idx) {
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

// Tells every local member that a peer connected or was lost (e.g. a
// collector resends what a learner has not acknowledged at once).
void notify_members(bus_ptr self, const bus_peer& p, bool up) {
  peer_event ev{p.node, p.roles, up};
  for (auto& m : self->state.members)
    caf::send_as(caf::actor_cast<caf::actor>(self), m.member, ev);
}

// Registers a peer after a successful handshake.
void add_peer(bus_ptr self, bus_peer p, const peer_hello& h) {
  auto& st = self->state;
  self->monitor(p.handle);
  log::info(st.cfg.node, "connected to peer " + describe(p));
  if (p.endpoint)
    st.endpoints[*p.endpoint].backoff = caf::timespan{0};
  notify_members(self, p, true);
  st.peers.push_back(std::move(p));
  update_loss_timer(self);
  deliver_waiters(self);
  // A node that joins a finished cluster is told at once.
  if (!h.finished.empty())
    on_finish(self, h.finished.front());
  check_all_done(self);
}

void send_hello(bus_ptr self, std::size_t idx, bus_actor peer,
                std::string where, std::string proof);

void attach(bus_ptr self, std::size_t idx) {
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
        auto& st = self->state;
        caf::detail::type_list<bus_actor> tk;
        // A node publishes a gate (untyped, see gate.hpp) in front of its
        // bus; an older node its bus itself. The handshake checks the rest.
        if (!ptr || (!ifs.empty() && ifs != self->system().message_types(tk))) {
          // Another program or another dice version: retrying cannot help.
          log::error(st.cfg.node,
                     "handshake with " + where
                       + " refused: not a dice bus of protocol v"
                       + std::to_string(bus_protocol_version));
          return;
        }
        auto peer = caf::actor_cast<bus_actor>(ptr);
        if (st.cfg.secret.empty()) {
          send_hello(self, idx, peer, where, std::string{});
          return;
        }
        // Challenge first: the acceptor proves it knows the secret, then
        // our hello proves we do; no data moves before both hold.
        auto nonce_a = random_nonce();
        self->request(peer, st.cfg.connect_timeout, hello_atom::value, nonce_a)
          .then(
            [=](std::string& nonce_b, std::string& mac) {
              auto& st = self->state;
              if (!same_mac(mac,
                            acceptor_proof(st.cfg.secret, nonce_a, nonce_b))) {
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
              log::debug(self->state.cfg.node,
                         "challenge to " + where + " failed: " + render(err));
              schedule_reconnect(self, idx);
            });
      },
      [=](caf::error& err) {
        log::debug(self->state.cfg.node,
                   "cannot connect to " + where + ": " + render(err));
        schedule_reconnect(self, idx);
      });
}

// The hello proper: our state (and proof), answered by the peer's state and
// its backlog for us.
void send_hello(bus_ptr self, std::size_t idx, bus_actor peer,
                std::string where, std::string proof) {
  auto& st = self->state;
  auto sent = make_hello(self);
  sent.proof = std::move(proof);
  self->request(peer, st.cfg.connect_timeout, hello_atom::value, sent)
    .then(
      [=](peer_hello& h) {
        auto& st = self->state;
        // What the peer held for us arrives before anything else.
        for (auto& x : h.backlog)
          if (x.match_elements<std::string, std::uint32_t, caf::message>())
            route(self, x.get_as<std::string>(0), x.get_as<std::uint32_t>(1),
                  x.get_as<caf::message>(2), true);
        bus_peer p{h.node, h.roles, peer, h.topics, h.drained, idx};
        for (auto& [topic, x] : take_backlog(self, p.topics))
          self->send(peer, forward_atom::value, topic, x.first, x.second);
        // State that changed while the handshake was in flight.
        if (st.finished && sent.finished.empty())
          self->send(peer, *st.finished);
        if (st.drained && !sent.drained)
          self->send(peer, done_atom::value, st.cfg.node);
        add_peer(self, std::move(p), h);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        if (is(err, errc::handshake_failed) || is(err, errc::unauthorized)) {
          log::error(st.cfg.node,
                     "handshake with " + where + " refused: " + render(err));
          return;
        }
        log::debug(st.cfg.node,
                   "handshake with " + where + " failed: " + render(err));
        schedule_reconnect(self, idx);
      });
}

void remove_member(bus_ptr self, const caf::actor_addr& who) {
  auto& st = self->state;
  auto gone = [&](const bus_subscriber& x) {
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

bus_actor::behavior_type bus(bus_ptr self, bus_config cfg) {
  self->state.chunks = snapshot_chunker{cfg.chunk_bytes};
  self->state.cfg = std::move(cfg);
  // A published bus can be reached by any CAF peer: an exit sent by a remote
  // actor must not kill this node.
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
  // An error message (e.g. a member's "unexpected message" answer to a
  // peer_event) would otherwise end the bus (CAF's default handler quits).
  self->set_error_handler([=](caf::error& err) {
    count(trust_event::message_rejected);
    log::debug(self->state.cfg.node, "bus ignored an error: " + render(err));
  });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    auto i = std::find_if(st.peers.begin(), st.peers.end(),
                          [&](const bus_peer& p) {
                            return p.handle.address() == dm.source;
                          });
    if (i != st.peers.end()) {
      auto p = std::move(*i);
      st.peers.erase(i);
      auto lvl = st.released ? log::level::info : log::level::warning;
      log::write(lvl, st.cfg.node,
                 "lost peer " + describe(p) + ": " + caf::to_string(dm.reason));
      st.chunks.drop_origin(p.node, st.cfg.node, "peer lost");
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
      if (from_stranger(self)) {
        refuse(self, "a join");
        return make_error(errc::unauthorized, "join from a stranger");
      }
      self->monitor(member);
      self->state.members.push_back(bus_subscriber{node, member});
      for (auto& topic : topics)
        add_subscriber(self, topic, node, member);
      // A node that joins a finished run learns it at once.
      if (self->state.finished)
        return std::vector<finish>{*self->state.finished};
      return std::vector<finish>{};
    },
    [=](subscribe_atom, const std::string& topic, std::uint32_t node,
        const caf::actor& member) {
      if (from_stranger(self))
        return refuse(self, "a subscription");
      self->monitor(member);
      add_subscriber(self, topic, node, member);
    },
    [=](publish_atom, const std::string& topic, std::uint32_t sender,
        const caf::message& msg) {
      if (from_stranger(self))
        return refuse(self, "a publish");
      route(self, topic, sender, msg, false);
    },
    [=](done_atom, std::uint32_t, const caf::actor& member) {
      if (from_stranger(self))
        return refuse(self, "a done");
      auto& st = self->state;
      if (std::find(st.done.begin(), st.done.end(), member) == st.done.end())
        st.done.push_back(member);
      check_all_done(self);
    },
    [=](const finish& x) {
      if (from_stranger(self))
        return refuse(self, "a finish");
      on_finish(self, x);
    },
    [=](hello_atom, peer_hello& h) -> caf::result<peer_hello> {
      auto& st = self->state;
      if (h.version != bus_protocol_version) {
        count(trust_event::wrong_version);
        auto what = "node " + std::to_string(h.node) + " speaks protocol v"
          + std::to_string(h.version) + ", this node v"
          + std::to_string(bus_protocol_version);
        log::error(st.cfg.node, "refused peer: " + what);
        return make_error(errc::handshake_failed, what);
      }
      if (!st.cfg.secret.empty()) {
        auto src = self->current_sender();
        auto i = src ? st.challenges.find(caf::actor_cast<caf::actor_addr>(src))
                     : st.challenges.end();
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
      if (h.node == st.cfg.node || find_peer(self, h.node)) {
        auto what = "node id " + std::to_string(h.node) + " is "
          + (h.node == st.cfg.node ? "this node's own id"
                                   : "already connected");
        log::error(st.cfg.node, "refused peer: " + what);
        return make_error(errc::handshake_failed, what);
      }
      auto peer = caf::actor_cast<bus_actor>(self->current_sender());
      if (!peer)
        return make_error(errc::handshake_failed, "anonymous hello");
      // Everything for the new peer travels in the answer, so it has the
      // backlog before anything else; later events reach it as messages.
      auto reply = make_hello(self);
      for (auto& [topic, x] : take_backlog(self, h.topics))
        reply.backlog.push_back(caf::make_message(topic, x.first, x.second));
      add_peer(self, bus_peer{h.node, h.roles, peer, h.topics, h.drained, {}},
               h);
      return reply;
    },
    [=](hello_atom,
        const std::string& nonce_a) -> caf::result<std::string, std::string> {
      auto& st = self->state;
      // No secret here: an empty proof, which an attacher with a secret
      // refuses.
      if (st.cfg.secret.empty())
        return {std::string{}, std::string{}};
      auto src = self->current_sender();
      if (!src || nonce_a.size() != 32)
        return make_error(errc::unauthorized, "malformed challenge");
      auto nonce_b = random_nonce();
      // Bounded: a stranger flooding challenges only evicts its own.
      if (st.challenges.size() >= 1024)
        st.challenges.erase(st.challenges.begin());
      st.challenges[caf::actor_cast<caf::actor_addr>(src)] = {nonce_a, nonce_b};
      return {nonce_b, acceptor_proof(st.cfg.secret, nonce_a, nonce_b)};
    },
    [=](subscribe_atom, const std::string& topic, std::uint32_t node) {
      if (!from_peer(self))
        return refuse(self, "a peer subscription");
      auto& st = self->state;
      auto p = find_peer(self, node);
      if (!p || contains(p->topics, topic))
        return;
      p->topics.push_back(topic);
      if (auto i = st.held.find(topic); i != st.held.end()) {
        for (auto& [sender, msg] : i->second) {
          std::vector<snapshot_chunk> chunks;
          forward_to_peer(self, p->handle, topic, sender, msg, chunks);
        }
        st.held.erase(i);
      }
    },
    [=](forward_atom, snapshot_chunk& c) {
      if (!from_peer(self))
        return refuse(self, "a snapshot chunk");
      auto& st = self->state;
      if (auto x = st.chunks.add(std::move(c), st.cfg.node))
        route(self, x->topic, x->sender,
              caf::make_message(x->topic, std::move(x->snapshot)), true);
    },
    [=](forward_atom, const std::string& topic, std::uint32_t sender,
        const caf::message& msg) {
      if (!from_peer(self))
        return refuse(self, "a forward");
      // Peers forward only topics this node subscribed to; anything else
      // is a broken or hostile peer and would only pile up in the hold.
      auto i = self->state.topics.find(topic);
      if (i == self->state.topics.end() || i->second.empty()) {
        count(trust_event::unknown_topic);
        if (counter(trust_event::unknown_topic) % 1024 == 1)
          log::warning(self->state.cfg.node,
                       "dropped a message on unknown topic '"
                         + topic.substr(0, 64) + "' from node "
                         + std::to_string(sender));
        return;
      }
      route(self, topic, sender, msg, true);
    },
    [=](done_atom, std::uint32_t node) {
      if (!from_peer(self))
        return refuse(self, "a peer's done");
      if (auto p = find_peer(self, node)) {
        p->drained = true;
        check_all_done(self);
      }
    },
    [=](attach_atom, const std::string& host, std::uint16_t port) {
      if (from_stranger(self))
        return refuse(self, "an attach");
      auto& st = self->state;
      st.endpoints.push_back(
        bus_endpoint{host, port, caf::timespan{0}, false, 0});
      attach(self, st.endpoints.size() - 1);
    },
    [=](peers_atom, std::uint32_t n) -> caf::result<std::uint32_t> {
      auto& st = self->state;
      if (st.peers.size() >= n)
        return static_cast<std::uint32_t>(st.peers.size());
      auto rp = self->make_response_promise<std::uint32_t>();
      st.peer_waiters.emplace_back(n, rp);
      return rp;
    },
    [=](tick_atom, std::uint32_t kind, std::uint64_t id) {
      auto& st = self->state;
      if (kind == loss_kind) {
        if (id != st.loss_timer || st.finished || !st.peers.empty())
          return;
        auto secs = std::chrono::duration_cast<std::chrono::milliseconds>(
                      st.cfg.peer_loss_timeout)
                      .count()
          / 1000.0;
        auto why = "error: no peer connected for " + std::to_string(secs)
          + " s";
        log::error(st.cfg.node, why);
        finish x{st.cfg.node, why, true};
        on_finish(self, x);
        // on_finish skips the sender's node; this finish is for it.
        for (auto& m : st.members)
          if (m.node == x.sender)
            caf::anon_send(m.member, x);
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
