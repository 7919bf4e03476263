// A peer's snapshots whose bytes come on the data plane: their BASP
// references, and their arrival with their header (router protocol v14,
// net/data_wire.hpp), both keeping each snapshot's place among the peer's
// messages.
#include "router_impl.hpp"

namespace dice::router_detail {

// A peer's snapshot whose bytes come on the data plane: the router takes
// them if they are there, else claims them and handles nothing else until
// they are (or failed), so the snapshot keeps its place among the peer's
// messages (a finish or done sent after it is handled after it).
void peer_data_reference(router_ptr self, router_peer& p,
                         const caf::strong_actor_ptr& src,
                         const std::string& topic, std::uint32_t sender,
                         std::uint64_t transfer, model_snapshot& header) {
  auto& st = self->state;
  // Routed when its bytes arrived (peer_data_arrived): nothing left to do.
  if (p.settled.erase(transfer) > 0)
    return;
  // Earlier arrivals first (every message before this one is handled, so
  // their orders are); this one is placed here, with this header.
  route_pending(self, p, transfer);
  if (!p.pending.empty() && p.pending.front().transfer == transfer)
    p.pending.pop_front();
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
    if (!dp.take_ready(peer, transfer))
      self
        ->request(dp.inbox(), timeout, net::data_take_atom::value, peer,
                  transfer)
        .then([](shared_bytes&) {}, [](caf::error&) {});
    return;
  }
  // Bytes that came before their reference are taken at once; only bytes
  // still on their way cost a request (and the wait below).
  if (auto bytes = dp.take_ready(peer, transfer)) {
    header.data = std::move(*bytes);
    route(self, topic, sender, caf::make_message(topic, std::move(header)),
          true);
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

namespace {

// Routes (or drops, with the checks a reference gets) a transfer whose
// bytes and header arrived, once nothing the peer sent before it is still
// on its way. Bytes already taken by the transfer's reference are left.
void route_arrival(router_ptr self, router_peer& p, std::uint64_t transfer,
                   const std::string& meta) {
  auto& dp = *self->state.cfg.data;
  auto bytes = dp.take_ready(p.node, transfer);
  if (!bytes)
    return;
  if (p.settled.size() >= max_settled)
    p.settled.erase(p.settled.begin());
  p.settled.insert(transfer);
  auto src = caf::actor_cast<caf::strong_actor_ptr>(p.handle);
  auto x = net::decode_meta(meta.data(), meta.size());
  if (!x) {
    drop(self, trust_event::message_rejected, src,
         "a data-plane snapshot from node " + std::to_string(p.node),
         render(x.error()));
    return;
  }
  if (x->sender != p.node || x->header.sender != p.node) {
    drop(self, trust_event::forged_origin, src,
         "a data-plane snapshot from node " + std::to_string(p.node),
         "it names another node as its sender");
    return;
  }
  if (unknown_topic(self, p, x->topic))
    return;
  x->header.data = std::move(*bytes);
  net::count_routed_on_arrival();
  route(self, x->topic, x->sender,
        caf::make_message(x->topic, std::move(x->header)), true);
}

} // namespace

void route_pending(router_ptr self, router_peer& p, std::uint64_t upto) {
  // Arrivals come in transfer order and their orders never fall: the first
  // that must still wait holds the rest.
  while (!p.pending.empty() && p.pending.front().order <= p.basp_handled
         && p.pending.front().transfer < upto) {
    auto x = std::move(p.pending.front());
    p.pending.pop_front();
    route_arrival(self, p, x.transfer, x.meta);
  }
}

// A peer's snapshot whose bytes came with their header (net/data_wire.hpp):
// routed now if every message the peer sent before it has been handled, so
// it keeps its place as its reference would have kept it; else it waits in
// `pending` for them. Its reference, if it comes first, routes it instead.
void peer_data_arrived(router_ptr self, std::uint32_t peer,
                       std::uint64_t transfer, std::uint64_t order,
                       std::string& meta) {
  auto& st = self->state;
  if (!st.cfg.data
      || self->current_sender()
        != caf::actor_cast<caf::strong_actor_ptr>(st.cfg.data->inbox())) {
    drop_sender(self, "an arrival",
                "only this node's data plane reports arrivals");
    return;
  }
  auto p = find_peer(self, peer);
  if (!p)
    return; // its reference (held with the handshake) or the loss settles it
  if (p->basp_handled < order || !p->pending.empty()) {
    if (p->pending.size() >= max_pending) {
      // A peer whose orders never come true: its oldest are dropped.
      auto old = std::move(p->pending.front());
      p->pending.pop_front();
      st.cfg.data->take_ready(peer, old.transfer);
    }
    p->pending.push_back(router_arrival{transfer, order, std::move(meta)});
    route_pending(self, *p);
    return;
  }
  route_arrival(self, *p, transfer, meta);
}

} // namespace dice::router_detail
