// Who may send the router what: local control from this node's own actors,
// the handshake through the gate, the secret challenge, and the checks on
// everything a peer sends (it speaks only for itself, on topics this node
// subscribed to).
#include "dice/messages/context_ack.hpp"
#include "dice/messages/event.hpp"

#include "router_impl.hpp"

#include <atomic>

namespace dice {

namespace {

std::atomic<std::uint64_t> challenges_answered{0};
std::atomic<std::uint64_t> hellos_on_preamble{0};

} // namespace

router_handshake_counters router_handshake_stats() noexcept {
  return {challenges_answered.load(), hellos_on_preamble.load()};
}

} // namespace dice

namespace dice::router_detail {

void count_hello_on_preamble() noexcept {
  ++hellos_on_preamble;
}

void drop(router_ptr self, trust_event ev, const caf::strong_actor_ptr& src,
          const std::string& what, const std::string& why) {
  self->state.drops.drop(self->state.cfg.node, ev, src, what, why,
                         self->clock().now());
}

void drop_sender(router_ptr self, const std::string& what,
                 const std::string& why) {
  auto& src = self->current_sender();
  drop(self,
       src ? trust_event::stranger_dropped : trust_event::anonymous_dropped,
       src, what, why);
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

// Answers an attacher's challenge: this node's nonce and its proof of the
// cluster secret, which the attacher checks before it sends its hello.
caf::result<std::string, std::string>
answer_challenge(router_ptr self, const caf::actor& from,
                 const std::string& nonce_a) {
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
  ++challenges_answered;
  return {nonce_b, acceptor_proof(st.cfg.secret, nonce_a, nonce_b)};
}

// -- what peers send
// -----------------------------------------------------------

namespace {

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
  // Acks and a learner group's messages come from learners only.
  if ((msg.match_element<context_ack>(1) || topic == learner_group_topic
       || topic == learner_group_alive_topic)
      && !p.roles.has(role::learner)) {
    drop(self, trust_event::message_rejected, src, what,
         "only learners send acks or speak on a learner group's topics");
    return false;
  }
  std::uint32_t named = p.node;
  if (msg.match_element<context_delta>(1))
    named = msg.get_as<context_delta>(1).sender;
  else if (msg.match_element<model_snapshot>(1))
    named = msg.get_as<model_snapshot>(1).sender;
  else if (msg.match_element<storage_ref>(1))
    named = msg.get_as<storage_ref>(1).origin;
  else if (msg.match_element<context_ack>(1))
    named = msg.get_as<context_ack>(1).sender;
  else if (msg.match_element<event>(1)
           && msg.get_as<event>(1).content.size() == 1)
    named = msg.get_as<event>(1).sender;
  else {
    drop(self, trust_event::message_rejected, src, what,
         "its content is no delta, snapshot, storage reference, ack or "
         "event");
    return false;
  }
  if (named != p.node)
    return forged("its content names node " + std::to_string(named));
  return true;
}

} // namespace

bool unknown_topic(router_ptr self, const router_peer& p,
                   const std::string& topic) {
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

void peer_subscribe(router_ptr self, router_peer& p,
                    const caf::strong_actor_ptr& src, const std::string& topic,
                    std::uint32_t node) {
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

void peer_done(router_ptr self, router_peer& p,
               const caf::strong_actor_ptr& src, std::uint32_t node) {
  if (node != p.node) {
    drop(self, trust_event::forged_origin, src,
         "a done from node " + std::to_string(p.node),
         "it names node " + std::to_string(node));
    return;
  }
  p.drained = true;
  check_all_done(self);
}

// Handles what a peer sent before its handshake answer arrived, in order.
void replay(router_ptr self, const caf::actor& handle,
            std::vector<caf::message>& early) {
  auto src = caf::actor_cast<caf::strong_actor_ptr>(handle);
  for (auto& m : early) {
    auto p = find_peer(self, handle.address());
    if (!p)
      return;
    ++p->basp_handled; // as with_peer counts

    caf::message_handler h{
      [&](forward_atom, std::string& topic, std::uint32_t sender,
          caf::message& msg) {
        peer_forward(self, *p, src, topic, sender, msg);
      },
      [&](forward_atom, forward_batch& b) {
        peer_batch(self, *p, src, b);
      },
      [&](forward_atom, snapshot_chunk& c) {
        peer_chunk(self, *p, src, c);
      },
      [&](forward_atom, std::string& topic, std::uint32_t sender,
          std::uint64_t transfer, model_snapshot& header) {
        peer_data_reference(self, *p, src, topic, sender, transfer, header);
      },
      [&](forward_atom, relay_reference& x) {
        peer_relay_reference(self, *p, src, x);
      },
      [&](relay_atom, std::uint32_t round, std::uint32_t node, bool ok) {
        peer_relay_report(self, *p, src, round, node, ok);
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
    if (auto q = find_peer(self, handle.address()); q && !q->pending.empty())
      route_pending(self, *q);
  }
}

} // namespace dice::router_detail
