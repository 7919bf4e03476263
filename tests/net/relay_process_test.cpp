// The relay broadcast between real processes (bench/remote_bench relay: a
// learner and 8 collector processes in a mesh over loopback, the same-host
// shortcut off): the learner's bytes out per round stay within 2x the
// model, every collector loads exactly the learner's bytes, and a relaying
// collector killed with SIGKILL mid-round leaves no survivor without a
// version; in auto mode the learner measures that the star is faster here.
// Every wait has a deadline.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

namespace {

using dice::test::remote_bench;

using namespace std::chrono_literals;

// Runs remote_bench relay with `args`; its JSON line (null on failure) and,
// in `log`, its output.
nlohmann::json run_relay(std::vector<std::string> args,
                         std::string* log = nullptr) {
  std::vector<std::string> argv{remote_bench, "relay"};
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
  if (log)
    *log = p.text();
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

// Auto mode on loopback, where all 9 processes share the machine's cores
// and no link limits: the relay's store-and-forward hops and digests cost
// more than the 8 copies it saves the learner (docs/distributed.md), so the
// learner's probes (3 rounds each way) choose the star, and log it.
TEST(RelayProcess, AutoFallsBackToTheStarOnLoopback) {
  std::string log;
  auto j = run_relay({"--collectors", "8", "--size", "6800000", "--rounds", "6",
                      "--relay", "auto"},
                     &log);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["auto_star_choices"].get<long>(), 1) << j.dump() << "\n" << log;
  EXPECT_EQ(j["auto_tree_choices"].get<long>(), 0) << j.dump() << "\n" << log;
  EXPECT_NE(log.find("relay: the star is faster here"), std::string::npos)
    << log;
  EXPECT_TRUE(j["digests_equal"].get<bool>()) << j.dump();
  EXPECT_TRUE(j["survivors_complete"].get<bool>()) << j.dump();
}

} // namespace
