// A role actor that gets a message on a topic nobody on it subscribed to
// (a confused or hostile sender) counts it as unknown_topic and keeps
// running.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/security/trust.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <chrono>

using namespace std::chrono_literals;
using namespace dice;

namespace {

class RoleTopicTest : public dice::test::deterministic {};

TEST_F(RoleTopicTest, UnsubscribedTopicIsCountedAndIgnored) {
  auto router = spawn_router();
  auto log = std::make_shared<std::vector<dice::test::seen>>();
  pipeline p;
  context_exchanger_options opts;
  opts.learner_timeout = 1s;
  p.use(context_exchanger(opts)).use(dice::test::probe(log));
  auto learner = spawn_role(router, 0, {role::learner}, std::move(p), 2);
  start({learner});
  auto before = counter(trust_event::unknown_topic);
  context_delta d;
  d.sender = 5;
  d.seq = 1;
  d.env_step = 100;
  sink->send(learner, std::string{"no_such_topic"}, d);
  run();
  EXPECT_EQ(counter(trust_event::unknown_topic), before + 1);
  for (int i = 0; i < 5 && log->size() < 2; ++i)
    advance(1s);
  ASSERT_EQ(log->size(), 2u) << "the learner kept running";
  EXPECT_EQ(log->back().env_step, 0) << "the message was not applied";
}

} // namespace
