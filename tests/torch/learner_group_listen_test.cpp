// What a learner group inside dice exposes while it forms (issue 24): two
// learners under dice-launch form over the router, so nothing listens but
// each node's own port and Gloo's pair listeners on the cluster address
// (loopback here) -- no store port, no wildcard listener -- and, as
// dice-launch gives the cluster a secret, every pair proves membership.

#include "dice/torch/learner_group.hpp" // built only with LibTorch (the demo)

#include "learner_group_sockets.hpp"
#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using dice::test::child_process;
using dice::test::listener;
using dice::test::listeners_of;
using dice::test::listening_sockets;
using dice::test::read_all;
using dice::test::scratch;

using dice::test::bin_dir;

TEST(LearnerGroupListen, DiceLaunchGroupOpensNoStorePortAndNoWildcard) {
  scratch out{"dice_lg_listen"};
  child_process launch{
    {bin_dir + "dice-launch", "--workers", "5", "--learners", "2", "--",
     bin_dir + "dqn_cartpole", "--seed=1", "--envs-per-collector=2",
     "--max-env-steps=2000", "--max-seconds=60", "--learning-starts=200",
     "--stop-value=100000", "--no-plot", "--out=" + out.dir.string()}};
  // Watch both learners' listening sockets from their start until both
  // formed: a store port, if any, listens exactly then (for milliseconds).
  // A thread of its own samples the tables as fast as it can; only a
  // listener it has not seen yet costs a look at the learners' fds.
  std::map<int, pid_t> pids;
  std::map<int, std::set<listener>> seen;
  std::atomic<bool> watching{true};
  std::thread watcher{[&] {
    std::set<std::uint64_t> foreign;
    while (watching) {
      for (int id : {0, 1})
        if (pids.count(id) == 0)
          if (auto pid = dice::test::launched_node_pid(launch.pid(), id);
              pid > 0)
            pids[id] = pid;
      for (auto& x : listening_sockets()) {
        if (foreign.count(x.inode) > 0)
          continue;
        bool owned = false;
        for (auto& [id, pid] : pids)
          if (dice::test::socket_inodes(std::to_string(pid)).count(x.inode)
              > 0) {
            seen[id].insert(x);
            owned = true;
          }
        if (!owned && pids.size() == 2)
          foreign.insert(x.inode);
      }
    }
  }};
  // Each match consumes its line: two matches are the two learners.
  const std::regex formed{R"(\[node [01]\].*formed)"};
  bool both = launch.wait_for(formed, 90s) && launch.wait_for(formed, 30s);
  watching = false;
  watcher.join();
  ASSERT_TRUE(both) << launch.text();
  // After forming, each node listens on its own port alone.
  std::map<int, std::set<std::uint16_t>> own;
  for (int id : {0, 1})
    for (auto& x : listeners_of(std::to_string(pids[id])))
      own[id].insert(x.port);
  for (int id : {0, 1}) {
    ASSERT_FALSE(seen[id].empty()) << "node " << id;
    EXPECT_EQ(own[id].size(), 1u) << "node " << id;
    for (auto& x : seen[id]) {
      bool node_port = own[id].count(x.port) > 0;
      std::cout << "node " << id << " listened on " << x.text()
                << (node_port ? " (its own port)" : " (Gloo pair)")
                << std::endl;
      EXPECT_FALSE(x.wildcard()) << "node " << id << ": " << x.text();
      // The cluster address is loopback under dice-launch.
      EXPECT_EQ(x.address, "127.0.0.1") << "node " << id << ": " << x.text();
    }
  }
  // dice-launch gives its cluster a secret: the pairs proved membership.
  EXPECT_TRUE(std::regex_search(launch.text(),
                                std::regex{"formed .*pairs proved membership"}))
    << launch.text();
  auto rc = launch.wait_exit(120s);
  ASSERT_TRUE(rc) << "the run did not end\n" << launch.text();
  EXPECT_EQ(*rc, 0) << launch.text();
}

} // namespace
