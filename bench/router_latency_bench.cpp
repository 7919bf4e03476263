// How long a message takes through the router while learners train (issue 10,
// item 4). Two role actors run real DQN gradient steps (LibTorch, the demo's
// Q-network and replay buffer) back to back; a pinger and a ponger role
// actor bounce a context delta through the router and time each round trip.
// The router, pinger and ponger always run on CAF's worker pool.
// Configurations, run in one process in interleaved rounds: no trainers
// (the baseline), trainers on the pool too (role actors not detached: dice
// before issue 10), trainers on their own threads at the pool's priority
// (before issue 25), and trainers on their own threads at nice
// +default_role_nice (now): the kernel then runs a woken pool worker at
// once instead of letting a trainer finish its slice. The pool has as many
// workers as there are trainers, as on a 2-core machine, whatever this
// machine has.
//
// Prints one JSON object (bench/run reads it):
//   {"idle": {...}, "pool": {...}, "detached_plain": {...}, ...,
//    "detached": {...}} with, per configuration, the
//   round trips' p50/p99/max in microseconds and the trainers' updates/s.

#include "dice/actors/scheduling.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/rl/dqn.hpp"
#include "dice/runtime/local_cluster.hpp"
#include "dice/type_ids.hpp"

#include "caf/actor_system.hpp"
#include "caf/actor_system_config.hpp"
#include "caf/make_message.hpp"

#include "bench_options.hpp"
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

constexpr int trainers = 2;

struct bench_config : caf::actor_system_config {
  bench_config() {
    set("logger.verbosity", caf::atom("quiet"));
    set("scheduler.max-threads", trainers);
    dice::add_message_types(*this);
  }
};

// One configuration of the scheduling under test.
struct variant {
  const char* name;
  int trainers;
  bool detached;
  int role_nice;
};

// What one configuration measured over all its rounds.
struct totals {
  std::vector<double> rtt_us;
  int lost = 0;
  long updates = 0;
  double seconds = 0;
};

// A learner-like stage: `updates` DQN gradient steps per iteration, on a
// buffer filled with random transitions (what a step costs does not depend
// on what it learns), then a short wait.
dice::middleware trainer(int updates, std::shared_ptr<std::atomic<long>> done) {
  struct state {
    std::unique_ptr<dice::rl::dqn_learner> learner;
  };
  auto st = std::make_shared<state>();
  dice::middleware m;
  m.name = "trainer";
  m.attach = [st](dice::node_services&) {
    dice::rl::dqn_options cfg;
    st->learner = std::make_unique<dice::rl::dqn_learner>(
      dice::rl::q_network{4, 2, cfg.hidden}, cfg, 1);
    dice::rl::transition_batch b;
    b.obs_dim = 4;
    std::mt19937_64 rng{7};
    std::uniform_real_distribution<float> u{-1.f, 1.f};
    for (int i = 0; i < 2000; ++i) {
      for (int k = 0; k < 4; ++k) {
        b.obs.push_back(u(rng));
        b.next_obs.push_back(u(rng));
      }
      b.action.push_back(i % 2);
      b.reward.push_back(1.f);
      b.discount.push_back(0.97f);
    }
    if (auto err = st->learner->add(b))
      dice::log::error(0, "trainer: " + dice::render(err));
  };
  m.before = [st, updates, done](dice::context&) -> dice::step {
    for (int i = 0; i < updates; ++i)
      st->learner->update();
    *done += updates;
    // A pause of 1 ms between iterations, as a learner waiting for its
    // next data would make: it returns the actor to its mailbox. (An actor
    // whose mailbox is never empty keeps its worker for good under CAF
    // 0.17's default unlimited max-throughput.)
    return dice::wait_for{[] {
                            return false;
                          },
                          1ms,
                          [](dice::context&, dice::wait_outcome) {
                            return dice::proceed;
                          }};
  };
  return m;
}

// Answers every ping with a pong; waits (handling messages) otherwise.
dice::middleware ponger() {
  auto svc = std::make_shared<dice::node_services*>(nullptr);
  dice::middleware m;
  m.name = "ponger";
  m.attach = [svc](dice::node_services& s) {
    *svc = &s;
    s.on(dice::topic<dice::context_delta>{"ping"},
         [svc](const dice::context_delta& x) {
           auto d = x;
           d.sender = (*svc)->node_id();
           (*svc)->emit(dice::topic<dice::context_delta>{"pong"}, d);
         });
  };
  m.before = [](dice::context&) -> dice::step {
    return dice::wait_for{[] {
                            return false;
                          },
                          std::chrono::hours{1},
                          [](dice::context&, dice::wait_outcome) {
                            return dice::proceed;
                          }};
  };
  return m;
}

struct probe_result {
  std::vector<double> rtt_us;
  int lost = 0;
};

// Sends `n` pings, one every millisecond or so (after the previous pong),
// and times each round trip.
dice::middleware pinger(int n, std::shared_ptr<probe_result> out) {
  struct state {
    dice::node_services* svc = nullptr;
    std::uint64_t sent = 0;
    std::uint64_t got = 0;
    clock_type::time_point t0;
  };
  auto st = std::make_shared<state>();
  dice::middleware m;
  m.name = "pinger";
  m.attach = [st](dice::node_services& s) {
    st->svc = &s;
    s.on(dice::topic<dice::context_delta>{"pong"},
         [st](const dice::context_delta& x) {
           st->got = std::max(st->got, x.seq);
         });
  };
  m.before = [st, n, out](dice::context&) -> dice::step {
    if (st->sent >= static_cast<std::uint64_t>(n)) {
      st->svc->request_finish("probe done");
      return dice::proceed;
    }
    dice::context_delta d;
    d.sender = st->svc->node_id();
    d.seq = ++st->sent;
    d.env_step = 1;
    st->t0 = clock_type::now();
    st->svc->emit(dice::topic<dice::context_delta>{"ping"}, d);
    auto want = st->sent;
    auto gap = [](dice::context&, dice::wait_outcome) -> dice::step {
      return dice::wait_for{[] {
                              return false;
                            },
                            1ms,
                            [](dice::context&, dice::wait_outcome) {
                              return dice::proceed;
                            }};
    };
    return dice::wait_for{
      [st, want] {
        return st->got >= want;
      },
      2s,
      [st, out, gap](dice::context& ctx, dice::wait_outcome o) {
        if (o == dice::wait_outcome::ready)
          out->rtt_us.push_back(std::chrono::duration<double, std::micro>(
                                  clock_type::now() - st->t0)
                                  .count());
        else
          ++out->lost;
        return gap(ctx, o);
      }};
  };
  return m;
}

double percentile(std::vector<double> xs, double p) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto i = static_cast<std::size_t>(p * static_cast<double>(xs.size() - 1));
  return xs[i];
}

void run(const variant& v, int pings, int updates, totals& out) {
  bench_config cfg;
  caf::actor_system sys{cfg};
  auto probe = std::make_shared<probe_result>();
  auto done = std::make_shared<std::atomic<long>>(0);
  std::vector<dice::local_node> nodes;
  {
    dice::pipeline p;
    p.use(pinger(pings, probe));
    // The probes stay on the pool with the router: what they see is what
    // any actor on the pool sees.
    dice::local_node n{0, {dice::role::collector}, std::move(p), 0};
    n.detached = false;
    nodes.push_back(std::move(n));
  }
  {
    dice::pipeline p;
    p.use(ponger());
    dice::local_node n{1, {dice::role::evaluator}, std::move(p), 0};
    n.detached = false;
    nodes.push_back(std::move(n));
  }
  for (int i = 0; i < v.trainers; ++i) {
    dice::pipeline p;
    p.use(trainer(updates, done));
    nodes.push_back(dice::local_node{static_cast<std::uint32_t>(2 + i),
                                     {dice::role::learner},
                                     std::move(p),
                                     0});
  }
  dice::local_run_options opts;
  opts.print_reports = false;
  opts.deadline = std::chrono::minutes{5};
  opts.detached_roles = v.detached;
  opts.role_nice = v.role_nice;
  auto t0 = clock_type::now();
  auto reps = dice::run_local(sys, std::move(nodes), opts);
  auto secs = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (!reps) {
    std::cerr << "run failed: " << dice::render(reps.error()) << std::endl;
    std::exit(1);
  }
  out.rtt_us.insert(out.rtt_us.end(), probe->rtt_us.begin(),
                    probe->rtt_us.end());
  out.lost += probe->lost;
  out.updates += done->load();
  out.seconds += secs;
}

nlohmann::json summary(const totals& t) {
  return {{"p50_us", percentile(t.rtt_us, 0.5)},
          {"p99_us", percentile(t.rtt_us, 0.99)},
          {"max_us", percentile(t.rtt_us, 1.0)},
          {"round_trips", t.rtt_us.size()},
          {"lost", t.lost},
          {"updates_per_s", static_cast<double>(t.updates) / t.seconds},
          {"seconds", t.seconds}};
}

} // namespace

int main(int argc, char** argv) {
  using dice::bench::value_kind;
  auto parsed = dice::bench::parse_options(
    "router_latency_bench",
    "Round trips through the router while two learners train.",
    {{"quick", value_kind::flag,
      "100 round trips per configuration, not 1000 (CI)"},
     {"verbose", value_kind::flag, "dice's info logs"}},
    {}, argc, argv);
  if (auto* code = std::get_if<int>(&parsed))
    return *code;
  auto& given = std::get<dice::bench::option_values>(parsed);
  int pings = given.has("quick") ? 100 : 1000;
  bool verbose = given.has("verbose");
  // One trainer iteration: 8 gradient steps (about 5-20 ms here).
  int updates = 8;
  torch::set_num_threads(1);
  if (!verbose)
    dice::log::set_threshold(dice::log::level::error);
  nlohmann::json out;
  out["trainers"] = trainers;
  out["pool_workers"] = trainers;
  out["updates_per_iteration"] = updates;
  out["role_nice"] = dice::default_role_nice;
  const variant variants[] = {
    {"idle", 0, true, dice::default_role_nice},
    {"pool", trainers, false, 0},
    {"detached_plain", trainers, true, 0},
    {"detached", trainers, true, dice::default_role_nice},
  };
  // Rounds interleave the configurations, so that what else this machine
  // runs meanwhile weighs on each of them alike.
  int rounds = given.has("quick") ? 2 : 5;
  std::vector<totals> got(std::size(variants));
  for (int r = 0; r < rounds; ++r)
    for (std::size_t i = 0; i < std::size(variants); ++i)
      run(variants[i], pings / rounds, updates, got[i]);
  for (std::size_t i = 0; i < std::size(variants); ++i)
    out[variants[i].name] = summary(got[i]);
  std::cout << out.dump() << std::endl;
  return 0;
}
