// remote_bench publisher: a snapshot source for the same-host process tests.

#include "dice/actors/router.hpp"
#include "net/data_plane.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "remote_bench.hpp"
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace dice::bench::remote {

// A node that attaches to --port and publishes snapshots of --size bytes on
// "model" until killed, printing "sent V" after each (the same-host tests
// kill it with -9 in the middle).
int publisher_main() {
  config cfg;
  caf::actor_system sys{cfg};
  auto node = static_cast<std::uint32_t>(num("node", 1));
  auto path = arg("path", "shm");
  auto dn = start_node(sys, node, false, path);
  if (!dn)
    return 4;
  auto router = dn->router();
  caf::scoped_actor self{sys};
  self->send(router, dice::join_atom::value, node, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{});
  self->receive([](const std::vector<dice::finish>&) {});
  self->send(router, dice::attach_atom::value, std::string{"127.0.0.1"},
             static_cast<std::uint16_t>(num("port", 0)));
  self->request(router, 30s, dice::peers_atom::value, std::uint32_t{1})
    .receive([](std::uint32_t) {},
             [](caf::error&) {
               _exit(2);
             });
  auto& dp = dn->data_plane();
  if (dp && path == "shm" && !dp->wait_same_host(0, 10s))
    _exit(3);
  auto x = make_snapshot(num("size", 6'800'000));
  x.sender = node; // peers refuse a snapshot that names another node
  for (std::int64_t v = 1;; ++v) {
    x.version = v;
    self->send(router, dice::publish_atom::value, std::string{"model"}, node,
               caf::make_message(std::string{"model"}, x));
    std::printf("sent %lld\n", static_cast<long long>(v));
    std::fflush(stdout);
    // Paced by the receiver's acks would need a topic; a short pause
    // keeps the queue from growing without bound.
    self->receive(caf::after(std::chrono::milliseconds{20}) >> [] {});
  }
}

} // namespace dice::bench::remote
