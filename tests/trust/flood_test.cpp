// Flood: two collector processes that never wait for context send 256 KiB
// deltas as fast as they can to a learner process that takes 50 ms per
// iteration (a deadline wait, not a sleep), i.e. collectors far more than
// 10x faster than the learner. The collectors' windows must keep the
// learner's resident memory under a bound, and every transition must still
// arrive exactly once. The nodes are this test binary itself, run again with
// the disabled FloodNode test (DICE_FLOOD_ARGS holds the node's options).
//
// Knobs (environment): DICE_FLOOD_WINDOW (max_in_flight, default 8; 0 shows
// the unbounded DI-engine behaviour), DICE_FLOOD_RSS_MIB (allowed growth of
// the learner's RSS over its idle size, default 96).

#include "dice/core/errc.hpp"
#include "dice/exchangers/context_exchanger.hpp"
#include "dice/logging/log.hpp"
#include "dice/messages/payload.hpp"
#include "dice/runtime/node.hpp"
#include "dice/type_ids.hpp"

#include "support/child_process.hpp"
#include <boost/serialization/vector.hpp>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;
using clock_type = std::chrono::steady_clock;

constexpr std::int64_t items_per_delta = 32 * 1024; // 256 KiB of int64
constexpr std::int64_t learner_iterations = 100;

long env_long(const char* name, long fallback) {
  if (auto* x = std::getenv(name))
    return std::atol(x);
  return fallback;
}

long rss_kib(pid_t pid) {
  std::ifstream f{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0)
      return std::atol(line.c_str() + 6);
  return -1;
}

dice::middleware slow_learner(caf::timespan per_iteration) {
  dice::middleware m;
  m.name = "slow_learner";
  m.before = [per_iteration](dice::context&) -> dice::step {
    return dice::wait_for{[] {
                            return false;
                          },
                          per_iteration,
                          [](dice::context& ctx, dice::wait_outcome) {
                            ctx.train_iter += 1;
                            return dice::step{dice::proceed};
                          }};
  };
  return m;
}

dice::middleware fast_collector(std::uint32_t node) {
  dice::middleware m;
  m.name = "fast_collector";
  m.before = [node](dice::context& ctx) -> dice::step {
    std::vector<std::int64_t> xs(items_per_delta, ctx.total_step);
    ctx.trajectories = {dice::pack(xs, node)};
    ctx.trajectory_end_idx = {items_per_delta - 1};
    ctx.env_step += items_per_delta;
    ctx.env_episode += 1;
    return dice::proceed;
  };
  return m;
}

// Not a test: the body of one flood node, run by the test below in a child
// process of this binary.
TEST(FloodNode, DISABLED_Run) {
  auto* raw = std::getenv("DICE_FLOOD_ARGS");
  if (raw == nullptr)
    GTEST_SKIP() << "only run as a child of Flood tests";
  std::vector<std::string> args{"flood_node"};
  std::istringstream in{raw};
  for (std::string a; in >> a;)
    args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  dice::node_system_config cfg;
  ASSERT_FALSE(cfg.parse(static_cast<int>(argv.size()), argv.data()));
  caf::actor_system sys{cfg};
  auto ncfg = dice::make_node_config(cfg);
  ASSERT_TRUE(ncfg) << dice::render(ncfg.error());
  auto node = dice::node::start(sys, *ncfg);
  ASSERT_TRUE(node) << dice::render(node.error());
  auto stats = std::make_shared<dice::context_exchange_stats>();
  dice::context_exchanger_options opts;
  opts.max_in_flight = static_cast<std::size_t>(
    env_long("DICE_FLOOD_WINDOW", 8));
  opts.skip_n_iter = std::int64_t{1} << 40; // collectors never wait
  opts.stats = stats;
  dice::pipeline p;
  p.use(dice::context_exchanger(opts));
  dice::node_run_options ropts;
  ropts.deadline = std::chrono::seconds{60};
  if (node->roles().has(dice::role::learner)) {
    p.use(slow_learner(std::chrono::milliseconds{50}));
    ropts.max_step = learner_iterations;
  } else {
    p.use(fast_collector(node->id()));
  }
  auto rep = node->run(std::move(p), ropts);
  node->stop();
  ASSERT_TRUE(rep) << dice::render(rep.error());
  std::cout << "flood_stats node " << node->id() << " buffered_peak "
            << stats->buffered_peak << " buffered_bytes_peak "
            << stats->buffered_bytes_peak << " window_waits "
            << stats->window_waits << " window_wait_ms "
            << stats->window_wait_ns / 1'000'000 << " resent "
            << stats->deltas_resent << std::endl;
}

std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

child_process flood_node(const std::string& args) {
  return child_process{{self_exe(), "--gtest_also_run_disabled_tests",
                        "--gtest_filter=FloodNode.DISABLED_Run"},
                       {"DICE_FLOOD_ARGS=" + args}};
}

TEST(Flood, CollectorWindowsBoundMemory) {
  auto bound_kib = env_long("DICE_FLOOD_RSS_MIB", 96) * 1024;
  auto common = std::string{" --dice.workers=3 --dice.topology=star"
                            " --dice.host=127.0.0.1"
                            " --dice.peer-loss-timeout=20s"};
  auto learner = flood_node("--dice.node-id=0" + common);
  std::smatch m;
  ASSERT_TRUE(learner.wait_for(
    std::regex{"dice-node 0 listening on port ([0-9]+)"}, 30s, &m))
    << learner.text();
  auto idle = rss_kib(learner.pid());
  auto attach = " --dice.attach-to=127.0.0.1:" + m[1].str()
    + " --dice.roles=collector";
  auto c1 = flood_node("--dice.node-id=1" + common + attach);
  auto c2 = flood_node("--dice.node-id=2" + common + attach);
  // Sample every node every 100 ms until the learner exits (reading its
  // output is the bounded wait between samples). Without windows the
  // backlog piles up in the collectors' send queues, so they are bounded too.
  auto deadline = clock_type::now() + 30s;
  long peak = idle;
  long c_peak = -1;
  const std::regex nothing{"(?!x)x"};
  while (clock_type::now() < deadline) {
    auto rss = rss_kib(learner.pid());
    if (rss > 0)
      peak = std::max(peak, rss);
    for (auto* c : {&c1, &c2})
      c_peak = std::max(c_peak, rss_kib(c->pid()));
    if (learner.wait_exit(100ms))
      break;
    c1.wait_for(nothing, 0ms);
    c2.wait_for(nothing, 0ms);
  }
  std::cout << "flood: learner RSS idle " << idle << " KiB, peak " << peak
            << " KiB (bound +" << bound_kib << " KiB)" << std::endl;
  // The collectors run this same binary: the idle learner is their baseline.
  std::cout << "flood: collector RSS peak " << c_peak << " KiB" << std::endl;
  EXPECT_LE(peak - idle, bound_kib)
    << "learner RSS grew by " << (peak - idle) << " KiB under the flood";
  EXPECT_LE(c_peak - idle, bound_kib)
    << "collector RSS grew by " << (c_peak - idle) << " KiB";
  auto rc = learner.wait_exit(0ms);
  ASSERT_TRUE(rc) << "the learner did not finish within 30 s\n"
                  << learner.text();
  EXPECT_EQ(*rc, 0) << learner.text();
  auto rc1 = c1.wait_exit(15s);
  auto rc2 = c2.wait_exit(15s);
  ASSERT_TRUE(rc1 && rc2) << c1.text() << c2.text();
  long produced = 0;
  for (auto* c : {&c1, &c2})
    for (auto& l : c->lines())
      if (l.find("\"stop_reason\"") != std::string::npos)
        produced += dice::test::json_int(l, "env_step");
  long received = -1;
  for (auto& l : learner.lines())
    if (l.find("\"stop_reason\"") != std::string::npos)
      received = dice::test::json_int(l, "trajectories_received");
  std::string stats;
  for (auto* c : {&learner, &c1, &c2})
    for (auto& l : c->lines())
      if (l.find("flood_stats") != std::string::npos)
        stats += l + "\n";
  std::cout << "flood: transitions produced " << produced << ", received "
            << received << "\n"
            << stats;
  EXPECT_GT(produced, 0);
  EXPECT_EQ(received, produced) << learner.text();
}

} // namespace
