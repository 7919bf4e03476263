// remote_bench collector: the learner's peer process in the snapshot and
// context modes.

#include "dice/actors/router.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/payload.hpp"
#include "net/data_plane.hpp"

#include "caf/actor_system.hpp"
#include "caf/event_based_actor.hpp"
#include "caf/scoped_actor.hpp"

#include "remote_bench.hpp"
#include <unistd.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace dice::bench::remote {

namespace {

// Reads one byte of every 4 KiB page of `x`, so bytes that arrive as a
// mapping pay their deferred page faults inside the round, like a copy
// pays its own; every path is timed with this touch. The sum goes to
// `touched` so that the reads are not optimized away.
volatile std::uint64_t touched = 0;

std::uint64_t touch_pages(const dice::shared_bytes& x) {
  constexpr std::size_t page = 4096;
  std::uint64_t sum = 0;
  for (std::size_t at = 0; at < x.size(); at += page)
    sum += x.data()[at];
  return sum;
}

// The member that answers each snapshot with an ack on "ack" (seq: the
// snapshot's version; with `checksum`, the bytes' checksum in `base`, which
// the relay mode compares with the learner's).
// With `ack_fd` >= 0 (--ack socket) the ack is a datagram on it instead.
caf::actor spawn_acker(caf::actor_system& sys, const dice::router_actor& router,
                       std::uint32_t node, bool checksum, int ack_fd = -1) {
  auto ack_topic = std::string{"ack"};
  return sys.spawn([=](caf::event_based_actor* me) -> caf::behavior {
    return {[](const dice::peer_event&) {},
            [=](const std::string&, const dice::model_snapshot& x) {
              touched = touch_pages(x.data);
              if (ack_fd >= 0) {
                send_ack(ack_fd, node, static_cast<std::uint64_t>(x.version));
                return;
              }
              dice::context_delta d;
              d.sender = node;
              d.seq = static_cast<std::uint64_t>(x.version);
              if (checksum)
                d.base = dice::checksum64(x.data.data(), x.data.size());
              me->send(router, dice::publish_atom::value, ack_topic, node,
                       caf::make_message(ack_topic, d));
            }};
  });
}

// A collector of `remote_bench relay`: attaches to the learner and to the
// collectors before it (--peers), waits until every other node of the
// mesh is its peer with a data connection up, then subscribes and says
// ready (an ack with seq 0). Each snapshot is acked with its version and
// the checksum of the bytes it loaded (in `base`).
int mesh_collector(caf::actor_system& sys, dice::node& dn) {
  auto node = dn.id();
  auto n = static_cast<std::uint32_t>(num("collectors", 1));
  auto router = dn.router();
  caf::scoped_actor self{sys};
  auto attach = [&](long peer, std::uint16_t port) {
    self->send(router, dice::attach_atom::value, relay_host(peer), port);
  };
  attach(0, static_cast<std::uint16_t>(num("port", 0)));
  // --peers: the ports of collectors 1, 2, .. (those started before it).
  auto peers = arg("peers", "");
  long peer = 1;
  for (std::size_t at = 0; at < peers.size(); ++peer) {
    auto end = peers.find(',', at);
    if (end == std::string::npos)
      end = peers.size();
    attach(peer,
           static_cast<std::uint16_t>(std::stoul(peers.substr(at, end - at))));
    at = end + 1;
  }
  bool ok = true;
  self->request(router, 60s, dice::peers_atom::value, n)
    .receive([](std::uint32_t) {},
             [&](caf::error&) {
               ok = false;
             });
  for (std::uint32_t i = 0; ok && i <= n; ++i)
    if (i != node && !dn.data_plane()->wait_sendable(i, 30s))
      ok = false;
  if (!ok)
    _exit(2);
  auto ack_topic = std::string{"ack"};
  auto member = spawn_acker(sys, router, node, true);
  self->send(router, dice::join_atom::value, node, dice::role_set{}, member,
             std::vector<std::string>{"model"});
  self->receive([](const std::vector<dice::finish>&) {});
  dice::context_delta ready;
  ready.sender = node;
  ready.seq = 0;
  self->send(router, dice::publish_atom::value, ack_topic, node,
             caf::make_message(ack_topic, ready));
  for (;;)
    std::this_thread::sleep_for(1h); // until the learner's SIGTERM
}

} // namespace

// A collector node: answers each snapshot with an ack, or streams context.
int collector_main() {
  config cfg;
  caf::actor_system sys{cfg};
  auto node = static_cast<std::uint32_t>(num("node", 1));
  auto mode = arg("mode", "snapshot");
  auto mesh = num("mesh", 0) != 0;
  std::optional<dice::node> dn;
  if (mesh) {
    // In a mesh the collector listens too: its "listening on" line tells
    // the learner its port.
    auto nc = node_settings(node, true, "data");
    nc.topo = dice::topology::mesh;
    nc.host = relay_host(node);
    nc.insecure = !arg("hosts", "").empty(); // namespaces of their own
    if (auto n = dice::node::start(sys, nc)) {
      dn = std::move(*n);
      dn->data_plane()->set_same_host(false);
    }
  } else {
    dn = start_node(sys, node, false, arg("path", "data"));
  }
  if (!dn)
    _exit(4);
  auto router = dn->router();
  caf::scoped_actor self{sys};
  auto ack_topic = std::string{"ack"};
  if (mode == "snapshot" && mesh)
    return mesh_collector(sys, *dn);
  if (mode == "snapshot") {
    auto ack_fd = -1;
    if (auto p = num("ack-port", 0);
        p > 0 && (ack_fd = ack_sender(static_cast<std::uint16_t>(p))) < 0)
      _exit(4);
    auto member = spawn_acker(sys, router, node, false, ack_fd);
    self->send(router, dice::join_atom::value, node, dice::role_set{}, member,
               std::vector<std::string>{"model"});
    self->receive([](const std::vector<dice::finish>&) {});
    self->send(router, dice::attach_atom::value, std::string{"127.0.0.1"},
               static_cast<std::uint16_t>(num("port", 0)));
    for (;;)
      std::this_thread::sleep_for(1h); // until the learner's SIGTERM
  }
  // context: stream deltas of `batch` transitions, at most `window` in
  // flight (the learner acks each delta on "ack<node>").
  auto obs = num("obs", 4);
  auto batch = num("batch", 1000);
  // dice's own window by default (context_exchanger_options).
  auto window = num(
    "window",
    static_cast<long>(dice::context_exchanger_options{}.max_in_flight));
  // One transition: obs, next_obs, action, reward, done as floats.
  std::vector<float> items(static_cast<std::size_t>(batch * (2 * obs + 3)),
                           0.5f);
  auto p = dice::pack(items, node);
  p.count = static_cast<std::uint64_t>(batch);
  self->send(router, dice::join_atom::value, node, dice::role_set{},
             caf::actor{self},
             std::vector<std::string>{ack_topic + std::to_string(node)});
  self->receive([](const std::vector<dice::finish>&) {});
  self->send(router, dice::attach_atom::value, std::string{"127.0.0.1"},
             static_cast<std::uint16_t>(num("port", 0)));
  self->request(router, 30s, dice::peers_atom::value, std::uint32_t{1})
    .receive([](std::uint32_t) {},
             [](caf::error&) {
               _exit(2);
             });
  auto topic = std::string{"context_exchanger_collector"};
  std::uint64_t seq = 0;
  long in_flight = 0;
  for (;;) {
    while (in_flight < window) {
      dice::context_delta d;
      d.sender = node;
      d.seq = ++seq;
      d.env_step = batch;
      // The send time (CLOCK_MONOTONIC, one clock for every process of a
      // host; a collector here never trains): the learner's latency.
      d.train_iter = std::chrono::duration_cast<std::chrono::nanoseconds>(
                       std::chrono::steady_clock::now().time_since_epoch())
                       .count();
      d.trajectories = {p};
      self->send(router, dice::publish_atom::value, topic, node,
                 caf::make_message(topic, std::move(d)));
      ++in_flight;
    }
    self->receive([&](const std::string&, const dice::context_delta&) {
      --in_flight;
    });
  }
}

} // namespace dice::bench::remote
