// The end of a run: finish flooding, every member and peer done, the
// peer-loss timer, waiters for a number of peers.
#include "router_impl.hpp"

namespace dice::router_detail {

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

namespace {

void release(router_ptr self) {
  auto& st = self->state;
  st.released = true;
  for (auto& m : st.done)
    tell(self, m, done_atom::value);
  st.done.clear();
}

} // namespace

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

} // namespace dice::router_detail
