// Clusters of real dice_exchange_probe processes, bounded in time: a learner
// killed and restarted under a waiting collector, two network namespaces
// joined by a veth pair (two hosts), SLURM's environment and fixed ports.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include "support/netns.hpp"
#include "support/secret_file.hpp"
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using dice::test::child_process;
using dice::test::json_int;
using dice::test::json_str;
using dice::test::netns_pair;
using clock_type = std::chrono::steady_clock;

using dice::test::bin_dir;

/// A node's JSON report line (the one with "stop_reason").
std::optional<std::string> report_line_of(const child_process& p, int node) {
  for (auto& l : p.lines())
    if (l.find("\"stop_reason\"") != std::string::npos
        && json_int(l, "node") == node)
      return l;
  return std::nullopt;
}

std::vector<std::string> hello(std::vector<std::string> args) {
  args.insert(args.begin(), bin_dir + "dice_exchange_probe");
  return args;
}

/// A port P such that P .. P+n-1 could all be bound on 127.0.0.1 just now
/// (the kernel picks P: no fixed port in the test).
std::uint16_t free_ports(int n) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::vector<int> fds;
    auto bind_one = [&](std::uint16_t port) -> std::uint16_t {
      int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0)
        return 0;
      fds.push_back(fd);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_ANY);
      addr.sin_port = htons(port);
      if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)
        return 0;
      socklen_t len = sizeof(addr);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      return ntohs(addr.sin_port);
    };
    auto base = bind_one(0);
    bool ok = base != 0 && base + n <= 65535;
    for (int k = 1; ok && k < n; ++k)
      ok = bind_one(static_cast<std::uint16_t>(base + k)) != 0;
    for (auto fd : fds)
      ::close(fd);
    if (ok)
      return base;
  }
  return 0;
}

// -- a learner killed and restarted ------------------------------------------

const std::regex trace_line{
  "collect iteration ([0-9]+) model_version (-?[0-9]+) train_iter ([0-9]+)"};

TEST(Reconnect, CollectorGetsTheRestartedLearnersModelFirst) {
  auto learner_args = [](std::vector<std::string> extra) {
    auto args = hello({"--dice.node-id=0", "--dice.workers=2",
                       "--dice.topology=star", "--dice.host=127.0.0.1",
                       "--dice.peer-loss-timeout=10s"});
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  std::optional<child_process> learner;
  learner.emplace(learner_args({"--steps=100000000"}));
  std::smatch m;
  ASSERT_TRUE(learner->wait_for(
    std::regex{"dice-node 0 listening on port ([0-9]+)"}, 20s, &m))
    << learner->text();
  auto port = m[1].str();
  child_process collector{
    hello({"--dice.node-id=1", "--dice.workers=2", "--dice.topology=star",
           "--dice.host=127.0.0.1", "--dice.peer-loss-timeout=10s",
           "--dice.attach-to=127.0.0.1:" + port, "--trace"})};
  // Mid-run: the collector acts with a model the first learner trained for
  // a while (version 40 or later).
  long old_version = 0;
  long old_iter = 0;
  while (old_version < 40) {
    ASSERT_TRUE(collector.wait_for(trace_line, 20s, &m)) << collector.text();
    old_version = std::stol(m[2]);
    old_iter = std::stol(m[3]);
  }
  learner->kill(SIGKILL);
  auto killed_at = clock_type::now();
  ASSERT_TRUE(learner->wait_exit(5s));
  ASSERT_TRUE(
    collector.wait_for(std::regex{"lost peer node 0 \\(learner\\)"}, 10s))
    << collector.text();
  std::cout
    << "collector noticed the dead learner after "
    << std::chrono::duration<double>(clock_type::now() - killed_at).count()
    << " s" << std::endl;
  // The new learner listens on the same port, starts from scratch and ends
  // the run after 30 iterations.
  learner.emplace(learner_args({"--steps=30", "--dice.port=" + port}));
  ASSERT_TRUE(
    learner->wait_for(std::regex{"dice-node 0 listening on port " + port}, 20s))
    << learner->text();
  auto restarted_at = clock_type::now();
  ASSERT_TRUE(collector.wait_for(
    std::regex{"connected to peer node 0 \\(learner\\)"}, 10s))
    << "the collector did not reconnect\n"
    << collector.text();
  auto reconnect = std::chrono::duration<double>(clock_type::now()
                                                 - restarted_at);
  std::cout << "collector reconnected " << reconnect.count()
            << " s after the restart" << std::endl;
  // Its next collection already uses the new learner's model (versions
  // start again at 0), not the dead learner's. The new learner's train_iter
  // arrives with that model; if the dead learner's last train_iter had
  // reached the collector just before the kill, it was merged first and the
  // new one is merged at the next iteration (the context exchanger merges
  // before the model exchanger waits).
  ASSERT_TRUE(collector.wait_for(trace_line, 10s, &m))
    << "the collector produced nothing within 10 s of the reconnect\n"
    << collector.text();
  auto first_version = std::stol(m[2]);
  auto first_iter = std::stol(m[3]);
  EXPECT_GE(first_version, 0) << collector.text();
  EXPECT_LT(first_version, old_version) << collector.text();
  EXPECT_TRUE(first_iter <= 30 || first_iter <= old_iter + 1)
    << collector.text();
  ASSERT_TRUE(collector.wait_for(trace_line, 10s, &m)) << collector.text();
  EXPECT_LE(std::stol(m[2]), 30) << collector.text();
  EXPECT_LE(std::stol(m[3]), 30) << collector.text();
  // Well before the collector's own 60 s model deadline.
  EXPECT_LT(
    std::chrono::duration<double>(clock_type::now() - restarted_at).count(),
    10.0);
  // The restarted learner says plainly what it does not hold: the deltas
  // below the collector's base were acknowledged by the dead learner (its
  // counters held them), so they are not in the new learner's.
  EXPECT_TRUE(learner->wait_for(
    std::regex{
      "first delta from node 1 \\(incarnation [0-9]+\\) is seq [0-9]+: "
      "its stream starts at seq [0-9]+; deltas 1\\.\\.[0-9]+ were "
      "acknowledged by an earlier learner or given up"},
    10s))
    << learner->text();
  auto rc = learner->wait_exit(30s);
  ASSERT_TRUE(rc) << learner->text();
  EXPECT_EQ(*rc, 0) << learner->text();
  auto crc = collector.wait_exit(10s);
  ASSERT_TRUE(crc) << collector.text();
  EXPECT_EQ(*crc, 0) << collector.text();
  auto rep = report_line_of(collector, 1);
  ASSERT_TRUE(rep) << collector.text();
  EXPECT_EQ(json_str(*rep, "stop_reason").find("error"), std::string::npos);
  EXPECT_LE(json_int(*rep, "train_iter"), 30) << *rep;
}

// -- two hosts: two network namespaces ----------------------------------------

TEST(TwoHosts, LearnerAndCollectorInTwoNetworkNamespaces) {
  // Declared first: destroyed last, after the processes inside it.
  netns_pair ns;
  if (!ns.ok())
    GTEST_SKIP() << "cannot build two hosts: " << ns.why();
  // Beyond loopback a node needs the cluster secret (or TLS) to start.
  dice::test::secret_file secret;
  child_process learner{ns.exec_in(
    0,
    hello({"--dice.node-id=0", "--dice.workers=2", "--dice.topology=star",
           "--dice.host=198.18.0.1", secret.flag(),
           "--dice.peer-loss-timeout=10s", "--steps=20"}))};
  std::smatch m;
  ASSERT_TRUE(learner.wait_for(
    std::regex{"dice-node 0 listening on port ([0-9]+)"}, 20s, &m))
    << learner.text();
  auto peer = "198.18.0.1:" + m[1].str();
  child_process collector{ns.exec_in(
    1,
    hello({"--dice.node-id=1", "--dice.workers=2", "--dice.topology=star",
           secret.flag(), "--dice.peer-loss-timeout=10s",
           "--dice.attach-to=" + peer}))};
  auto rc = learner.wait_exit(30s);
  ASSERT_TRUE(rc) << learner.text() << collector.text();
  EXPECT_EQ(*rc, 0) << learner.text();
  auto crc = collector.wait_exit(10s);
  ASSERT_TRUE(crc) << collector.text();
  EXPECT_EQ(*crc, 0) << collector.text();
  auto lrep = report_line_of(learner, 0);
  auto crep = report_line_of(collector, 1);
  ASSERT_TRUE(lrep && crep) << learner.text() << collector.text();
  EXPECT_EQ(json_int(*lrep, "train_iter"), 20) << *lrep;
  EXPECT_GT(json_int(*crep, "env_step"), 0) << *crep;
  EXPECT_EQ(json_int(*lrep, "env_step"), json_int(*crep, "env_step"));
  EXPECT_GT(json_int(*crep, "models_loaded"), 0) << *crep;
}

// -- SLURM and fixed ports
// -----------------------------------------------------

TEST(Slurm, SrunEnvironmentFormsAClusterOnTheGivenPort) {
  auto base = free_ports(3);
  ASSERT_NE(base, 0) << "no three free ports in a row";
  // What srun sets for 3 tasks on one host; --dice.port is the base port.
  // Tasks listen on every interface, so they share a secret, as a user's
  // srun would.
  dice::test::secret_file secret;
  std::vector<std::unique_ptr<child_process>> tasks;
  for (int i = 0; i < 3; ++i)
    tasks.push_back(std::make_unique<child_process>(
      hello({"--steps=20", "--dice.port=" + std::to_string(base), secret.flag(),
             "--dice.peer-loss-timeout=10s"}),
      std::vector<std::string>{
        "SLURM_PROCID=" + std::to_string(i),
        "SLURM_LOCALID=" + std::to_string(i), "SLURM_NTASKS=3",
        "SLURM_NNODES=1", "SLURM_NODEID=0", "SLURM_NODELIST=localhost",
        "SLURM_JOB_NODELIST=localhost", "SLURM_TASKS_PER_NODE=3"}));
  for (int i = 0; i < 3; ++i) {
    auto rc = tasks[i]->wait_exit(30s);
    ASSERT_TRUE(rc) << "task " << i << " did not end\n" << tasks[i]->text();
    EXPECT_EQ(*rc, 0) << tasks[i]->text();
    // Task i is node i on port base + i.
    EXPECT_TRUE(tasks[i]->wait_for(std::regex{"dice-node " + std::to_string(i)
                                              + " listening on port "
                                              + std::to_string(base + i) + "$"},
                                   0ms))
      << tasks[i]->text();
  }
  // Mesh by default: the learner had both peers before it started.
  EXPECT_TRUE(tasks[0]->wait_for(std::regex{"2 peer\\(s\\) connected"}, 0ms))
    << tasks[0]->text();
  auto l = report_line_of(*tasks[0], 0);
  auto e = report_line_of(*tasks[1], 1);
  auto c = report_line_of(*tasks[2], 2);
  ASSERT_TRUE(l && e && c);
  EXPECT_EQ(json_str(*l, "role"), "learner") << *l;
  EXPECT_EQ(json_str(*e, "role"), "evaluator") << *e;
  EXPECT_EQ(json_str(*c, "role"), "collector") << *c;
  EXPECT_GT(json_int(*c, "env_step"), 0) << *c;
  EXPECT_EQ(json_int(*l, "env_step"), json_int(*c, "env_step")) << *l << *c;
}

TEST(Slurm, BasePortPlusTaskIndexPastTheLastPortIsRefused) {
  // Three tasks on one host from base port 65534: task 2 would need 65536
  // (before: it wrapped to port 0 and listened on a random port nobody
  // knew).
  child_process task{hello({"--steps=1", "--dice.port=65534"}),
                     {"SLURM_PROCID=0", "SLURM_NTASKS=3",
                      "SLURM_NODELIST=localhost", "SLURM_TASKS_PER_NODE=3"}};
  auto rc = task.wait_exit(20s);
  ASSERT_TRUE(rc) << task.text();
  EXPECT_EQ(*rc, 1) << task.text();
  EXPECT_TRUE(task.wait_for(std::regex{"65534 \\+ 2 > 65535"}, 0ms))
    << task.text();
}

TEST(Launch, PortsPastTheLastAreRefused) {
  child_process launch{{bin_dir + "dice-launch", "--workers", "3", "--ports",
                        "65534", "--", "/bin/true"}};
  auto rc = launch.wait_exit(10s);
  ASSERT_TRUE(rc) << launch.text();
  EXPECT_EQ(*rc, 2) << launch.text();
  EXPECT_TRUE(launch.wait_for(std::regex{"up to 65536 > 65535"}, 0ms))
    << launch.text();
}

TEST(Launch, FixedPortsAreHonoured) {
  auto base = free_ports(3);
  ASSERT_NE(base, 0) << "no three free ports in a row";
  child_process launch{{bin_dir + "dice-launch", "--workers", "3", "--ports",
                        std::to_string(base), "--",
                        bin_dir + "dice_exchange_probe", "--steps=20"}};
  auto rc = launch.wait_exit(30s);
  ASSERT_TRUE(rc) << launch.text();
  EXPECT_EQ(*rc, 0) << launch.text();
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(launch.text().find("dice-node " + std::to_string(i)
                                 + " listening on port "
                                 + std::to_string(base + i)),
              std::string::npos)
      << launch.text();
}

} // namespace
