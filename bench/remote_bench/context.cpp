// remote_bench context: N collector processes stream context deltas to the
// learner, which counts transitions per second.

#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/payload.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "remote_bench.hpp"

#include <string>
#include <vector>

namespace dice::bench::remote {

int context_main(int argc, char** argv) {
  auto n = num(argc, argv, "collectors", 3);
  auto obs = num(argc, argv, "obs", 4);
  auto seconds = std::stod(arg(argc, argv, "seconds", "3"));
  auto path = arg(argc, argv, "path", "data");
  config cfg;
  caf::actor_system sys{cfg};
  // The learner listens as in the snapshot mode: behind dice's preamble
  // (collectors dial with it and refuse anything else).
  auto dn = start_node(sys, 0, true, path);
  if (!dn)
    return 1;
  auto router = dn->router();
  caf::scoped_actor self{sys};
  auto topic = std::string{"context_exchanger_collector"};
  self->send(router, dice::join_atom::value, std::uint32_t{0}, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{topic});
  self->receive([](const std::vector<dice::finish>&) {});
  auto started = start_collectors(self, router, argc, argv,
                                  {"--mode", "context", "--path", path}, n,
                                  dn->port());
  if (!started)
    return 2;
  auto pids = std::move(*started);
  std::uint64_t transitions = 0;
  std::uint64_t bytes = 0;
  auto handle = [&](const std::string&, const dice::context_delta& d) {
    transitions += dice::item_count(d.trajectories);
    for (auto& p : d.trajectories)
      bytes += p.bytes.size();
    // Each collector has its own ack topic: a message names the node that
    // publishes it (the router drops one naming another as forged).
    auto ack = "ack" + std::to_string(d.sender);
    dice::context_delta a;
    a.sender = 0;
    a.seq = d.seq;
    self->send(router, dice::publish_atom::value, ack, std::uint32_t{0},
               caf::make_message(ack, a));
  };
  // Warm-up, then count.
  auto warm = clk::now() + 500ms;
  while (clk::now() < warm)
    self->receive(
      handle, caf::after(1s) >> [] {});
  transitions = 0;
  bytes = 0;
  auto t0 = clk::now();
  auto end = t0
    + std::chrono::duration_cast<clk::duration>(
               std::chrono::duration<double>(seconds));
  while (clk::now() < end)
    self->receive(
      handle, caf::after(1s) >> [] {});
  auto dt = secs(clk::now() - t0);
  stop_all(pids);
  print_json({{"mode", "context"},
              {"collectors", n},
              {"obs", obs},
              {"transitions_per_s", static_cast<double>(transitions) / dt},
              {"bytes_per_s", static_cast<double>(bytes) / dt}});
  dn->stop();
  return 0;
}

} // namespace dice::bench::remote
