// remote_bench context: N collector processes stream context deltas to the
// learner, which counts transitions per second and times each delta from
// its collector's send to its arrival (latency_p50_us / latency_p99_us).

#include "dice/actors/router.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/payload.hpp"

#include "caf/actor_system.hpp"
#include "caf/scoped_actor.hpp"

#include "remote_bench.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dice::bench::remote {

int context_main(int argc, char** argv) {
  auto n = num("collectors", 3);
  auto obs = num("obs", 4);
  auto seconds = given.real("seconds", 3);
  auto path = arg("path", "data");
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
  // The learner is an event-based actor, as a learner's role actor is (a
  // blocking scoped actor added a thread wake-up to every delta): it counts
  // transitions from `counting` on and acks each delta on its collector's
  // own topic (a message names the node that publishes it; the router drops
  // one naming another as forged).
  struct tally {
    std::atomic<std::uint64_t> transitions{0};
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<bool> counting{false};
    // Per delta, from the collector's send (train_iter) to the learner.
    std::mutex mtx;
    std::vector<double> latency_us;
  };
  auto t = std::make_shared<tally>();
  auto learner = sys.spawn([t, router](caf::event_based_actor* me) {
    return caf::behavior{
      [t, router, me](const std::string&, const dice::context_delta& d) {
        if (t->counting) {
          t->transitions += dice::item_count(d.trajectories);
          for (auto& p : d.trajectories)
            t->bytes += p.bytes.size();
          if (d.train_iter) {
            auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         clk::now().time_since_epoch())
                         .count();
            std::lock_guard<std::mutex> guard{t->mtx};
            t->latency_us.push_back(static_cast<double>(now - *d.train_iter)
                                    / 1e3);
          }
        }
        auto ack = "ack" + std::to_string(d.sender);
        dice::context_delta a;
        a.sender = 0;
        a.seq = d.seq;
        me->send(router, dice::publish_atom::value, ack, std::uint32_t{0},
                 caf::make_message(ack, a));
      },
      [](const std::vector<dice::finish>&) {},
    };
  });
  self->send(router, dice::join_atom::value, std::uint32_t{0}, dice::role_set{},
             learner, std::vector<std::string>{topic});
  auto started = start_collectors(self, router, argc, argv,
                                  {"--mode", "context", "--path", path}, n,
                                  dn->port());
  if (!started)
    return 2;
  auto pids = std::move(*started);
  // Warm-up, then count.
  std::this_thread::sleep_for(500ms);
  t->counting = true;
  auto t0 = clk::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  t->counting = false;
  auto dt = secs(clk::now() - t0);
  auto transitions = t->transitions.load();
  auto bytes = t->bytes.load();
  auto rs = dice::router_stats();
  std::vector<double> lat;
  {
    std::lock_guard<std::mutex> guard{t->mtx};
    lat = t->latency_us;
  }
  std::sort(lat.begin(), lat.end());
  auto pct = [&lat](double q) {
    return lat.empty()
      ? 0.0
      : lat[static_cast<std::size_t>(q * static_cast<double>(lat.size() - 1))];
  };
  stop_all(pids);
  caf::anon_send_exit(learner, caf::exit_reason::user_shutdown);
  print_json({{"mode", "context"},
              {"collectors", n},
              {"obs", obs},
              {"transitions_per_s", static_cast<double>(transitions) / dt},
              {"bytes_per_s", static_cast<double>(bytes) / dt},
              {"latency_p50_us", pct(0.5)},
              {"latency_p99_us", pct(0.99)},
              {"latency_samples", lat.size()},
              {"batches_received", rs.batches_received},
              {"acks_batched", rs.forwards_batched}});
  dn->stop();
  return 0;
}

} // namespace dice::bench::remote
