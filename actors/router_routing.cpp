// The router's routing: local and peer delivery, messages held while nobody
// listens, retained topics, and large snapshots on the data plane or in chunks.
#include "router_impl.hpp"

namespace dice::router_detail {

namespace {

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

// Sends a large snapshot's bytes on the data plane after its header frame;
// its BASP reference waits for the next message to the peer (or goes with
// 63 others: router_deferred_ref). False if no data connection to `node`
// is up.
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
  auto header = x;
  header.data = shared_bytes{};
  if (!forms.item)
    forms.item = std::make_shared<const net::data_item>(
      x.data, net::encode_meta(topic, sender, header));
  // The header frame's order: every message sent to the peer before this
  // snapshot, what queued for it included (sent first).
  flush_outbox(self, peer);
  auto id = dp->send(node, forms.item, 0,
                     self->state.basp_sent[peer.address()]);
  if (!id) {
    dp->fell_back(node);
    return false;
  }
  auto& refs = self->state.deferred_refs[peer.address()];
  refs.push_back(router_deferred_ref{topic, sender, *id, std::move(header)});
  if (refs.size() >= max_deferred_refs)
    flush_refs(self, peer);
  return true;
}

} // namespace

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
    send_forward(self, peer, topic, sender, msg);
    return;
  }
  auto fresh = chunks.empty();
  if (fresh)
    chunks = st.chunks.split(st.cfg.node, topic, sender,
                             msg.get_as<model_snapshot>(1), false);
  for (auto& c : chunks) {
    // Hashed just before it is sent, while the multiplexer serializes the
    // chunks before it: no whole pass over the model before the first
    // chunk leaves (the data plane's trailer, for the BASP fallback).
    if (fresh)
      snapshot_chunker::seal(c);
    to_peer(self, peer, forward_atom::value, c);
  }
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
  // Peers never route what they got from a peer on: delivery is to direct
  // peers only, once (DI-engine's router semantics, minus the losses). The
  // one exception, relayed snapshot bytes, checks a digest the origin sent
  // in its own name (router_relay.cpp).
  if (from_peer)
    return;
  // Large snapshots go out on the data plane or in chunks, prepared (and
  // checksummed) once for all peers; both share the snapshot's buffer.
  // Many remote peers: a relay tree of them (router_relay.cpp).
  auto relayed = relay_route(self, topic, sender, msg);
  wire_forms forms;
  for (auto& p : st.peers)
    if (p.node != sender && contains(p.topics, topic)) {
      any = true;
      if (std::find(relayed.begin(), relayed.end(), p.node) == relayed.end())
        forward_to_peer(self, p.handle, p.node, topic, sender, msg, forms);
    }
  relay_direct_sent(self); // a star probe's echo requests, after its sends
  if (!any)
    hold(self, topic, sender, msg);
}

void add_subscriber(router_ptr self, const std::string& topic,
                    std::uint32_t node, const caf::actor& member) {
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

} // namespace dice::router_detail
