#include "router_impl.hpp"
#include "router_state.hpp"

namespace dice {

using namespace router_detail;

namespace {

void remove_member(router_ptr self, const caf::actor_addr& who) {
  auto& st = self->state;
  auto gone = [&](const router_subscriber& x) {
    return x.member.address() == who;
  };
  st.members.erase(std::remove_if(st.members.begin(), st.members.end(), gone),
                   st.members.end());
  st.done.erase(std::remove_if(st.done.begin(), st.done.end(),
                               [&](const caf::actor& x) {
                                 return x.address() == who;
                               }),
                st.done.end());
  for (auto& [topic, subs] : st.topics)
    subs.erase(std::remove_if(subs.begin(), subs.end(), gone), subs.end());
}

} // namespace

router_actor::behavior_type router_behavior(router_ptr self,
                                            router_config cfg) {
  self->state.chunks = snapshot_chunker{cfg.chunk_bytes};
  self->state.cfg = std::move(cfg);
  self->state.gate = spawn_gate(self->system(),
                                caf::actor_cast<caf::actor>(self),
                                self->state.cfg.node,
                                self->state.cfg.connect_timeout);
  self->monitor(self->state.gate);
  // Only the gate is reachable from other nodes, but an exit sent by a
  // remote actor must not stop this node in any case.
  self->set_exit_handler([=](caf::exit_msg& em) {
    if (em.source && em.source.node() != self->node()) {
      count(trust_event::remote_exit_ignored);
      log::warning(self->state.cfg.node,
                   "ignored an exit message from a remote actor");
      return;
    }
    if (em.reason != caf::exit_reason::normal) {
      // What queued for peers still goes (the flush would never run).
      for (auto& kvp : self->state.outboxes)
        flush_outbox(self, kvp.second.peer);
      self->quit(em.reason);
    }
  });
  // CAF's default error handler would stop the router. A member of this node
  // may answer a peer_event it does not handle with an error: ignored.
  self->set_error_handler([=](caf::error& err) {
    auto& src = self->current_sender();
    if (trusted_local(src, self->system())) {
      count(trust_event::message_rejected);
      log::debug(self->state.cfg.node,
                 "router ignored an error from a local actor: {}", render(err));
      return;
    }
    drop(self, trust_event::stranger_dropped, src,
         "an error message (" + render(err) + ")",
         "nobody sends the router errors");
  });
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = self->state;
    if (dm.source == st.gate.address()) {
      fail(self,
           "the gate stopped (" + caf::to_string(dm.reason)
             + "): no peer can reach this node");
      return;
    }
    auto i = std::find_if(st.peers.begin(), st.peers.end(),
                          [&](const router_peer& p) {
                            return p.handle.address() == dm.source;
                          });
    if (i != st.peers.end()) {
      auto p = std::move(*i);
      st.peers.erase(i);
      auto lvl = st.released ? log::level::info : log::level::warning;
      log::write(lvl, st.cfg.node,
                 "lost peer " + describe(p) + ": " + caf::to_string(dm.reason));
      st.basp_sent.erase(p.handle.address());
      st.deferred_refs.erase(p.handle.address());
      st.chunks.drop_origin(p.node, st.cfg.node, "peer lost");
      if (st.cfg.data)
        st.cfg.data->drop_peer(p.node);
      relay_peer_lost(self, p.node);
      notify_members(self, p, false);
      if (p.endpoint)
        schedule_reconnect(self, *p.endpoint);
      update_loss_timer(self);
    } else {
      remove_member(self, dm.source);
    }
    check_all_done(self);
  });
  if (self->state.cfg.data)
    self->state.cfg.data->set_router(caf::actor_cast<caf::actor>(self));
  update_loss_timer(self);
  return {
    [=](join_atom, std::uint32_t node, role_set, const caf::actor& member,
        const std::vector<std::string>& topics)
      -> caf::result<std::vector<finish>> {
      if (!local_only(self, "a join"))
        return make_error(errc::unauthorized, "join from a stranger");
      self->monitor(member);
      self->state.members.push_back(router_subscriber{node, member});
      for (auto& topic : topics)
        add_subscriber(self, topic, node, member);
      // A node that joins a finished run learns it at once.
      if (self->state.finished)
        return std::vector<finish>{*self->state.finished};
      return std::vector<finish>{};
    },
    [=](subscribe_atom, const std::string& topic, std::uint32_t node,
        const caf::actor& member) {
      if (!local_only(self, "a subscription"))
        return;
      self->monitor(member);
      add_subscriber(self, topic, node, member);
    },
    [=](publish_atom, const std::string& topic, std::uint32_t sender,
        const caf::message& msg) {
      if (!local_only(self, "a publish"))
        return;
      route(self, topic, sender, msg, false);
    },
    [=](done_atom, std::uint32_t, const caf::actor& member) {
      if (!local_only(self, "a done"))
        return;
      auto& st = self->state;
      if (std::find(st.done.begin(), st.done.end(), member) == st.done.end())
        st.done.push_back(member);
      check_all_done(self);
    },
    [=](finish& x) {
      auto& src = self->current_sender();
      auto kind = classify(src, self->system());
      if (kind == sender_kind::local
          && src != caf::actor_cast<caf::strong_actor_ptr>(self->state.gate)) {
        on_finish(self, x);
        return;
      }
      // From a peer: relayed across the cluster, any sender node.
      with_peer(
        self, "a finish",
        [&](router_peer&, const caf::strong_actor_ptr&) {
          on_finish(self, x);
        },
        [&] {
          return caf::make_message(x);
        });
    },
    [=](hello_atom, const caf::actor& from,
        peer_hello& h) -> caf::result<peer_hello> {
      if (!from_gate(self, "a hello"))
        return make_error(errc::unauthorized, "not through the gate");
      if (!from)
        return make_error(errc::handshake_failed, "anonymous hello");
      return accept_hello(self, from, h);
    },
    [=](hello_atom, const caf::actor& from,
        const std::string& nonce_a) -> caf::result<std::string, std::string> {
      return answer_challenge(self, from, nonce_a);
    },
    [=](subscribe_atom, std::string& topic, std::uint32_t node) {
      with_peer(
        self, "a peer subscription",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_subscribe(self, p, src, topic, node);
        },
        [&] {
          return caf::make_message(subscribe_atom::value, topic, node);
        });
    },
    [=](forward_atom, forward_batch& b) {
      with_peer(
        self, "a forward batch",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_batch(self, p, src, b);
        },
        [&] {
          return caf::make_message(forward_atom::value, std::move(b));
        });
    },
    [=](forward_atom, snapshot_chunk& c) {
      with_peer(
        self, "a snapshot chunk",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_chunk(self, p, src, c);
        },
        [&] {
          return caf::make_message(forward_atom::value, std::move(c));
        });
    },
    [=](forward_atom, std::string& topic, std::uint32_t sender,
        std::uint64_t transfer, model_snapshot& header) {
      with_peer(
        self, "a data reference",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_data_reference(self, p, src, topic, sender, transfer, header);
        },
        [&] {
          return caf::make_message(forward_atom::value, topic, sender, transfer,
                                   std::move(header));
        });
    },
    [=](arrived_atom, std::uint32_t peer, std::uint64_t transfer,
        std::uint64_t order, std::string& meta) {
      peer_data_arrived(self, peer, transfer, order, meta);
    },
    [=](forward_atom, relay_reference& x) {
      with_peer(
        self, "a relay reference",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_relay_reference(self, p, src, x);
        },
        [&] {
          return caf::make_message(forward_atom::value, std::move(x));
        });
    },
    [=](relay_atom, std::uint32_t round, std::uint32_t node, bool ok) {
      with_peer(
        self, "a relay report",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_relay_report(self, p, src, round, node, ok);
        },
        [&] {
          return caf::make_message(relay_atom::value, round, node, ok);
        });
    },
    [=](forward_atom, std::string& topic, std::uint32_t sender,
        caf::message& msg) {
      with_peer(
        self, "a forward",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_forward(self, p, src, topic, sender, msg);
        },
        [&] {
          return caf::make_message(forward_atom::value, topic, sender, msg);
        });
    },
    [=](done_atom, std::uint32_t node) {
      with_peer(
        self, "a peer's done",
        [&](router_peer& p, const caf::strong_actor_ptr& src) {
          peer_done(self, p, src, node);
        },
        [&] {
          return caf::make_message(done_atom::value, node);
        });
    },
    [=](attach_atom, const std::string& host, std::uint16_t port) {
      if (!local_only(self, "an attach"))
        return;
      auto& st = self->state;
      st.endpoints.push_back(
        router_endpoint{host, port, caf::timespan{0}, false, 0});
      attach(self, st.endpoints.size() - 1);
    },
    [=](peers_atom, std::uint32_t n) -> caf::result<std::uint32_t> {
      if (!local_only(self, "a peers request"))
        return make_error(errc::unauthorized, "peers from a stranger");
      auto& st = self->state;
      if (st.peers.size() >= n)
        return static_cast<std::uint32_t>(st.peers.size());
      auto rp = self->make_response_promise<std::uint32_t>();
      st.peer_waiters.emplace_back(n, rp);
      return rp;
    },
    [=](gate_atom) -> caf::result<caf::actor> {
      if (!local_only(self, "a gate request"))
        return make_error(errc::unauthorized, "gate from a stranger");
      return self->state.gate;
    },
    [=](flush_atom) {
      if (self->current_sender().get() != self->ctrl()) {
        drop_sender(self, "a flush", "only the router flushes its outboxes");
        return;
      }
      flush_outboxes(self);
    },
    [=](tick_atom, std::uint32_t kind, std::uint64_t id) {
      auto& st = self->state;
      if (self->current_sender().get() != self->ctrl()) {
        drop_sender(self, "a timer tick", "only the router arms its timers");
        return;
      }
      if (kind == relay_kind) {
        relay_deadline(self, static_cast<std::uint32_t>(id));
        return;
      }
      if (kind == loss_kind) {
        if (id != st.loss_timer || st.finished || !st.peers.empty())
          return;
        auto secs = std::chrono::duration_cast<std::chrono::milliseconds>(
                      st.cfg.peer_loss_timeout)
                      .count()
          / 1000.0;
        fail(self, "no peer connected for " + std::to_string(secs) + " s");
        return;
      }
      auto idx = static_cast<std::size_t>(kind - reconnect_kind);
      if (idx >= st.endpoints.size() || st.endpoints[idx].timer != id
          || st.endpoints[idx].busy || st.released)
        return;
      attach(self, idx);
    },
  };
}

} // namespace dice

namespace dice {

router_actor spawn_router(caf::actor_system& sys, router_config cfg) {
  return sys.spawn(router_behavior, std::move(cfg));
}

} // namespace dice
