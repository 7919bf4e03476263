// The router's relay broadcast: a large snapshot for many remote peers
// leaves this node about once and reaches the others down a tree of the
// receivers (each forwards on its data connections), instead of one copy
// per peer from this node.
//
// Trust: the origin still speaks only in its own name. It sends every
// receiver, directly over BASP, a `relay_reference` carrying the SHA-256 of
// the bytes (computed once here); relayed bytes are delivered only if their
// digest matches, so a member that alters or swaps them gets them dropped,
// never delivered. Each receiver reports back (`relay`, round, node, ok); a
// receiver that reports a mismatch, sits below a lost peer, or has not
// confirmed by the deadline gets the bytes directly from the origin.
//
// Order: a receiver claims the round's bytes with `await`, as for a direct
// data reference, so the snapshot keeps its place among the origin's
// messages; the claim takes the first bytes tagged with the round from its
// upstream or from the origin (the fallback), so a dead upstream never
// leaves it waiting for anything but the origin.
#include "router_impl.hpp"

namespace dice::router_detail {

namespace {

// Most children a relay reference may name.
constexpr std::size_t max_relay_fanout = 8;

// Sends round `round` directly to `node`, once (a receiver may ask twice:
// its upstream was gone when the reference came, and the origin saw the
// loss too).
void send_direct(router_ptr self, router_relay_round& r, std::uint32_t round,
                 std::uint32_t node) {
  auto& st = self->state;
  if (!r.direct.insert(node).second)
    return;
  net::count_relay(net::relay_counter::fallback);
  if (!st.cfg.data || !st.cfg.data->send(node, r.item, round)) {
    r.pending.erase(node);
    log::warning(st.cfg.node,
                 "cannot send relay round " + std::to_string(round)
                   + " to node " + std::to_string(node)
                   + ": no data connection");
  }
}

// True if `ancestor` is on the path from this node to `node`.
bool below(const router_relay_round& r, std::uint32_t node,
           std::uint32_t ancestor) {
  for (std::size_t hops = 0; hops <= r.upstream.size(); ++hops) {
    auto u = r.upstream.find(node);
    if (u == r.upstream.end())
      return false;
    if (u->second == ancestor)
      return true;
    node = u->second;
  }
  return false;
}

// Everything below `node` that has not confirmed gets the bytes directly.
void reroute_below(router_ptr self, router_relay_round& r, std::uint32_t round,
                   std::uint32_t node) {
  std::vector<std::uint32_t> xs;
  for (auto d : r.pending)
    if (below(r, d, node))
      xs.push_back(d);
  for (auto d : xs)
    send_direct(self, r, round, d);
}

void relay_received(router_ptr self, std::shared_ptr<relay_reference> ref,
                    caf::actor origin, std::uint32_t via, shared_bytes bytes,
                    bool direct);

// Claims round `ref->round`'s bytes from `via` (handling nothing else until
// they are there, so the snapshot keeps its place among the origin's
// messages); on failure, drops the model and releases the round.
void await_relayed(router_ptr self, std::shared_ptr<relay_reference> ref,
                   caf::actor origin, std::uint32_t via, std::uint32_t from,
                   bool direct) {
  auto dp = self->state.cfg.data;
  auto timeout = dp->config().io_timeout + std::chrono::seconds{1};
  self
    ->request(dp->inbox(), timeout, net::data_take_tag_atom::value, via, from,
              ref->round)
    .await(
      [=](shared_bytes& bytes) {
        relay_received(self, ref, origin, via, std::move(bytes), direct);
      },
      [=](caf::error& err) {
        log::warning(self->state.cfg.node,
                     "dropped model v" + std::to_string(ref->header.version)
                       + " from node " + std::to_string(from) + " on topic '"
                       + ref->topic + "': " + render(err));
        caf::anon_send(dp->inbox(), net::data_tag_done_atom::value,
                       ref->upstream, from, ref->round);
      });
}

// Delivers relayed bytes once their digest matches; else asks the origin.
void relay_received(router_ptr self, std::shared_ptr<relay_reference> ref,
                    caf::actor origin, std::uint32_t via, shared_bytes bytes,
                    bool direct) {
  auto& st = self->state;
  auto dp = st.cfg.data;
  auto me = st.cfg.node;
  auto from = ref->sender;
  // Forward first: each child checks the digest for itself, and the
  // pipeline does not wait for this node's hash.
  if (!direct && !ref->children.empty()) {
    auto item = std::make_shared<const net::data_item>(bytes);
    for (auto c : ref->children) {
      if (c != from && c != me && dp->send(c, item, ref->round))
        net::count_relay(net::relay_counter::forwarded);
      else
        to_peer(self, origin, relay_atom::value, ref->round, c, false);
    }
  }
  auto settle = [=] {
    caf::anon_send(dp->inbox(), net::data_tag_done_atom::value, ref->upstream,
                   from, ref->round);
  };
  if (sha256(bytes.data(), bytes.size()) == ref->digest) {
    auto header = ref->header;
    header.data = std::move(bytes);
    route(self, ref->topic, from,
          caf::make_message(ref->topic, std::move(header)), true);
    to_peer(self, origin, relay_atom::value, ref->round, me, true);
    settle();
    return;
  }
  net::count_relay(net::relay_counter::mismatch);
  count(trust_event::message_rejected);
  log::warning(me,
               "dropped relayed bytes of model v"
                 + std::to_string(ref->header.version) + " (round "
                 + std::to_string(ref->round) + ") from node "
                 + std::to_string(via) + ": their SHA-256 is not node "
                 + std::to_string(from) + "'s");
  to_peer(self, origin, relay_atom::value, ref->round, me, false);
  if (direct || via == from) {
    settle();
    return;
  }
  // The origin answers the report with the bytes itself.
  await_relayed(self, ref, origin, from, from, true);
}

} // namespace

std::vector<std::uint32_t> relay_route(router_ptr self,
                                       const std::string& topic,
                                       std::uint32_t sender,
                                       const caf::message& msg) {
  auto& st = self->state;
  auto& dp = st.cfg.data;
  if (!st.cfg.relay || !dp || !dp->enabled() || sender != st.cfg.node
      || !msg.match_elements<std::string, model_snapshot>())
    return {};
  auto& x = msg.get_as<model_snapshot>(1);
  if (x.data.size() < dp->config().min_bytes)
    return {};
  // Remote peers with a data connection up; same-host peers keep their
  // shared-memory path (one segment for all of them already).
  std::vector<std::uint32_t> order;
  for (auto& p : st.peers)
    if (p.node != sender && contains(p.topics, topic) && dp->can_send(p.node)
        && !dp->sends_same_host(p.node))
      order.push_back(p.node);
  if (order.size() < std::max<std::size_t>(st.cfg.relay_min_peers, 1))
    return {};
  std::sort(order.begin(), order.end());
  auto round = ++st.relay_next;
  if (round == 0)
    round = ++st.relay_next;
  // A tree of fan-out k in heap order: this node at the root, order[i] at
  // position i + 1; its children are order[k(i+1)] .. order[k(i+1)+k-1],
  // its upstream order[i/k - 1] (this node when i < k).
  auto k = std::clamp<std::size_t>(st.cfg.relay_fanout, 1, max_relay_fanout);
  router_relay_round r;
  r.topic = topic;
  r.sender = sender;
  r.item = std::make_shared<const net::data_item>(x.data);
  for (std::size_t i = 0; i < order.size(); ++i) {
    r.upstream.emplace(order[i], i < k ? st.cfg.node : order[i / k - 1]);
    r.pending.insert(order[i]);
  }
  // The bytes first: the writers start while this node hashes them.
  for (std::size_t i = 0; i < std::min(k, order.size()); ++i)
    if (!dp->send(order[i], r.item, round)) {
      send_direct(self, r, round, order[i]);
      reroute_below(self, r, round, order[i]);
    }
  auto digest = sha256(x.data.data(), x.data.size());
  auto header = x;
  header.data = shared_bytes{};
  for (std::size_t i = 0; i < order.size(); ++i) {
    relay_reference ref;
    ref.topic = topic;
    ref.sender = sender;
    ref.round = round;
    ref.digest = digest;
    ref.upstream = r.upstream[order[i]];
    for (auto c = k * (i + 1); c < std::min(k * (i + 2), order.size()); ++c)
      ref.children.push_back(order[c]);
    ref.header = header;
    to_peer(self, find_peer(self, order[i])->handle, forward_atom::value,
            std::move(ref));
  }
  net::count_relay(net::relay_counter::round);
  st.relay_rounds.emplace(round, std::move(r));
  // A bounded number of rounds in flight: the oldest is settled directly.
  while (st.relay_rounds.size() > 16) {
    auto i = st.relay_rounds.begin();
    relay_deadline(self, i->first);
  }
  self->delayed_send(self, st.cfg.relay_deadline, tick_atom::value, relay_kind,
                     static_cast<std::uint64_t>(round));
  return order;
}

void relay_deadline(router_ptr self, std::uint32_t round) {
  auto& st = self->state;
  auto i = st.relay_rounds.find(round);
  if (i == st.relay_rounds.end())
    return;
  auto& r = i->second;
  std::vector<std::uint32_t> late;
  for (auto d : r.pending)
    if (r.direct.count(d) == 0)
      late.push_back(d);
    else
      log::warning(st.cfg.node,
                   "node " + std::to_string(d) + " did not confirm relay round "
                     + std::to_string(round) + ", sent to it directly");
  for (auto d : late)
    send_direct(self, r, round, d);
  st.relay_rounds.erase(i);
}

void relay_peer_lost(router_ptr self, std::uint32_t node) {
  auto& st = self->state;
  for (auto i = st.relay_rounds.begin(); i != st.relay_rounds.end();) {
    auto& r = i->second;
    r.pending.erase(node);
    reroute_below(self, r, i->first, node);
    if (r.pending.empty())
      i = st.relay_rounds.erase(i);
    else
      ++i;
  }
}

void peer_relay_report(router_ptr self, const router_peer& p,
                       const caf::strong_actor_ptr& src, std::uint32_t round,
                       std::uint32_t node, bool ok) {
  auto& st = self->state;
  auto i = st.relay_rounds.find(round);
  if (i == st.relay_rounds.end())
    return; // settled already
  auto& r = i->second;
  if (node == p.node) {
    if (r.pending.count(node) > 0) {
      if (ok)
        r.pending.erase(node);
      else
        send_direct(self, r, round, node);
    }
  } else {
    // A peer speaks for itself: it may only say it could not forward to a
    // child of its own.
    auto u = r.upstream.find(node);
    if (ok || u == r.upstream.end() || u->second != p.node) {
      drop(self, trust_event::forged_origin, src,
           "a relay report from node " + std::to_string(p.node),
           "it speaks for node " + std::to_string(node));
      return;
    }
    if (r.pending.count(node) > 0) {
      send_direct(self, r, round, node);
      reroute_below(self, r, round, node);
    }
  }
  if (r.pending.empty())
    st.relay_rounds.erase(i);
}

void peer_relay_reference(router_ptr self, const router_peer& p,
                          const caf::strong_actor_ptr& src,
                          relay_reference& x) {
  auto& st = self->state;
  auto what = "a relay reference from node " + std::to_string(p.node);
  if (!st.cfg.data) {
    drop(self, trust_event::message_rejected, src, what,
         "this node has no data plane");
    return;
  }
  if (x.sender != p.node || x.header.sender != p.node) {
    drop(self, trust_event::forged_origin, src, what,
         "it names another node as its sender");
    return;
  }
  // As for any forward: only topics this node subscribed to (the origin's
  // deadline then serves this node's subtree directly).
  if (!subscribed_here(self, x.topic)) {
    drop(self, trust_event::unknown_topic, src, what,
         "a topic this node never subscribed to");
    return;
  }
  if (x.round == 0 || x.digest.size() != 32
      || x.children.size() > max_relay_fanout || x.upstream == st.cfg.node) {
    drop(self, trust_event::message_rejected, src, what, "it is malformed");
    return;
  }
  auto origin = p.handle;
  auto from = p.node;
  auto via = x.upstream;
  // An upstream that is no peer of this node cannot send: ask the origin.
  if (via != from && !find_peer(self, via)) {
    to_peer(self, origin, relay_atom::value, x.round, st.cfg.node, false);
    via = from;
  }
  auto ref = std::make_shared<relay_reference>(std::move(x));
  await_relayed(self, ref, origin, via, from, false);
}

} // namespace dice::router_detail
