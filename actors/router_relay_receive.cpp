// The receiving side of the relay broadcast (router_relay.cpp has the
// origin's): a receiver claims a round's pieces from its upstream, forwards
// each to its children as soon as it has it, and delivers the snapshot only
// if the whole matches the SHA-256 the origin sent it directly; on a
// mismatch or a dead upstream it reports to the origin and takes the bytes
// from the origin instead.

#include "router_impl.hpp"

#include <cstring>

namespace dice::router_detail {

namespace {

// A receiver's claim of a relay round: the pieces it has so far.
struct relay_claim {
  std::shared_ptr<relay_reference> ref;
  caf::actor origin;
  std::uint32_t via = 0;
  bool direct = false;
  std::vector<shared_bytes> pieces;
  // Children this node already reported it could not forward to.
  std::vector<bool> reported;
};

void relay_received(router_ptr self, std::shared_ptr<relay_claim> c,
                    shared_bytes bytes);
void piece_received(router_ptr self, std::shared_ptr<relay_claim> c,
                    shared_bytes bytes);

// The data plane forgets the round's pieces from `via` and the origin.
void settle_round(router_ptr self, const relay_reference& ref) {
  caf::anon_send(self->state.cfg.data->inbox(), net::data_tag_done_atom::value,
                 ref.upstream, ref.sender, ref.round + ref.pieces - 1);
}

// Claims the claim's next piece from its `via` or the origin (handling
// nothing else until it is there, so the snapshot keeps its place among the
// origin's messages); on failure, drops the model and releases the round.
void await_piece(router_ptr self, std::shared_ptr<relay_claim> c) {
  auto dp = self->state.cfg.data;
  auto timeout = dp->config().io_timeout + std::chrono::seconds{1};
  auto& ref = *c->ref;
  auto tag = ref.round + static_cast<std::uint32_t>(c->pieces.size());
  self
    ->request(dp->inbox(), timeout, net::data_take_tag_atom::value, c->via,
              ref.sender, tag)
    .await(
      [=](shared_bytes& bytes) {
        piece_received(self, c, std::move(bytes));
      },
      [=](caf::error& err) {
        log::warning(self->state.cfg.node,
                     "dropped model v" + std::to_string(c->ref->header.version)
                       + " from node " + std::to_string(c->ref->sender)
                       + " on topic '" + c->ref->topic + "': " + render(err));
        settle_round(self, *c->ref);
      });
}

// Claims round `ref->round`'s pieces from `via` (or the origin), in order.
void await_relayed(router_ptr self, std::shared_ptr<relay_reference> ref,
                   caf::actor origin, std::uint32_t via, bool direct) {
  auto c = std::make_shared<relay_claim>();
  c->ref = std::move(ref);
  c->origin = std::move(origin);
  c->via = via;
  c->direct = direct;
  c->reported.assign(c->ref->children.size(), false);
  c->pieces.reserve(c->ref->pieces);
  await_piece(self, c);
}

// Forwards a piece at once (each child checks the digest for itself, and
// the pipeline waits for no hash), then claims the next or checks the whole.
void piece_received(router_ptr self, std::shared_ptr<relay_claim> c,
                    shared_bytes bytes) {
  auto& st = self->state;
  auto dp = st.cfg.data;
  auto me = st.cfg.node;
  auto& ref = *c->ref;
  auto tag = ref.round + static_cast<std::uint32_t>(c->pieces.size());
  if (!c->direct && !ref.children.empty()) {
    auto item = std::make_shared<const net::data_item>(bytes);
    for (std::size_t i = 0; i < ref.children.size(); ++i) {
      auto child = ref.children[i];
      if (c->reported[i])
        continue;
      if (child != ref.sender && child != me && dp->send(child, item, tag)) {
        net::count_relay(net::relay_counter::forwarded);
      } else {
        c->reported[i] = true;
        to_peer(self, c->origin, relay_atom::value, ref.round, child, false);
      }
    }
  }
  c->pieces.push_back(std::move(bytes));
  if (c->pieces.size() < ref.pieces) {
    await_piece(self, c);
    return;
  }
  if (c->pieces.size() == 1) {
    relay_received(self, c, std::move(c->pieces.front()));
    return;
  }
  std::size_t total = 0;
  for (auto& x : c->pieces)
    total += x.size();
  writable_bytes whole{total};
  std::size_t at = 0;
  for (auto& x : c->pieces) {
    std::memcpy(whole.data() + at, x.data(), x.size());
    at += x.size();
  }
  c->pieces.clear();
  relay_received(self, c, shared_bytes{std::move(whole)});
}

// Delivers relayed bytes once their digest matches; else asks the origin.
void relay_received(router_ptr self, std::shared_ptr<relay_claim> c,
                    shared_bytes bytes) {
  auto& st = self->state;
  auto me = st.cfg.node;
  auto ref = c->ref;
  auto from = ref->sender;
  if (sha256(bytes.data(), bytes.size()) == ref->digest) {
    auto header = ref->header;
    header.data = std::move(bytes);
    route(self, ref->topic, from,
          caf::make_message(ref->topic, std::move(header)), true);
    to_peer(self, c->origin, relay_atom::value, ref->round, me, true);
    settle_round(self, *ref);
    return;
  }
  net::count_relay(net::relay_counter::mismatch);
  count(trust_event::message_rejected);
  log::warning(me,
               "dropped relayed bytes of model v"
                 + std::to_string(ref->header.version) + " (round "
                 + std::to_string(ref->round) + ") from node "
                 + std::to_string(c->via) + ": their SHA-256 is not node "
                 + std::to_string(from) + "'s");
  to_peer(self, c->origin, relay_atom::value, ref->round, me, false);
  if (c->direct || c->via == from) {
    settle_round(self, *ref);
    return;
  }
  // The origin answers the report with the bytes itself.
  await_relayed(self, ref, c->origin, from, true);
}

} // namespace

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
  if (x.round == 0 || x.pieces == 0 || x.pieces > max_relay_pieces
      || x.round + (x.pieces - 1) < x.round || x.digest.size() != 32
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
  await_relayed(self, ref, origin, via, false);
}

} // namespace dice::router_detail
