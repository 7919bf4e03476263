// The JSON that dice prints (node reports, trust counters) is written by
// nlohmann-json: it parses, whatever bytes the text fields hold.

#include "dice/core/node_report.hpp"
#include "dice/security/trust.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace dice;

TEST(NodeReportJson, CarriesFailedAndSurvivesBytesThatAreNotUtf8) {
  // Before: a peer's finish reason with a stray byte (it lands in
  // stop_reason) made nlohmann's dump() throw in the stopping role actor.
  node_report x;
  x.node = 4;
  x.failed = true;
  x.stop_reason = "finish from node 9 (\xff\xfe bad)";
  std::string text;
  ASSERT_NO_THROW(text = to_json(x));
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["node"], 4);
  EXPECT_EQ(j["failed"], true);
  EXPECT_EQ(j["stop_reason"],
            "finish from node 9 (\xEF\xBF\xBD\xEF\xBF\xBD bad)");
}

TEST(TrustCountersJson, NamesEveryEventWithItsCount) {
  count(trust_event::oversize);
  auto j = nlohmann::json::parse(trust_counters_json());
  ASSERT_EQ(j.size(), trust_event_count);
  for (std::size_t i = 0; i < trust_event_count; ++i) {
    auto x = static_cast<trust_event>(i);
    ASSERT_TRUE(j.contains(to_string(x))) << to_string(x);
    EXPECT_EQ(j[to_string(x)], counter(x)) << to_string(x);
  }
  EXPECT_GE(j["oversize"].get<std::uint64_t>(), 1u);
}
