// remote_bench snapshot: the learner publishes model snapshots to N
// collector processes and times each round until every collector acked
// (through dice, or with --ack socket a datagram each: ack_socket.cpp).

#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "net/data_plane.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "remote_bench.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace dice::bench::remote {

int snapshot_main(int argc, char** argv) {
  auto n = num("collectors", 1);
  auto size = num("size", 6'800'000);
  auto rounds = num("rounds", 10);
  auto path = arg("path", "data");
  auto ack = arg("ack", "dice");
  if (ack != "dice" && ack != "socket") {
    std::fprintf(stderr, "remote_bench: --ack is dice or socket\n");
    return 1;
  }
  std::optional<ack_receiver> side_acks;
  std::vector<std::string> extra{"--path", path};
  if (ack == "socket") {
    side_acks.emplace();
    if (side_acks->port() == 0)
      return 1;
    extra.push_back("--ack-port");
    extra.push_back(std::to_string(side_acks->port()));
  }
  config cfg;
  caf::actor_system sys{cfg};
  // The learner is a dice node listening on an ephemeral port.
  auto dn = start_node(sys, 0, true, path);
  if (!dn)
    return 1;
  auto router = dn->router();
  caf::scoped_actor self{sys};
  self->send(router, dice::join_atom::value, std::uint32_t{0}, dice::role_set{},
             caf::actor{self}, std::vector<std::string>{"ack"});
  self->receive([](const std::vector<dice::finish>&) {});
  auto started = start_collectors(self, router, argc, argv, extra, n,
                                  dn->port());
  if (!started)
    return 2;
  auto pids = std::move(*started);
  // Every data connection is up before the first round.
  if (auto& dp = dn->data_plane())
    for (long i = 0; i < n; ++i)
      if (!dp->wait_sendable(static_cast<std::uint32_t>(i + 1), 10s)) {
        stop_all(pids);
        return 5;
      }
  auto x = make_snapshot(size);
  std::vector<double> times;
  auto stats0 = dice::net::data_stats();
  auto tcp0 = tcp_bytes();
  for (long r = 0; r < rounds + 2; ++r) {
    x.version = r + 1;
    auto t0 = clk::now();
    self->send(router, dice::publish_atom::value, std::string{"model"},
               std::uint32_t{0}, caf::make_message(std::string{"model"}, x));
    if (side_acks) {
      if (!side_acks->wait(static_cast<std::uint64_t>(x.version), n, 30s)) {
        stop_all(pids);
        return 3;
      }
      if (r >= 2) // two warm-up rounds
        times.push_back(secs(clk::now() - t0));
      continue;
    }
    long acks = 0;
    while (acks < n) {
      bool timeout = false;
      self->receive(
        [&](const std::string&, const dice::context_delta& d) {
          if (d.seq == static_cast<std::uint64_t>(x.version))
            ++acks;
        },
        caf::after(30s) >>
          [&] {
            timeout = true;
          });
      if (timeout) {
        stop_all(pids);
        return 3;
      }
    }
    if (r >= 2) // two warm-up rounds
      times.push_back(secs(clk::now() - t0));
  }
  // Every collector acked the last round: its bytes are acked by now too.
  auto tcp1 = tcp_bytes();
  stop_all(pids);
  auto stats1 = dice::net::data_stats();
  // Per collector and round, both directions (the acks come back).
  auto per = static_cast<double>(n * (rounds + 2));
  std::sort(times.begin(), times.end());
  auto med = times[times.size() / 2];
  print_json({{"mode", "snapshot"},
              {"path", path},
              {"ack", ack},
              {"tls", !tls_dir.empty()},
              {"collectors", n},
              {"size", size},
              {"round_s", med},
              {"bytes_per_s", static_cast<double>(size) * n / med},
              {"data_transfers", stats1.transfers_sent - stats0.transfers_sent},
              {"shm_transfers", stats1.shm_sent - stats0.shm_sent},
              {"fallbacks", stats1.fallbacks - stats0.fallbacks},
              {"socket_bytes_out_per_collector_round",
               static_cast<double>(tcp1.sent - tcp0.sent) / per},
              {"socket_bytes_in_per_collector_round",
               static_cast<double>(tcp1.received - tcp0.received) / per}});
  dn->stop();
  return 0;
}

} // namespace dice::bench::remote
