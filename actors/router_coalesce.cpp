// The router's coalescing: forwards to a peer that queue while the router is
// busy go out as one forward_batch (router protocol v9).
//
// BASP costs about the same per message whatever its size (a header, a
// dispatch to the gate, a mailbox hop to the router, one more to the member),
// so a collector's small deltas paid it per delta. Batching must not cost the
// user latency: the first forward to an idle peer goes at once, and a (flush)
// the router sends itself then marks the end of what is already in its
// mailbox. What was published to that peer meanwhile queues; at the flush it
// goes out as one message, and another flush is armed. A flush that finds
// nothing queued for a peer disarms it: its next forward goes at once again.
// Ordering per peer holds because everything else sent to a peer
// (`to_peer`) first sends what queued for it.

#include "router_impl.hpp"

#include <atomic>

namespace dice {

namespace {

std::atomic<std::uint64_t> batches_sent{0};
std::atomic<std::uint64_t> forwards_batched{0};
std::atomic<std::uint64_t> batches_received{0};

} // namespace

router_counters router_stats() noexcept {
  return {batches_sent.load(), forwards_batched.load(),
          batches_received.load()};
}

} // namespace dice

namespace dice::router_detail {

namespace {

// Payload bytes a forward carries, for context deltas; anything else counts
// as small (snapshots never get here: chunks and the data plane take them).
std::size_t payload_bytes(const caf::message& msg) {
  if (!msg.match_elements<std::string, context_delta>())
    return 0;
  return dice::payload_bytes(msg.get_as<context_delta>(1));
}

void arm_flush(router_ptr self) {
  auto& st = self->state;
  if (st.flush_pending)
    return;
  st.flush_pending = true;
  self->send(self, flush_atom::value);
}

// Sends what queued for the peer: a lone forward as it would have gone
// without coalescing, several as one batch.
void send_queued(router_ptr self, router_outbox& ob) {
  auto& st = self->state;
  if (ob.items.empty())
    return;
  flush_refs(self, ob.peer);
  ++st.basp_sent[ob.peer.address()];
  if (ob.items.size() == 1) {
    auto& x = ob.items.front();
    caf::send_as(st.gate, ob.peer, forward_atom::value, std::move(x.topic),
                 x.sender, std::move(x.msg));
  } else {
    ++batches_sent;
    forwards_batched += ob.items.size();
    forward_batch b;
    b.items = std::move(ob.items);
    caf::send_as(st.gate, ob.peer, forward_atom::value, std::move(b));
  }
  ob.items.clear();
  ob.bytes = 0;
}

} // namespace

void send_forward(router_ptr self, const caf::actor& peer,
                  const std::string& topic, std::uint32_t sender,
                  const caf::message& msg) {
  auto& st = self->state;
  auto bytes = payload_bytes(msg);
  if (!st.cfg.coalesce || bytes > st.cfg.coalesce_bytes) {
    to_peer(self, peer, forward_atom::value, topic, sender, msg);
    return;
  }
  auto& ob = st.outboxes[peer.address()];
  if (!ob.armed) {
    // An idle peer: at once, and watch for more while this one is handled.
    ob.peer = peer;
    ob.armed = true;
    flush_refs(self, peer);
    ++st.basp_sent[peer.address()];
    caf::send_as(st.gate, peer, forward_atom::value, topic, sender, msg);
    arm_flush(self);
    return;
  }
  ob.items.push_back(forwarded{topic, sender, msg});
  ob.bytes += bytes;
  if (ob.items.size() >= max_forward_batch || ob.bytes > st.cfg.coalesce_bytes)
    send_queued(self, ob);
}

void flush_refs(router_ptr self, const caf::actor& peer) {
  auto& st = self->state;
  if (st.deferred_refs.empty())
    return;
  auto i = st.deferred_refs.find(peer.address());
  if (i == st.deferred_refs.end())
    return;
  auto refs = std::move(i->second);
  st.deferred_refs.erase(i);
  auto& n = st.basp_sent[peer.address()];
  for (auto& r : refs) {
    ++n;
    caf::send_as(st.gate, peer, forward_atom::value, std::move(r.topic),
                 r.sender, r.transfer, std::move(r.header));
  }
}

void flush_outbox(router_ptr self, const caf::actor& peer) {
  auto& st = self->state;
  if (st.outboxes.empty())
    return;
  if (auto i = st.outboxes.find(peer.address()); i != st.outboxes.end())
    send_queued(self, i->second);
}

void flush_outboxes(router_ptr self) {
  auto& st = self->state;
  st.flush_pending = false;
  bool any = false;
  for (auto i = st.outboxes.begin(); i != st.outboxes.end();) {
    if (i->second.items.empty()) {
      i = st.outboxes.erase(i); // idle again: its next forward goes at once
      continue;
    }
    send_queued(self, i->second);
    any = true;
    ++i;
  }
  if (any)
    arm_flush(self);
}

void peer_batch(router_ptr self, const router_peer& p,
                const caf::strong_actor_ptr& src, forward_batch& b) {
  if (b.items.size() > max_forward_batch) {
    drop(self, trust_event::message_rejected, src,
         "a batch of " + std::to_string(b.items.size()) + " forwards",
         "at most " + std::to_string(max_forward_batch) + " are allowed");
    return;
  }
  ++batches_received;
  // Each is checked exactly as if it had come alone.
  for (auto& x : b.items)
    peer_forward(self, p, src, x.topic, x.sender, x.msg);
}

} // namespace dice::router_detail
