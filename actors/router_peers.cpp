// The router's peers: attaching to endpoints (challenge, hello, reconnect
// with backoff), accepting attachers, and the registry of connected peers.
#include "dice/logging/sampler.hpp"

#include "router_impl.hpp"

#include <set>

namespace dice::router_detail {

namespace {

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

} // namespace

std::string describe(const router_peer& p) {
  return "node " + std::to_string(p.node) + " (" + to_string(p.roles) + ")";
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

// Tells every local member that a peer connected or was lost (e.g. a
// collector resends what a learner has not acknowledged at once).
void notify_members(router_ptr self, const router_peer& p, bool up) {
  peer_event ev{p.node, p.roles, up};
  for (auto& m : self->state.members)
    tell(self, m.member, ev);
}

// -- attaching to a peer
// ---------------------------------------------------------

namespace {

void send_hello(router_ptr self, std::size_t idx, caf::actor peer,
                std::string where, std::string proof);

// Connected to the node at endpoint `idx`: `peer` is what it published.
// A peer dialed again and again that keeps refusing (another program, a
// wrong secret, an old protocol) is logged the first time and every 1024th
// after, per kind and address.
log::sampler& handshake_refusals() {
  static log::sampler x;
  return x;
}

void on_connected(router_ptr self, std::size_t idx, caf::actor peer,
                  const std::set<std::string>& ifs, std::string where) {
  auto& st = self->state;
  // A node publishes its gate, an untyped actor; anything else is another
  // program or an older dice: retrying cannot help.
  if (!peer || !ifs.empty()) {
    if (auto n = handshake_refusals().next("protocol|" + where))
      log::error(
        st.cfg.node,
        "handshake with " + where + " refused: not a dice node of protocol v"
          + std::to_string(router_protocol_version) + log::sampled_note(n));
    return;
  }
  // No secret, or the node's dialer made this connection and checked the
  // acceptor's proof of the secret in the preamble before BASP ran: the
  // hello goes at once. The acceptor's router takes it without a proof only
  // if its own node proved the secret on the connection too.
  if (st.cfg.secret.empty() || (st.cfg.preamble_proven && st.cfg.dialer)) {
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
          if (auto n = handshake_refusals().next("secret|" + where))
            log::error(st.cfg.node,
                       "handshake with " + where
                         + " refused: the peer does not know the "
                           "cluster secret"
                         + log::sampled_note(n));
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

} // namespace

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
  // The data plane's key pair for the hello, made while the dialer
  // connects rather than after (its X25519 keygen was on the hello's path).
  if (st.cfg.data && st.cfg.data->enabled() && !ep.offer)
    ep.offer = net::data_offer::make();
}

namespace {

// The hello proper: our state (and proof), answered by the peer's state;
// its backlog for us arrives just before the answer.
void send_hello(router_ptr self, std::size_t idx, caf::actor peer,
                std::string where, std::string proof) {
  auto& st = self->state;
  auto sent = make_hello(self);
  sent.proof = std::move(proof);
  // The data plane's key exchange for this control session.
  std::shared_ptr<const net::data_offer> offer;
  if (st.cfg.data && st.cfg.data->enabled()) {
    // Made ahead in attach(); each is sent in one hello only.
    offer = std::move(st.endpoints[idx].offer);
    if (!offer)
      offer = net::data_offer::make();
  }
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
          if (auto n = handshake_refusals().next("version|" + where))
            log::error(st.cfg.node,
                       "handshake with " + where + " refused: node "
                         + std::to_string(h.node) + " answered with protocol v"
                         + std::to_string(h.version) + log::sampled_note(n));
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
        insert_peer(
          self,
          router_peer{
            h.node, h.roles, peer, h.topics, h.drained, idx, 0, {}, {}});
        // What the peer held for us arrives before anything else.
        replay(self, peer, early);
        send_backlog(self, peer, h.topics);
        // State that changed while the handshake was in flight.
        if (st.finished && sent.finished.empty())
          to_peer(self, peer, *st.finished);
        if (st.drained && !sent.drained)
          to_peer(self, peer, done_atom::value, st.cfg.node);
        peer_added(self, h);
        // The acceptor's key: open the data connections beside BASP
        // (snapshots use BASP until they are up). After peer_added, so
        // that those waiting for the peer hear of it before the dial's
        // thread starts.
        if (st.cfg.data && offer && h.data.size() == net::data_key_size)
          st.cfg.data->dial(h.node, st.endpoints[idx].host,
                            st.endpoints[idx].port, offer, h.data);
      },
      [=](caf::error& err) {
        auto& st = self->state;
        st.handshakes.erase(peer.address());
        if (is(err, errc::handshake_failed) || is(err, errc::unauthorized)) {
          if (auto n = handshake_refusals().next("refused|" + where))
            log::error(st.cfg.node,
                       "handshake with " + where + " refused: " + render(err)
                         + log::sampled_note(n));
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

} // namespace

// -- another node attaching to this one
// ------------------------------------------

namespace {

// "refused peer: WHAT" for the first refusal of a kind and every 1024th
// after it, as the listener logs the preamble's: a secret holder sending
// thousands of bad hellos must not flood the log (it wrote a line each).
void log_refusal(router_ptr self, const std::string& kind,
                 const std::string& what) {
  auto& st = self->state;
  auto n = ++st.refusals[kind];
  if (n % 1024 != 1)
    return;
  log::error(st.cfg.node,
             "refused peer: " + what
               + (n == 1 ? std::string{}
                         : " (" + std::to_string(n)
                      + " such "
                        "refusals; every 1024th is logged)"));
}

} // namespace

caf::result<peer_hello> accept_hello(router_ptr self, const caf::actor& from,
                                     peer_hello& h) {
  auto& st = self->state;
  if (h.version != router_protocol_version) {
    count(trust_event::wrong_version);
    auto what = "node " + std::to_string(h.node) + " speaks protocol v"
      + std::to_string(h.version) + ", this node v"
      + std::to_string(router_protocol_version);
    log_refusal(self, "version", what);
    return make_error(errc::handshake_failed, what);
  }
  auto challenged = st.challenges.count(from.address()) > 0;
  if (!st.cfg.secret.empty() && st.cfg.preamble_proven && !challenged
      && h.proof.empty()) {
    // Every BASP connection of this node passed the preamble, whose dialer
    // proved the secret to this node's listener (or to whom this node's
    // dialer dialled, after that node proved it first), and the gate took
    // this hello from a remote actor only: its sender, or the node that
    // forwarded it, knows the secret. A proof would repeat that.
    count_hello_on_preamble();
  } else if (!st.cfg.secret.empty()) {
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
      log_refusal(self, "proof", what);
      return make_error(errc::unauthorized, what);
    }
  }
  if (h.node == st.cfg.node) {
    auto what = "node id " + std::to_string(h.node) + " is this node's own id";
    log_refusal(self, "own id", what);
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
  insert_peer(
    self,
    router_peer{h.node, h.roles, from, h.topics, h.drained, {}, 0, {}, {}});
  // The backlog goes out now, before the answer: the gate sends the answer
  // once this handler returned, and one connection keeps the order.
  send_backlog(self, from, h.topics);
  peer_added(self, h);
  return reply;
}

} // namespace dice::router_detail
