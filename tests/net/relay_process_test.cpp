// The relay broadcast between real processes (bench/remote_bench relay: a
// learner and 8 collector processes in a mesh over loopback, the same-host
// shortcut off): the learner's bytes out per round stay within 2x the
// model, every collector loads exactly the learner's bytes, and a relaying
// collector killed with SIGKILL mid-round leaves no survivor without a
// version. Every wait has a deadline.

#include "support/child_process.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

const std::string bench = std::string{DICE_BINARY_DIR} + "/bin/remote_bench";

// Runs remote_bench relay with `args`; its JSON line (null on failure).
nlohmann::json run_relay(std::vector<std::string> args) {
  std::vector<std::string> argv{bench, "relay"};
  argv.insert(argv.end(), args.begin(), args.end());
  dice::test::child_process p{argv};
  std::smatch m;
  if (!p.wait_for(std::regex{R"(^\{"mode":"relay".*\}$)"}, 120s, &m)) {
    ADD_FAILURE() << "no result; output:\n" << p.text();
    return nullptr;
  }
  auto j = nlohmann::json::parse(m[0].str());
  auto code = p.wait_exit(30s);
  EXPECT_EQ(code, 0) << p.text();
  return j;
}

TEST(RelayProcess, LearnerSendsAtMost2xTheModelTo8Collectors) {
  auto j = run_relay(
    {"--collectors", "8", "--size", "6800000", "--rounds", "3"});
  ASSERT_FALSE(j.is_null());
  EXPECT_LE(j["learner_out_per_model"].get<double>(), 2.0) << j.dump();
  EXPECT_EQ(j["relay_rounds"].get<long>(), 3) << j.dump();
  EXPECT_TRUE(j["digests_equal"].get<bool>()) << j.dump();
  EXPECT_TRUE(j["survivors_complete"].get<bool>()) << j.dump();
}

TEST(RelayProcess, SurvivorsGetEveryVersionWhenARelayIsKilled) {
  // Node 1 relays to nodes 3 and 4 (and they to 7 and 8).
  auto j = run_relay(
    {"--collectors", "8", "--size", "6800000", "--rounds", "6", "--kill", "1"});
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["killed"].get<long>(), 1) << j.dump();
  EXPECT_TRUE(j["survivors_complete"].get<bool>()) << j.dump();
  EXPECT_TRUE(j["digests_equal"].get<bool>()) << j.dump();
}

} // namespace
