// The relay broadcast where a link, not the cores, is the limit: 1 learner
// and 8 collector processes (bench/remote_bench relay), each on a host of
// its own (a network namespace; scripts/netns-hosts) whose one link to a
// bridge is shaped to 1 Gbit/s each way with tbf. There a star round of a
// 6.8 MB model costs at least 8 x 54 ms on the learner's link, a relay
// round (fan-out 2, depth 3) about 3 x 54 ms: the relay must beat the star,
// and auto mode must choose it. Root only (skips with the reason
// otherwise). Every wait has a deadline.

#include "support/child_process.hpp"
#include "support/launch.hpp"
#include "support/netns_hosts.hpp"
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

namespace {

using dice::test::remote_bench;

using namespace std::chrono_literals;

class RelayNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!hosts_.ok())
      GTEST_SKIP() << hosts_.why();
    // netem is missing from some kernels: the bandwidth, the bound here,
    // is shaped either way.
    std::cout << hosts_.latency() << "\n";
  }

  // remote_bench relay on the learner's host with the collectors on theirs;
  // its JSON line (null on failure) and, in `log`, its output.
  nlohmann::json run_relay(const std::string& relay, long rounds,
                           std::string* log = nullptr) {
    std::string addrs;
    std::string spaces;
    for (int i = 0; i <= 8; ++i) {
      addrs += (i ? "," : "") + hosts_.address(i);
      if (i > 0)
        spaces += (i > 1 ? "," : "") + hosts_.ns(i);
    }
    dice::test::child_process p{
      hosts_.exec_in(0,
                     {remote_bench, "relay", "--collectors", "8", "--size",
                      "6800000", "--rounds", std::to_string(rounds), "--relay",
                      relay, "--hosts", addrs, "--netns", spaces})};
    std::smatch m;
    if (!p.wait_for(std::regex{R"(^\{"mode":"relay".*\}$)"}, 120s, &m)) {
      ADD_FAILURE() << "no result; output:\n" << p.text();
      return nullptr;
    }
    auto j = nlohmann::json::parse(m[0].str());
    EXPECT_EQ(p.wait_exit(30s), 0) << p.text();
    if (log)
      *log = p.text();
    return j;
  }

  dice::test::netns_hosts hosts_{9, "1gbit", "0.25ms"};
};

// The same rounds both ways: the relay leaves the learner 2x the model a
// round instead of 8x and, as the learner's link is the limit, is faster.
TEST_F(RelayNetns, RelayBeatsTheStarOnShaped1GbitLinks) {
  auto star = run_relay("0", 3);
  auto relay = run_relay("1", 3);
  ASSERT_FALSE(star.is_null());
  ASSERT_FALSE(relay.is_null());
  for (auto& j : {star, relay}) {
    EXPECT_TRUE(j["digests_equal"].get<bool>()) << j.dump();
    EXPECT_TRUE(j["survivors_complete"].get<bool>()) << j.dump();
  }
  EXPECT_EQ(star["learner_out_per_model"].get<double>(), 8.0) << star.dump();
  EXPECT_LE(relay["learner_out_per_model"].get<double>(), 2.0) << relay.dump();
  EXPECT_EQ(relay["relay_fallbacks"].get<long>(), 0) << relay.dump();
  // 8 x 54 ms against about 3 x 54 ms: a margin that no scheduling noise
  // on the test machine closes.
  EXPECT_LT(relay["round_s"].get<double>(), star["round_s"].get<double>())
    << "relay " << relay.dump() << "\nstar " << star.dump();
}

// Auto mode times both ways (3 rounds each) and keeps the relay, logged
// with its figures.
TEST_F(RelayNetns, AutoChoosesTheRelayOnShaped1GbitLinks) {
  std::string log;
  auto j = run_relay("auto", 6, &log);
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["auto_tree_choices"].get<long>(), 1) << j.dump() << "\n" << log;
  EXPECT_EQ(j["auto_star_choices"].get<long>(), 0) << j.dump() << "\n" << log;
  EXPECT_TRUE(j["digests_equal"].get<bool>()) << j.dump();
  EXPECT_TRUE(j["survivors_complete"].get<bool>()) << j.dump();
  EXPECT_NE(log.find("relay: the relay tree is faster here"), std::string::npos)
    << log;
}

} // namespace
