#pragma once

// Deterministic multi-node fixture: several actor systems ("planets") on
// CAF's test coordinator, connected through the testing network backend
// (io::network::test_multiplexer). No sockets, no real time. (CAF's
// io_dsl.hpp needs CAF's own test engine; this drives the same loop.)

#include "actors/gate.hpp"
#include "actors/router_state.hpp"
#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/peer_event.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/io/basp_broker.hpp"
#include "caf/io/middleman.hpp"
#include "caf/io/network/test_multiplexer.hpp"
#include "caf/scheduler/test_coordinator.hpp"
#include "caf/scoped_actor.hpp"
#include "caf/send.hpp"
#include "caf/stateful_actor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dice::test {

/// Actor system settings of one simulated host.
struct planet_config : caf::actor_system_config {
  planet_config() {
    load<caf::io::middleman>();
    dice::add_message_types(*this);
    set("scheduler.policy", caf::atom("testing"));
    set("logger.inline-output", true);
    set("logger.verbosity", caf::atom("quiet"));
    set("middleman.network-backend", caf::atom("testing"));
    set("middleman.manual-multiplexing", true);
    set("middleman.attach-utility-actors", true);
    set("middleman.heartbeat-interval", caf::timespan{0});
    set("middleman.workers", size_t{0});
  }
};

/// One simulated host: an actor system with the testing backend, and a
/// local actor that sends this node's control messages (never anonymous).
struct planet {
  planet_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched = dynamic_cast<
    caf::scheduler::test_coordinator&>(sys.scheduler());
  caf::io::network::test_multiplexer& mpx = dynamic_cast<
    caf::io::network::test_multiplexer&>(sys.middleman().backend());
  caf::scoped_actor driver{sys, true};
};

/// What a member (a stand-in for a role actor) received.
struct member_state {
  std::vector<std::string> topics;
  std::vector<context_delta> deltas;
  std::vector<model_snapshot> snapshots;
  std::vector<context_ack> acks;
  std::vector<event> events;
  std::vector<finish> finishes;
  std::vector<peer_event> peer_events;
  int done = 0;
  /// Deltas received before each finish (what arrived in which order).
  std::vector<std::size_t> deltas_at_finish;
};

using member_actor = caf::stateful_actor<member_state>;

inline caf::behavior member(member_actor* self) {
  return {
    [=](const std::string& topic, const context_delta& d) {
      self->state.topics.push_back(topic);
      self->state.deltas.push_back(d);
    },
    [=](const std::string& topic, const model_snapshot& x) {
      self->state.topics.push_back(topic);
      self->state.snapshots.push_back(x);
    },
    [=](const std::string& topic, const context_ack& x) {
      self->state.topics.push_back(topic);
      self->state.acks.push_back(x);
    },
    [=](const std::string& topic, const event& x) {
      self->state.topics.push_back(topic);
      self->state.events.push_back(x);
    },
    [=](const finish& x) {
      self->state.finishes.push_back(x);
      self->state.deltas_at_finish.push_back(self->state.deltas.size());
    },
    [=](done_atom) {
      ++self->state.done;
    },
    [=](const peer_event& x) {
      self->state.peer_events.push_back(x);
    },
  };
}

/// Fixture with `n` planets.
class planets : public ::testing::Test {
 protected:
  explicit planets(int n = 3) {
    for (int i = 0; i < n; ++i)
      hosts.push_back(std::make_unique<planet>());
  }

  void TearDown() override {
    for (auto& [p, x] : actors)
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    exec_all();
  }

  /// Runs every node until no message, I/O event or timeout moves.
  void exec_all() {
    auto advance = [](std::unique_ptr<planet>& p) {
      return p->sched.try_run_once() || p->mpx.try_read_data()
        || p->mpx.try_exec_runnable() || p->mpx.try_accept_connection();
    };
    while (std::any_of(hosts.begin(), hosts.end(), advance))
      ; // repeat
  }

  /// Advances every fake clock by `d` and runs until nothing moves.
  void advance_time(caf::timespan d) {
    for (auto& p : hosts)
      p->sched.advance_time(d);
    exec_all();
  }

  /// Spawns a router on planet `i` (stopped when the test ends).
  router_actor spawn_router(int i, std::uint32_t node, router_config cfg = {}) {
    cfg.node = node;
    auto b = dice::spawn_router(hosts[i]->sys, cfg);
    actors.emplace_back(i, caf::actor_cast<caf::actor>(b));
    exec_all();
    return b;
  }

  /// The actor a node publishes for router `b` on planet `i`: its gate.
  caf::actor gate_of(int, const router_actor& b) {
    return router_of(b).gate;
  }

  /// A member of node `node` on router `b`, subscribed to `topics`.
  caf::actor spawn_member(int i, const router_actor& b, std::uint32_t node,
                          std::vector<std::string> topics) {
    auto m = hosts[i]->sys.spawn(member);
    actors.emplace_back(i, m);
    hosts[i]->driver->send(b, join_atom::value, node, role_set{}, m,
                           std::move(topics));
    exec_all();
    return m;
  }

  /// Publishes `x` (the gate of a router) on port `port` of planet `i`.
  void publish(int i, const caf::actor& x, std::uint16_t port) {
    auto& p = *hosts[i];
    p.mpx.provide_acceptor(port, accept_hdl(i, port));
    p.sched.inline_next_enqueue();
    auto res = p.sys.middleman().publish(x, port);
    ASSERT_TRUE(res) << caf::to_string(res.error());
  }

  /// Prepares one connection from planet `client` to `server`:`port`.
  void prepare(int client, int server, const std::string& host,
               std::uint16_t port) {
    auto srv = caf::io::connection_handle::from_int(++hdl_);
    auto cli = caf::io::connection_handle::from_int(++hdl_);
    hosts[server]->mpx.prepare_connection(accept_hdl(server, port), srv,
                                          hosts[client]->mpx, host, port, cli);
  }

  /// Prepares a connection, then lets the client's router attach to it.
  void attach(int client, const router_actor& b, int server,
              const std::string& host, std::uint16_t port) {
    prepare(client, server, host, port);
    hosts[client]->driver->send(b, attach_atom::value, host, port);
    exec_all();
  }

  /// Connects planet `client` to `server`:`port` through the middleman (no
  /// dice handshake) and runs `fn` in an actor of the client with the
  /// handle the server published.
  void
  as_stranger(int client, int server, const std::string& host,
              std::uint16_t port,
              std::function<void(caf::event_based_actor*, caf::actor)> fn) {
    prepare(client, server, host, port);
    hosts[client]->sys.spawn([=](caf::event_based_actor* self) {
      auto mm = self->system().middleman().actor_handle();
      self
        ->request(mm, std::chrono::seconds{1}, caf::connect_atom::value, host,
                  port)
        .then([=](const caf::node_id&, caf::strong_actor_ptr& ptr,
                  const std::set<std::string>&) {
          fn(self, caf::actor_cast<caf::actor>(ptr));
        });
    });
    exec_all();
  }

  /// A proxy on planet `client` for actor id `aid` of planet `server`'s
  /// node, whether or not that actor was ever published: what an attacker
  /// gets by guessing an id (ids are small sequential integers).
  caf::actor guess(int client, int server, caf::actor_id aid) {
    auto& sys = hosts[client]->sys;
    auto bb = sys.middleman().named_broker<caf::io::basp_broker>(
      caf::atom("BASP"));
    auto ptr = dynamic_cast<caf::io::basp_broker*>(
      caf::actor_cast<caf::abstract_actor*>(bb));
    // make_proxy reads the last hop of the message BASP deserialized last;
    // outside of that there is none.
    ptr->set_last_hop(nullptr);
    auto proxy = ptr->instance.proxies().get_or_put(hosts[server]->sys.node(),
                                                    aid);
    return caf::actor_cast<caf::actor>(proxy);
  }

  caf::io::accept_handle accept_hdl(int server, std::uint16_t port) {
    return caf::io::accept_handle::from_int(server * 100000 + port);
  }

  template <class State, class Handle>
  State& state_of(const Handle& h) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(h);
    return dynamic_cast<caf::stateful_actor<State, typename Handle::base>&>(
             *ptr)
      .state;
  }

  router_state& router_of(const router_actor& b) {
    return state_of<router_state>(b);
  }

  member_state& member_of(const caf::actor& m) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(m);
    return dynamic_cast<member_actor&>(*ptr).state;
  }

  /// True while `x` runs.
  static bool alive(const caf::actor& x) {
    auto ptr = caf::actor_cast<caf::abstract_actor*>(x);
    return ptr != nullptr
      && !ptr->getf(caf::abstract_actor::is_terminated_flag);
  }

  template <class Handle>
  static bool alive(const Handle& x) {
    return alive(caf::actor_cast<caf::actor>(x));
  }

  /// Publishes a delta on `topic` through router `b` of planet `i`, as node
  /// `sender`'s member would.
  void publish_delta(int i, const router_actor& b, const std::string& topic,
                     std::uint32_t sender, std::int64_t env_step = 0) {
    context_delta d;
    d.sender = sender;
    d.env_step = env_step;
    hosts[i]->driver->send(b, publish_atom::value, topic, sender,
                           caf::make_message(topic, d));
    exec_all();
  }

  std::vector<std::unique_ptr<planet>> hosts;
  std::vector<std::pair<int, caf::actor>> actors;
  std::int64_t hdl_ = 0;
};

} // namespace dice::test
