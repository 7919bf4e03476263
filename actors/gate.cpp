#include "actors/gate.hpp"

#include "dice/core/errc.hpp"
#include "dice/security/trust.hpp"
#include "security/senders.hpp"

#include "caf/downstream_msg.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/mailbox_element.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/stream_slot.hpp"
#include "caf/system_messages.hpp"
#include "caf/upstream_msg.hpp"

#include <string>

namespace dice {

namespace {

// What a dropped message was, for the log: its leading atom if it has one.
std::string what_of(const caf::type_erased_tuple& x) {
  if (!x.empty() && x.match_element<caf::atom_value>(0))
    return "a '" + caf::to_string(x.get_as<caf::atom_value>(0)) + "' message";
  return "a message of an unexpected type";
}

class gate : public caf::event_based_actor {
 public:
  using super = caf::event_based_actor;

  gate(caf::actor_config& cfg, caf::actor router, std::uint32_t node,
       caf::timespan timeout)
    : super(cfg), router_(std::move(router)), router_addr_(router_.address()),
      node_(node), timeout_(timeout) {
    // nop
  }

  // System messages are handled by CAF before any handler sees them: an
  // exit with exit_reason::kill always stops the receiver, an error or a
  // down message stops it with the default handlers. None of them may come
  // from another node, so they are dropped before the mailbox. (Runs on the
  // sender's thread: counters only, no state.)
  //
  // Peer traffic from another node (a forward, subscription, relay report,
  // done or finish, of exactly the types the handlers below take) goes
  // straight into the router's mailbox from here, as `delegate` would send
  // it (same sender, id and content): the gate is not scheduled for it,
  // which saves an actor hop per message each way. Everything else (the
  // handshake, strangers, anonymous senders, unknown types) takes the
  // mailbox and the handlers as before. The router checks the peer itself
  // and holds what a peer sent before its handshake answer (with_peer).
  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit* eu) override {
    if (ptr && !ptr->mid.is_response()) {
      auto& x = ptr->content();
      if (!admissible(x))
        return;
      if (peer_traffic(x)
          && classify(ptr->sender, system()) == sender_kind::remote) {
        caf::actor_cast<caf::abstract_actor*>(router_)->enqueue(std::move(ptr),
                                                                eu);
        return;
      }
    }
    super::enqueue(std::move(ptr), eu);
  }

  const char* name() const override {
    return "dice.gate";
  }

  caf::behavior make_behavior() override {
    monitor(router_);
    set_down_handler([this](caf::down_msg& dm) {
      if (dm.source == router_addr_)
        quit();
    });
    set_default_handler(
      [this](caf::scheduled_actor*,
             caf::message_view& x) -> caf::result<caf::message> {
        auto& src = current_sender();
        auto kind = classify(src, system());
        drops_.drop(node_,
                    kind == sender_kind::anonymous
                      ? trust_event::anonymous_dropped
                      : trust_event::stranger_dropped,
                    src, what_of(x.content()),
                    "a node takes only the handshake and peer traffic from "
                    "other nodes",
                    clock().now());
        return caf::make_error(caf::sec::unexpected_message);
      });
    return {
      // -- from the router: handshake requests to a peer, in the gate's name --
      [this](ask_atom, const caf::actor& peer,
             std::string& nonce) -> caf::result<std::string, std::string> {
        if (!from_router("a challenge request"))
          return make_error(errc::unauthorized, "not the router");
        auto rp = make_response_promise<std::string, std::string>();
        request(peer, timeout_, hello_atom::value, std::move(nonce))
          .then(
            [this, rp, peer](std::string& nonce_b, std::string& mac) mutable {
              if (!answered_by(peer, rp))
                return;
              rp.deliver(std::move(nonce_b), std::move(mac));
            },
            [rp](caf::error& err) mutable {
              rp.deliver(std::move(err));
            });
        return rp;
      },
      [this](ask_atom, const caf::actor& peer,
             peer_hello& h) -> caf::result<peer_hello> {
        if (!from_router("a hello request"))
          return make_error(errc::unauthorized, "not the router");
        auto rp = make_response_promise<peer_hello>();
        request(peer, timeout_, hello_atom::value, std::move(h))
          .then(
            [this, rp, peer](peer_hello& reply) mutable {
              if (!answered_by(peer, rp))
                return;
              rp.deliver(std::move(reply));
            },
            [rp](caf::error& err) mutable {
              rp.deliver(std::move(err));
            });
        return rp;
      },
      // -- from other nodes: the handshake, answered by the gate ------------
      [this](hello_atom,
             std::string& nonce) -> caf::result<std::string, std::string> {
        if (!from_remote("a challenge"))
          return make_error(errc::unauthorized, "anonymous challenge");
        // Before the promise: making it moves the sender out of the message.
        auto from = caf::actor_cast<caf::actor>(current_sender());
        auto rp = make_response_promise<std::string, std::string>();
        request(router_, timeout_, hello_atom::value, from, std::move(nonce))
          .then(
            [rp](std::string& nonce_b, std::string& mac) mutable {
              rp.deliver(std::move(nonce_b), std::move(mac));
            },
            [rp](caf::error& err) mutable {
              rp.deliver(std::move(err));
            });
        return rp;
      },
      [this](hello_atom, peer_hello& h) -> caf::result<peer_hello> {
        if (!from_remote("a hello"))
          return make_error(errc::unauthorized, "anonymous hello");
        auto from = caf::actor_cast<caf::actor>(current_sender());
        auto rp = make_response_promise<peer_hello>();
        request(router_, timeout_, hello_atom::value, from, std::move(h))
          .then(
            [rp](peer_hello& reply) mutable {
              rp.deliver(std::move(reply));
            },
            [rp](caf::error& err) mutable {
              rp.deliver(std::move(err));
            });
        return rp;
      },
      // -- from other nodes: peer traffic, checked by the router
      // -----------------
      [this](subscribe_atom, std::string& topic, std::uint32_t node) {
        if (from_remote("a peer subscription"))
          delegate(router_, subscribe_atom::value, std::move(topic), node);
      },
      [this](forward_atom, std::string& topic, std::uint32_t sender,
             caf::message& msg) {
        if (from_remote("a forward"))
          delegate(router_, forward_atom::value, std::move(topic), sender,
                   std::move(msg));
      },
      [this](forward_atom, forward_batch& b) {
        if (from_remote("a forward batch"))
          delegate(router_, forward_atom::value, std::move(b));
      },
      [this](forward_atom, snapshot_chunk& c) {
        if (from_remote("a snapshot chunk"))
          delegate(router_, forward_atom::value, std::move(c));
      },
      [this](forward_atom, std::string& topic, std::uint32_t sender,
             std::uint64_t transfer, model_snapshot& header) {
        if (from_remote("a data reference"))
          delegate(router_, forward_atom::value, std::move(topic), sender,
                   transfer, std::move(header));
      },
      [this](forward_atom, relay_reference& x) {
        if (from_remote("a relay reference"))
          delegate(router_, forward_atom::value, std::move(x));
      },
      [this](relay_atom, std::uint32_t round, std::uint32_t node, bool ok) {
        if (from_remote("a relay report"))
          delegate(router_, relay_atom::value, round, node, ok);
      },
      [this](done_atom, std::uint32_t node) {
        if (from_remote("a peer's done"))
          delegate(router_, done_atom::value, node);
      },
      [this](finish& x) {
        if (from_remote("a finish"))
          delegate(router_, std::move(x));
      },
    };
  }

 private:
  // True if `x` is one of the peer messages the gate hands to its router
  // (the atom's value checked too: a type token names only atom_value).
  static bool peer_traffic(const caf::type_erased_tuple& x) {
    if (x.match_elements<finish>())
      return true;
    if (x.empty() || !x.match_element<caf::atom_value>(0))
      return false;
    auto atom = x.get_as<caf::atom_value>(0);
    if (atom == forward_atom::value)
      return x.match_elements<forward_atom, std::string, std::uint32_t,
                              caf::message>()
        || x.match_elements<forward_atom, forward_batch>()
        || x.match_elements<forward_atom, snapshot_chunk>()
        || x.match_elements<forward_atom, std::string, std::uint32_t,
                            std::uint64_t, model_snapshot>()
        || x.match_elements<forward_atom, relay_reference>();
    if (atom == subscribe_atom::value)
      return x.match_elements<subscribe_atom, std::string, std::uint32_t>();
    if (atom == relay_atom::value)
      return x.match_elements<relay_atom, std::uint32_t, std::uint32_t, bool>();
    if (atom == done_atom::value)
      return x.match_elements<done_atom, std::uint32_t>();
    return false;
  }

  bool admissible(const caf::type_erased_tuple& x) const {
    auto tt = x.type_token();
    if (tt == caf::make_type_token<caf::exit_msg>()) {
      count(trust_event::remote_exit_ignored);
      return false;
    }
    if (tt == caf::make_type_token<caf::down_msg>()) {
      if (x.get_as<caf::down_msg>(0).source == router_addr_)
        return true;
      count(trust_event::stranger_dropped);
      return false;
    }
    if (tt == caf::make_type_token<caf::error>()
        || tt == caf::make_type_token<caf::timeout_msg>()
        || tt == caf::make_type_token<caf::open_stream_msg>()
        || tt == caf::make_type_token<caf::upstream_msg>()
        || tt == caf::make_type_token<caf::downstream_msg>()
        || tt == caf::make_type_token<caf::group_down_msg>()) {
      count(trust_event::stranger_dropped);
      return false;
    }
    return true;
  }

  // True if the current message comes from another node and names its
  // sender; drops (counted, logged once per source) otherwise.
  bool from_remote(const char* what) {
    auto& src = current_sender();
    switch (classify(src, system())) {
      case sender_kind::remote: return true;
      case sender_kind::anonymous:
        drops_.drop(node_, trust_event::anonymous_dropped, src, what,
                    "every message to a node must name its sender",
                    clock().now());
        return false;
      default:
        drops_.drop(node_, trust_event::stranger_dropped, src, what,
                    "the gate takes this from other nodes only", clock().now());
        return false;
    }
  }

  bool from_router(const char* what) {
    if (current_sender() == caf::actor_cast<caf::strong_actor_ptr>(router_))
      return true;
    auto& src = current_sender();
    drops_.drop(
      node_,
      src ? trust_event::stranger_dropped : trust_event::anonymous_dropped, src,
      what, "only the node's router asks its gate", clock().now());
    return false;
  }

  // A response from another actor than the one asked (CAF matches
  // responses by request id only) fails the request.
  template <class Promise>
  bool answered_by(const caf::actor& peer, Promise& rp) {
    if (current_sender() == caf::actor_cast<caf::strong_actor_ptr>(peer))
      return true;
    drops_.drop(node_, trust_event::stranger_dropped, current_sender(),
                "a handshake answer", "another actor than the one asked",
                clock().now());
    rp.deliver(make_error(errc::handshake_failed,
                          "answer from another actor than the peer"));
    return false;
  }

  caf::actor router_;
  caf::actor_addr router_addr_;
  std::uint32_t node_;
  caf::timespan timeout_;
  drop_log drops_;
};

} // namespace

caf::actor spawn_gate(caf::actor_system& sys, caf::actor router,
                      std::uint32_t node, caf::timespan timeout) {
  return sys.spawn<gate>(std::move(router), node, timeout);
}

caf::expected<caf::actor> gate_of(caf::actor_system& sys,
                                  const router_actor& router) {
  caf::scoped_actor self{sys};
  caf::expected<caf::actor> result{caf::actor{}};
  self->request(router, std::chrono::seconds{30}, gate_atom::value)
    .receive(
      [&](caf::actor& x) {
        result = std::move(x);
      },
      [&](caf::error& err) {
        result = std::move(err);
      });
  return result;
}

caf::actor spawn_gate(caf::actor_system& sys, const router_actor& router) {
  auto x = gate_of(sys, router);
  return x ? *x : caf::actor{};
}

} // namespace dice
