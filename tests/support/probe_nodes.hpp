#pragma once

// dice_exchange_probe nodes for the tests that attack a node's port from
// outside (tests/net/preauth_test.cpp, member_frames_test.cpp): a learner
// listening on an ephemeral loopback port with only the cluster secret, and
// a genuine collector that must still finish a run with it afterwards.

#include "support/child_process.hpp"
#include "support/secret_file.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace dice::test {

/// dice_exchange_probe as node `id` of 2 (star, 5 steps), listening on an
/// ephemeral loopback port with only the cluster secret in `secret_path`.
inline std::vector<std::string>
probe_node_args(int id, const std::string& secret_path,
                const std::string& attach,
                std::vector<std::string> extra = {}) {
  std::vector<std::string> args{std::string{DICE_BINARY_DIR}
                                  + "/bin/dice_exchange_probe",
                                "--dice.node-id=" + std::to_string(id),
                                "--dice.workers=2",
                                "--dice.topology=star",
                                "--dice.host=127.0.0.1",
                                "--dice.secret-file=" + secret_path,
                                "--dice.peer-loss-timeout=10s",
                                "--steps=5"};
  if (!attach.empty())
    args.push_back("--dice.attach-to=" + attach);
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

/// Starts the learner (node 0) and returns its port (0: it reported none
/// within 20 s).
inline std::uint16_t
start_probe_learner(std::unique_ptr<child_process>& learner,
                    const secret_file& s, std::vector<std::string> extra = {}) {
  learner = std::make_unique<child_process>(
    probe_node_args(0, s.path, "", std::move(extra)));
  std::smatch m;
  if (!learner->wait_for(std::regex{"dice-node 0 listening on port ([0-9]+)"},
                         std::chrono::seconds{20}, &m))
    return 0;
  return static_cast<std::uint16_t>(std::stoi(m[1].str()));
}

/// A genuine collector joins `learner` on `port`; both must finish the run
/// (5 iterations) and exit 0.
inline void expect_genuine_run(child_process& learner, const secret_file& s,
                               std::uint16_t port) {
  using namespace std::chrono_literals;
  child_process collector{
    probe_node_args(1, s.path, "127.0.0.1:" + std::to_string(port))};
  auto rc_c = collector.wait_exit(30s);
  auto rc_l = learner.wait_exit(30s);
  ASSERT_TRUE(rc_l) << "learner did not end\n" << learner.text();
  EXPECT_EQ(*rc_l, 0) << learner.text();
  ASSERT_TRUE(rc_c) << "collector did not end\n" << collector.text();
  EXPECT_EQ(*rc_c, 0) << collector.text();
  EXPECT_TRUE(learner.wait_for(std::regex{"\"train_iter\":5"}, 0ms))
    << learner.text();
}

} // namespace dice::test
