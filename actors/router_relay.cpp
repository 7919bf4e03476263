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
// Pipeline: the bytes travel as pieces of about 1 MiB (at most 16), one
// data transfer each, tagged round .. round + pieces - 1; a relay forwards
// each piece as soon as it has it, so a round costs about one transfer of
// the model per level's fan-out plus a piece per level, not a whole
// transfer per level (store and forward).
//
// Order: a receiver claims the round's bytes with `await`, as for a direct
// data reference, so the snapshot keeps its place among the origin's
// messages; the claim takes the first bytes tagged with the round from its
// upstream or from the origin (the fallback), so a dead upstream never
// leaves it waiting for anything but the origin.
#include "router_impl.hpp"

#include <cstring>

namespace dice::router_detail {

namespace {

// Sends round `round` directly to `node`, once (a receiver may ask twice:
// its upstream was gone when the reference came, and the origin saw the
// loss too).
void send_direct(router_ptr self, router_relay_round& r, std::uint32_t round,
                 std::uint32_t node) {
  auto& st = self->state;
  if (!r.direct.insert(node).second)
    return;
  net::count_relay(net::relay_counter::fallback);
  bool sent = st.cfg.data != nullptr;
  for (std::size_t j = 0; sent && j < r.pieces.size(); ++j)
    sent = st.cfg.data
             ->send(node, r.pieces[j], round + static_cast<std::uint32_t>(j))
             .has_value();
  if (!sent) {
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

} // namespace

std::vector<std::uint32_t> relay_route(router_ptr self,
                                       const std::string& topic,
                                       std::uint32_t sender,
                                       const caf::message& msg) {
  auto& st = self->state;
  auto& dp = st.cfg.data;
  if (st.cfg.relay == relay_mode::off || !dp || !dp->enabled()
      || sender != st.cfg.node
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
  relay_plan plan;
  if (st.cfg.relay == relay_mode::automatic)
    plan = relay_auto_plan(self, order.size());
  using probe_kind = router_relay_round::probe_kind;
  if (plan.way == probe_kind::star && !plan.probe)
    return {};
  auto round = ++st.relay_next;
  if (round == 0)
    round = ++st.relay_next;
  if (plan.way == probe_kind::star) {
    // A timed star round: the caller sends directly, then
    // relay_direct_sent asks each receiver to echo; nothing is resent.
    router_relay_round r;
    r.topic = topic;
    r.sender = sender;
    r.started = std::chrono::steady_clock::now();
    r.probe = probe_kind::star;
    r.series = st.relay_auto.series;
    r.pending.insert(order.begin(), order.end());
    r.direct = r.pending;
    st.relay_auto.star_round = round;
    st.relay_rounds.emplace(round, std::move(r));
    self->delayed_send(self, st.cfg.relay_deadline, tick_atom::value,
                       relay_kind, static_cast<std::uint64_t>(round));
    return {};
  }
  // A tree of fan-out k in heap order: this node at the root, order[i] at
  // position i + 1; its children are order[k(i+1)] .. order[k(i+1)+k-1],
  // its upstream order[i/k - 1] (this node when i < k).
  auto k = std::clamp<std::size_t>(st.cfg.relay_fanout, 1, max_relay_fanout);
  router_relay_round r;
  r.topic = topic;
  r.sender = sender;
  // Pieces of about 1 MiB (at most 16): copied once here, so that relays
  // forward each while the next arrives.
  auto size = x.data.size();
  auto pieces = static_cast<std::uint32_t>(std::clamp<std::size_t>(
    (size + min_relay_piece - 1) / min_relay_piece, 1, max_relay_pieces));
  if (pieces == 1) {
    r.pieces.push_back(std::make_shared<const net::data_item>(x.data));
  } else {
    auto step = (size + pieces - 1) / pieces;
    for (std::size_t at = 0; at < size; at += step) {
      auto n = std::min(step, size - at);
      writable_bytes piece{n};
      std::memcpy(piece.data(), x.data.data() + at, n);
      r.pieces.push_back(
        std::make_shared<const net::data_item>(shared_bytes{std::move(piece)}));
    }
    pieces = static_cast<std::uint32_t>(r.pieces.size());
  }
  // The round's pieces take the tags round .. round + pieces - 1.
  st.relay_next += pieces - 1;
  r.started = std::chrono::steady_clock::now();
  if (plan.probe) {
    r.probe = probe_kind::tree;
    r.series = st.relay_auto.series;
  }
  for (std::size_t i = 0; i < order.size(); ++i) {
    r.upstream.emplace(order[i], i < k ? st.cfg.node : order[i / k - 1]);
    r.pending.insert(order[i]);
  }
  // The bytes first: the writers start while this node hashes them.
  for (std::size_t i = 0; i < std::min(k, order.size()); ++i) {
    bool sent = true;
    for (std::uint32_t j = 0; sent && j < pieces; ++j)
      sent = dp->send(order[i], r.pieces[j], round + j).has_value();
    if (!sent) {
      send_direct(self, r, round, order[i]);
      reroute_below(self, r, round, order[i]);
    }
  }
  auto digest = sha256(x.data.data(), x.data.size());
  auto header = x;
  header.data = shared_bytes{};
  for (std::size_t i = 0; i < order.size(); ++i) {
    relay_reference ref;
    ref.topic = topic;
    ref.sender = sender;
    ref.round = round;
    ref.pieces = pieces;
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
  if (r.probe == router_relay_round::probe_kind::star) {
    // A star probe resends nothing: it only took this long (or longer).
    relay_settled(self, r);
    st.relay_rounds.erase(i);
    return;
  }
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
  relay_settled(self, r);
  st.relay_rounds.erase(i);
}

void relay_peer_lost(router_ptr self, std::uint32_t node) {
  auto& st = self->state;
  for (auto i = st.relay_rounds.begin(); i != st.relay_rounds.end();) {
    auto& r = i->second;
    r.pending.erase(node);
    reroute_below(self, r, i->first, node);
    if (r.pending.empty()) {
      relay_settled(self, r);
      i = st.relay_rounds.erase(i);
    } else {
      ++i;
    }
  }
}

void peer_relay_report(router_ptr self, const router_peer& p,
                       const caf::strong_actor_ptr& src, std::uint32_t round,
                       std::uint32_t node, bool ok) {
  auto& st = self->state;
  if (node == st.cfg.node && node != p.node) {
    // The origin's echo request of a star probe: this router handles it
    // only after the snapshot sent before it, so the answer times that.
    to_peer(self, p.handle, relay_atom::value, round, node, true);
    return;
  }
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
  if (r.pending.empty()) {
    relay_settled(self, r);
    st.relay_rounds.erase(i);
  }
}

} // namespace dice::router_detail
