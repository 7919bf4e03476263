// Deterministic tests of the model exchanger and the periodical model
// exchanger (spec §1.2, §1.3) with real LibTorch models.

#include "dice/exchangers/model_exchanger.hpp"
#include "dice/exchangers/periodical_model_exchanger.hpp"
#include "dice/torch/model.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"
#include <torch/torch.h>

#include <chrono>

using namespace std::chrono_literals;
using namespace dice;
using dice::test::seen;

namespace {

using log_ptr = std::shared_ptr<std::vector<seen>>;

std::shared_ptr<torch::nn::LinearImpl> make_net(int seed) {
  torch::manual_seed(seed);
  return std::make_shared<torch::nn::LinearImpl>(3, 2);
}

torch::Tensor predict(const std::shared_ptr<torch::nn::LinearImpl>& net) {
  torch::NoGradGuard guard;
  return net->forward(torch::ones({1, 3}));
}

model_snapshot snapshot_of(const std::shared_ptr<torch::nn::LinearImpl>& net,
                           std::int64_t version,
                           std::uint64_t incarnation = 77) {
  auto x = to_snapshot(*net);
  EXPECT_TRUE(x);
  x->sender = 0;
  x->incarnation = incarnation;
  x->version = version;
  return std::move(*x);
}

class ModelExchangerTest : public dice::test::deterministic {
 protected:
  log_ptr log = std::make_shared<std::vector<seen>>();
  std::shared_ptr<torch::nn::LinearImpl> net = make_net(1);

  role_actor spawn_receiver(const router_actor& router, middleware exchanger,
                            bool busy = false) {
    pipeline p;
    if (busy) {
      // A slow step (1 s on the fake clock) so models can arrive while the
      // node is not waiting for one.
      p.use(dice::test::busy_for(1s));
    }
    p.use(std::move(exchanger)).use(dice::test::probe(log));
    return spawn_role(router, 2, {role::collector}, std::move(p));
  }
};

// Spec §1.2: no wait in iteration 0; from then on each iteration waits for
// a newer model and loads it; the collector's predictions change to the
// learner's.
TEST_F(ModelExchangerTest, CollectorLoadsEachNewModelAndPredictsLikeIt) {
  auto router = spawn_router();
  auto c = spawn_receiver(router, model_exchanger(model_port_of(net)));
  start({c});
  EXPECT_EQ(log->size(), 1u);
  EXPECT_TRUE(state_of(c).pending.has_value());
  auto learner_net = make_net(2);
  ASSERT_FALSE(torch::allclose(predict(net), predict(learner_net)));
  publish(router, model_topic, 0, snapshot_of(learner_net, 1));
  ASSERT_EQ(log->size(), 2u);
  EXPECT_EQ(log->back().model_version, 1);
  EXPECT_TRUE(torch::equal(predict(net), predict(learner_net)));
  // The next iteration waits again for a newer one.
  EXPECT_TRUE(state_of(c).pending.has_value());
  auto newer = make_net(3);
  publish(router, model_topic, 0, snapshot_of(newer, 2));
  EXPECT_EQ(log->back().model_version, 2);
  EXPECT_TRUE(torch::equal(predict(net), predict(newer)));
  EXPECT_EQ(state_of(c).rep.models_loaded, 2);
}

// Spec §1.2: 60 s without a model: warning with the node id, old weights kept.
TEST_F(ModelExchangerTest, TimeoutWarnsAndKeepsTheOldWeights) {
  auto router = spawn_router();
  auto before = predict(net).clone();
  auto c = spawn_receiver(router, model_exchanger(model_port_of(net)));
  start({c});
  advance(59s);
  EXPECT_EQ(log->size(), 1u);
  advance(1s);
  EXPECT_EQ(logs.count("Timeout when waiting for new model! Node id: 2"), 1u);
  EXPECT_EQ(log->size(), 2u);
  EXPECT_TRUE(torch::equal(predict(net), before));
}

// DESIGN §5: a snapshot that is not newer is dropped on arrival; the node
// keeps waiting without spinning.
TEST_F(ModelExchangerTest, NonNewerSnapshotIsDroppedWithoutSpinning) {
  auto router = spawn_router();
  auto c = spawn_receiver(router, model_exchanger(model_port_of(net)));
  start({c});
  auto other = make_net(5);
  publish(router, model_topic, 0, snapshot_of(other, 3));
  ASSERT_EQ(log->size(), 2u);
  auto loaded = predict(net).clone();
  // Same version again, then an older one: both dropped.
  sink->send(
    router, publish_atom::value, std::string{model_topic}, std::uint32_t{0},
    caf::make_message(std::string{model_topic}, snapshot_of(make_net(6), 3)));
  sink->send(
    router, publish_atom::value, std::string{model_topic}, std::uint32_t{0},
    caf::make_message(std::string{model_topic}, snapshot_of(make_net(7), 2)));
  auto jobs = run();
  EXPECT_LE(jobs, 4u) << "the receiver must not spin";
  EXPECT_EQ(log->size(), 2u);
  EXPECT_TRUE(state_of(c).pending.has_value());
  EXPECT_EQ(state_of(c).rep.models_dropped, 2);
  EXPECT_TRUE(torch::equal(predict(net), loaded));
  // A restarted sender (new incarnation) starts its versions over: accepted.
  auto restarted = make_net(8);
  publish(router, model_topic, 0, snapshot_of(restarted, 1, 78));
  EXPECT_EQ(log->size(), 3u);
  EXPECT_TRUE(torch::equal(predict(net), predict(restarted)));
}

// Issue 9 item 3: versions are compared only within one (sender, incarnation).
// A snapshot from another sender with the learner's incarnation and version
// 2^62 (what a stranger could once inject) must not make the learner's models
// look old. Before: every genuine model was dropped as "not newer" and the
// collector waited out its 60 s deadline each iteration.
TEST_F(ModelExchangerTest, AFutureVersionFromAnotherSenderDoesNotStall) {
  auto router = spawn_router();
  auto c = spawn_receiver(router, model_exchanger(model_port_of(net)));
  start({c});
  auto forged = snapshot_of(make_net(60), std::int64_t{1} << 62);
  forged.sender = 9;
  publish(router, model_topic, 9, forged);
  ASSERT_EQ(log->size(), 2u);
  auto genuine = make_net(61);
  publish(router, model_topic, 0, snapshot_of(genuine, 2));
  EXPECT_EQ(log->size(), 3u) << "the learner's model was dropped as not newer";
  EXPECT_TRUE(torch::equal(predict(net), predict(genuine)));
  EXPECT_EQ(state_of(c).rep.models_dropped, 0);
  EXPECT_EQ(state_of(c).rep.timeouts, 0);
}

// A snapshot that does not fit the model is refused, the model untouched,
// and the node goes on waiting for one that fits.
TEST_F(ModelExchangerTest, MismatchedSnapshotLeavesTheModelUntouched) {
  auto router = spawn_router();
  auto c = spawn_receiver(router, model_exchanger(model_port_of(net)));
  start({c});
  auto before = predict(net).clone();
  torch::manual_seed(9);
  auto wrong = std::make_shared<torch::nn::LinearImpl>(4, 2);
  auto snap = to_snapshot(*wrong);
  ASSERT_TRUE(snap);
  snap->version = 1;
  publish(router, model_topic, 0, *snap);
  EXPECT_EQ(log->size(), 1u);
  EXPECT_TRUE(state_of(c).pending.has_value());
  EXPECT_TRUE(torch::equal(predict(net), before));
  EXPECT_EQ(logs.count("cannot load model v1 from node 0: model_mismatch"), 1u);
  publish(router, model_topic, 0, snapshot_of(make_net(4), 2));
  EXPECT_EQ(log->size(), 2u);
}

// Spec §1.2: the learner sends a snapshot after every iteration.
TEST_F(ModelExchangerTest, LearnerSendsAfterEveryIteration) {
  auto router = spawn_router();
  auto c = spawn_receiver(router, model_exchanger(model_port_of(net)));
  auto learner_net = make_net(11);
  pipeline lp;
  lp.use(model_exchanger(model_port_of(learner_net)));
  auto l = spawn_role(router, 0, {role::learner}, std::move(lp), 3);
  start({c, l});
  auto reps = reports();
  EXPECT_EQ(reps[0].models_sent, 3);
  EXPECT_EQ(reps[0].model_version, 3);
  EXPECT_GE(reps[2].models_loaded, 1);
  EXPECT_TRUE(torch::equal(predict(net), predict(learner_net)));
}

// Spec §1.3 worked example: sender period 3 sends ids 0, 3, 6; receiver
// (period 1, stale_toleration 3): t1 blocks for id 0, t2-t3 reuse, t4 blocks
// for id 3, t5-t6 reuse, t7 blocks until finish.
TEST_F(ModelExchangerTest, PeriodicalWorkedExample) {
  auto router = spawn_router();
  periodical_model_exchanger_options opts;
  opts.mode = exchange_mode::receive;
  opts.stale_toleration = 3;
  auto c = spawn_receiver(router,
                          periodical_model_exchanger(model_port_of(net), opts));
  start({c});
  auto& st = state_of(c);
  EXPECT_EQ(log->size(), 1u); // t0 never waits
  EXPECT_TRUE(st.pending.has_value());
  publish(router, "model_exchanger", 0, snapshot_of(make_net(20), 0));
  // t1 loaded id 0, t2 and t3 reused it, t4 blocks.
  ASSERT_EQ(log->size(), 4u);
  EXPECT_EQ((*log)[1].model_version, 0);
  EXPECT_EQ((*log)[3].model_version, 0);
  EXPECT_EQ(st.ctx.total_step, 4);
  EXPECT_TRUE(st.pending.has_value());
  publish(router, "model_exchanger", 0, snapshot_of(make_net(21), 3));
  ASSERT_EQ(log->size(), 7u);
  EXPECT_EQ((*log)[4].model_version, 3);
  EXPECT_EQ((*log)[6].model_version, 3);
  EXPECT_EQ(st.ctx.total_step, 7);
  EXPECT_TRUE(st.pending.has_value());
  sink->send(c, finish{0, "max_step", false});
  run();
  EXPECT_EQ(log->size(), 8u); // t7 returned on finish
  EXPECT_EQ(reports()[2].models_loaded, 2);
}

// Spec §1.3: the sender emits at iterations 0, period, 2 * period.
TEST_F(ModelExchangerTest, PeriodicalSenderSendsEveryPeriod) {
  auto router = spawn_router();
  periodical_model_exchanger_options ropts;
  ropts.mode = exchange_mode::receive;
  ropts.stale_toleration = 100;
  auto c = spawn_receiver(
    router, periodical_model_exchanger(model_port_of(net), ropts));
  periodical_model_exchanger_options sopts;
  sopts.mode = exchange_mode::send;
  sopts.period = 3;
  pipeline sp;
  sp.use(periodical_model_exchanger(model_port_of(make_net(30)), sopts));
  auto s = spawn_role(router, 0, {role::learner}, std::move(sp), 7);
  start({c, s});
  auto reps = reports();
  EXPECT_EQ(reps[0].models_sent, 3); // ids 0, 3, 6
  EXPECT_EQ(reps[0].model_version, 6);
}

// Spec §1.3: a receiver takes only ids that are multiples of its period.
TEST_F(ModelExchangerTest, PeriodicalReceiverFiltersByItsPeriod) {
  auto router = spawn_router();
  periodical_model_exchanger_options opts;
  opts.mode = exchange_mode::receive;
  opts.period = 2;
  auto c = spawn_receiver(router,
                          periodical_model_exchanger(model_port_of(net), opts));
  start({c});
  publish(router, "model_exchanger", 0, snapshot_of(make_net(40), 3));
  EXPECT_EQ(log->size(), 1u);
  EXPECT_EQ(state_of(c).rep.models_loaded, 0);
  publish(router, "model_exchanger", 0, snapshot_of(make_net(41), 4));
  EXPECT_EQ(log->size(), 2u);
  EXPECT_EQ(log->back().model_version, 4);
}

// DESIGN §5: a cached model older than delay_toleration is dropped (DI-engine
// spun on it for 60 s), and the node waits for a fresh one.
TEST_F(ModelExchangerTest, PeriodicalDropsAModelOlderThanDelayToleration) {
  auto router = spawn_router();
  periodical_model_exchanger_options opts;
  opts.mode = exchange_mode::receive;
  opts.delay_toleration = 10s;
  auto c = spawn_receiver(
    router, periodical_model_exchanger(model_port_of(net), opts), true);
  start({c});
  advance(1s); // t0 done; t1 busy
  EXPECT_EQ(log->size(), 1u);
  auto before = predict(net).clone();
  publish(router, "model_exchanger", 0, snapshot_of(make_net(50), 0));
  advance(20s); // t1's busy step ends 20 s after the model arrived
  EXPECT_EQ(log->size(), 1u);
  EXPECT_EQ(state_of(c).rep.models_dropped, 1);
  EXPECT_EQ(logs.count("older than delay_toleration"), 1u);
  EXPECT_TRUE(state_of(c).pending.has_value());
  EXPECT_TRUE(torch::equal(predict(net), before));
  publish(router, "model_exchanger", 0, snapshot_of(make_net(51), 1));
  EXPECT_EQ(log->size(), 2u);
  EXPECT_EQ(log->back().model_version, 1);
}

// Spec §1.3: an unknown mode is a configuration error, not a crash later.
TEST(ExchangeMode, ParsesSendAndReceiveOnly) {
  EXPECT_EQ(parse_exchange_mode("send").value(), exchange_mode::send);
  EXPECT_EQ(parse_exchange_mode("receive").value(), exchange_mode::receive);
  auto bad = parse_exchange_mode("both");
  ASSERT_FALSE(bad);
  EXPECT_TRUE(is(bad.error(), errc::invalid_config));
}

} // namespace
