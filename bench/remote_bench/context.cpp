// remote_bench context: N collector processes stream context deltas to the
// learner, which counts transitions per second.

#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/payload.hpp"

#include "caf/actor_system.hpp"
#include "caf/io/middleman.hpp"
#include "caf/scoped_actor.hpp"

#include "remote_bench.hpp"

#include <string>
#include <vector>

namespace dice::bench::remote {

int context_main(int argc, char** argv) {
  auto n = num(argc, argv, "collectors", 3);
  auto obs = num(argc, argv, "obs", 4);
  auto seconds = std::stod(arg(argc, argv, "seconds", "3"));
  config cfg;
  caf::actor_system sys{cfg};
  dice::router_config bc;
  bc.node = 0;
  auto router = sys.spawn(dice::router_behavior, bc);
  auto port = sys.middleman().publish(router, 0, "127.0.0.1");
  if (!port)
    return 1;
  caf::scoped_actor self{sys};
  auto topic = std::string{"context_exchanger_collector"};
  self->send(router, dice::join_atom::value, std::uint32_t{0}, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{topic});
  self->receive([](const std::vector<dice::finish>&) {});
  auto started = start_collectors(self, router, argc, argv,
                                  {"--mode", "context"}, n, *port);
  if (!started)
    return 2;
  auto pids = std::move(*started);
  std::uint64_t transitions = 0;
  std::uint64_t bytes = 0;
  auto ack = std::string{"ack"};
  auto handle = [&](const std::string&, const dice::context_delta& d) {
    transitions += dice::item_count(d.trajectories);
    for (auto& p : d.trajectories)
      bytes += p.bytes.size();
    dice::context_delta a;
    a.sender = d.sender;
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
  self->send_exit(router, caf::exit_reason::user_shutdown);
  return 0;
}

} // namespace dice::bench::remote
