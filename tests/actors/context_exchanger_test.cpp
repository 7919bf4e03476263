// Deterministic tests of the context exchanger (spec §1.1) on CAF's test
// coordinator: every wait is a delayed message on a fake clock.

#include "dice/exchangers/context_exchanger.hpp"
#include "dice/messages/context_delta.hpp"

#include "support/deterministic.hpp"
#include "support/probes.hpp"

#include <chrono>
#include <map>

using namespace std::chrono_literals;
using namespace dice;
using dice::test::seen;

namespace {

using log_ptr = std::shared_ptr<std::vector<seen>>;

log_ptr make_log() {
  return std::make_shared<std::vector<seen>>();
}

class ContextExchangerTest : public dice::test::deterministic {
 protected:
  pipeline collector_pipe(std::uint32_t node, std::int64_t items,
                          std::vector<std::int64_t> ends, log_ptr log,
                          context_exchanger_options opts = {}) {
    pipeline p;
    p.use(context_exchanger(opts))
      .use(dice::test::collect_integers(node, items, std::move(ends)))
      .use(dice::test::probe(std::move(log)));
    return p;
  }

  pipeline learner_pipe(log_ptr log, context_exchanger_options opts = {}) {
    pipeline p;
    p.use(context_exchanger(opts))
      .use(dice::test::count_train_iter())
      .use(dice::test::probe(std::move(log)));
    return p;
  }
};

// Spec §1.1 "lockstep timeline": the learner's env_step is the sum of the
// collectors' increments it merged; collectors take the learner's train_iter.
TEST_F(ContextExchangerTest,
       LockstepLearnerSumsIncrementsCollectorsSeeTrainIter) {
  auto router = spawn_router();
  auto llog = make_log(), c2log = make_log(), c3log = make_log();
  auto learner = spawn_role(router, 0, {role::learner}, learner_pipe(llog), 6);
  auto c2 = spawn_role(router, 2, {role::collector},
                       collector_pipe(2, 3, {2}, c2log));
  auto c3 = spawn_role(router, 3, {role::collector},
                       collector_pipe(3, 5, {4}, c3log));
  start({learner, c2, c3});
  ASSERT_EQ(llog->size(), 6u);
  // Every learner iteration merged at least one delta, and its env_step is
  // exactly the sum of the increments of the deltas merged so far.
  std::int64_t expected_steps = 0;
  std::int64_t expected_episodes = 0;
  std::map<std::uint32_t, std::int64_t> per_origin{{2, 3}, {3, 5}};
  for (auto& it : *llog) {
    ASSERT_FALSE(it.trajectories.empty()) << "iteration " << it.total_step;
    for (auto& p : it.trajectories) {
      expected_steps += per_origin[p.origin];
      expected_episodes += 1; // each delta carries one episode
    }
    EXPECT_EQ(it.env_step, expected_steps) << "iteration " << it.total_step;
    EXPECT_EQ(it.env_episode, expected_episodes);
  }
  // Collectors see train_iter from iteration 1 on, never going back.
  for (auto* log : {c2log.get(), c3log.get()}) {
    ASSERT_GE(log->size(), 2u);
    EXPECT_EQ(log->front().train_iter, 0);
    for (size_t i = 1; i < log->size(); ++i) {
      EXPECT_GE((*log)[i].train_iter, 1);
      EXPECT_GE((*log)[i].train_iter, (*log)[i - 1].train_iter);
    }
  }
  // After the drain, nothing sent is missing: exact totals on the learner.
  auto reps = reports();
  ASSERT_EQ(reps.size(), 3u);
  EXPECT_EQ(reps[0].env_step, reps[2].env_step + reps[3].env_step);
  EXPECT_EQ(reps[0].env_episode, reps[2].env_episode + reps[3].env_episode);
  EXPECT_EQ(reps[0].trajectories_received, reps[2].env_step + reps[3].env_step);
  EXPECT_EQ(reps[2].train_iter, 6);
  EXPECT_EQ(reps[3].train_iter, 6);
  EXPECT_EQ(reps[0].stop_reason, "max_step");
}

// Spec §1.1 bug 1, fixed: trajectory_end_idx of several collectors index the
// merged list.
TEST_F(ContextExchangerTest, TrajectoryEndIdxIsOffsetAcrossCollectors) {
  auto router = spawn_router();
  auto llog = make_log();
  // A learner busy for 1 s (a slow training step) before it merges, so that
  // two collectors' deltas are waiting when it does.
  pipeline p;
  p.use(dice::test::busy_for(1s))
    .use(context_exchanger())
    .use(dice::test::probe(llog));
  auto learner = spawn_role(router, 0, {role::learner}, std::move(p), 1);
  start({learner});
  context_delta a;
  a.sender = 2;
  a.seq = 1;
  a.sender_roles = {role::collector};
  a.env_step = 4;
  a.trajectories = {pack(std::vector<int>{1, 2, 3, 4}, 2)};
  a.trajectory_end_idx = {1, 3};
  a.has_trajectory_end_idx = true;
  context_delta b = a;
  b.sender = 3;
  b.trajectories = {pack(std::vector<int>{5, 6, 7}, 3)};
  b.env_step = 3;
  b.trajectory_end_idx = {2};
  publish(router, context_topic(role::collector), 2, a);
  publish(router, context_topic(role::collector), 3, b);
  EXPECT_TRUE(llog->empty());
  advance(1s);
  ASSERT_EQ(llog->size(), 1u);
  auto& it = llog->front();
  ASSERT_EQ(it.trajectories.size(), 2u);
  auto items = unpack<int>(it.trajectories);
  ASSERT_TRUE(items);
  EXPECT_EQ(*items, (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
  // 1 and 3 index the first collector's items; 2 becomes 4 + 2.
  EXPECT_EQ(it.trajectory_end_idx, (std::vector<std::int64_t>{1, 3, 6}));
  EXPECT_EQ(it.env_step, 7);
}

// Spec §1.1: collectors and evaluators wait only from iteration skip_n_iter.
TEST_F(ContextExchangerTest, SkipNIterDelaysTheFirstWait) {
  auto router = spawn_router();
  auto log = make_log();
  context_exchanger_options opts;
  opts.skip_n_iter = 3;
  auto c = spawn_role(router, 2, {role::collector},
                      collector_pipe(2, 1, {0}, log, opts), 10);
  start({c});
  // Iterations 0, 1, 2 ran without waiting; iteration 3 waits for context.
  EXPECT_EQ(log->size(), 3u);
  auto& st = state_of(c);
  EXPECT_TRUE(st.pending.has_value());
  EXPECT_EQ(st.ctx.total_step, 3);
  context_delta d;
  d.sender = 0;
  d.seq = 1;
  d.sender_roles = {role::learner};
  d.train_iter = 42;
  publish(router, context_topic(role::learner), 0, d);
  ASSERT_EQ(log->size(), 4u);
  EXPECT_EQ(log->back().train_iter, 42);
  sink->send(c, finish{0, "test", false});
  run();
}

// Spec §1.1: after 60 s without context a collector warns with its node id
// and goes on; the fake clock makes this instant.
TEST_F(ContextExchangerTest, CollectorTimeoutWarnsWithNodeIdAndGoesOn) {
  auto router = spawn_router();
  auto log = make_log();
  auto c = spawn_role(router, 7, {role::collector},
                      collector_pipe(7, 1, {0}, log), 3);
  start({c});
  EXPECT_EQ(log->size(), 1u);
  advance(59s);
  EXPECT_EQ(logs.count("Timeout when waiting for new context!"), 0u);
  EXPECT_EQ(log->size(), 1u);
  advance(1s);
  EXPECT_EQ(logs.count("Timeout when waiting for new context! Node id: 7"), 1u);
  EXPECT_EQ(log->size(), 2u);
  EXPECT_EQ(state_of(c).rep.timeouts, 1);
  advance(60s);
  EXPECT_EQ(log->size(), 3u);
  auto reps = reports();
  EXPECT_EQ(reps[7].timeouts, 2);
}

// DESIGN §5, fixed: the learner's wait has a deadline (DI-engine waits
// forever) ...
TEST_F(ContextExchangerTest, LearnerWaitHasADeadline) {
  auto router = spawn_router();
  auto log = make_log();
  context_exchanger_options opts;
  opts.learner_timeout = 5s;
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(log, opts), 2);
  start({l});
  EXPECT_EQ(log->size(), 0u);
  advance(5s);
  EXPECT_EQ(logs.count("Timeout when waiting for new context! Node id: 0"), 1u);
  EXPECT_EQ(log->size(), 1u);
}

// ... and honours finish: the learner stops at once instead of hanging.
TEST_F(ContextExchangerTest, LearnerWaitEndsOnFinish) {
  auto router = spawn_router();
  auto log = make_log();
  auto l = spawn_role(router, 0, {role::learner}, learner_pipe(log), 0);
  start({l});
  EXPECT_TRUE(state_of(l).pending.has_value());
  sink->send(l, finish{5, "stop_value", false});
  run();
  auto reps = reports();
  ASSERT_EQ(reps.count(0), 1u);
  EXPECT_EQ(reps[0].stop_reason, "finish from node 5 (stop_value)");
  EXPECT_EQ(reps[0].timeouts, 0);
  EXPECT_EQ(log->size(), 1u); // the iteration in progress completed
}

// Spec §1.1 table: which role keeps which field.
TEST_F(ContextExchangerTest, FieldsARoleDoesNotAcceptAreIgnored) {
  auto router = spawn_router();
  auto clog = make_log(), elog = make_log(), llog = make_log();
  auto c = spawn_role(router, 2, {role::collector},
                      collector_pipe(2, 1, {0}, clog), 0);
  pipeline ep;
  ep.use(context_exchanger()).use(dice::test::probe(elog));
  auto e = spawn_role(router, 1, {role::evaluator}, std::move(ep), 0);
  start({c, e});
  // A delta carrying every field, sent as if by a node holding every role.
  context_delta d;
  d.sender = 9;
  d.seq = 1;
  d.sender_roles = {role::learner, role::collector};
  d.env_step = 100;
  d.env_episode = 10;
  d.train_iter = 77;
  d.trajectories = {pack(std::vector<int>{1, 2}, 9)};
  d.trajectory_end_idx = {1};
  d.has_trajectory_end_idx = true;
  // On the learner topic: collectors and the evaluator hear it.
  publish(router, context_topic(role::learner), 9, d);
  // Collector: takes train_iter only; its env_step stays its own count.
  ASSERT_GE(clog->size(), 2u);
  EXPECT_EQ(clog->back().train_iter, 77);
  EXPECT_EQ(clog->back().env_step, static_cast<std::int64_t>(clog->size()));
  ASSERT_EQ(clog->back().trajectories.size(), 1u);
  EXPECT_EQ(clog->back().trajectories[0].origin, 2u)
    << "a collector must not take trajectories from a peer";
  // Evaluator: sums increments, takes train_iter, drops trajectories.
  ASSERT_GE(elog->size(), 1u);
  EXPECT_EQ(elog->back().train_iter, 77);
  EXPECT_GE(elog->back().env_step, 100);
  EXPECT_TRUE(elog->back().trajectories.empty());
  // On the collector topic: a learner hears it but never takes train_iter.
  // (It runs one iteration; its finish then ends the run.)
  pipeline lp;
  lp.use(context_exchanger()).use(dice::test::probe(llog));
  auto l = spawn_role(router, 0, {role::learner}, std::move(lp), 1);
  start({l});
  publish(router, context_topic(role::collector), 9, d);
  ASSERT_EQ(llog->size(), 1u);
  // The collector's earlier deltas went to the evaluator only; it resends
  // them (after resend_timeout) to the learner, which acks them, before it
  // quits.
  advance(5s);
  EXPECT_EQ(llog->back().train_iter, 0);
  EXPECT_EQ(llog->back().env_step, 100);
  EXPECT_EQ(llog->back().trajectory_end_idx, (std::vector<std::int64_t>{1}));
  auto reps = reports();
  ASSERT_EQ(reps.size(), 3u);
  EXPECT_EQ(reps[1].trajectories_received, 0);
  EXPECT_EQ(reps[2].trajectories_received, 0);
  EXPECT_GE(reps[0].trajectories_received, 2);
  EXPECT_EQ(reps[0].train_iter, 0);
}

// Spec §1.0: no roles -> a warning and a void exchanger; several roles -> a
// warning, and it works.
TEST_F(ContextExchangerTest, RoleWarnings) {
  auto router = spawn_router();
  pipeline none;
  none.use(context_exchanger());
  auto a = spawn_role(router, 4, role_set{}, std::move(none), 2);
  pipeline both;
  both.use(context_exchanger());
  auto b = spawn_role(router, 5, {role::learner, role::collector},
                      std::move(both), 1);
  start({a, b});
  EXPECT_EQ(logs.count("The task does not have any roles defined, the "
                       "ContextExchanger will not work."),
            1u);
  EXPECT_EQ(logs.count("Use multiple roles in one exchanger may lead to "
                       "unexpected result, please check your code."),
            1u);
  auto reps = reports();
  EXPECT_EQ(reps[4].iterations, 2); // void: never waited
}

// Topics never depend on a language version (DI-engine 3.11 wrote
// "context_exchanger_Role.LEARNER").
TEST(ContextTopic, IsStable) {
  EXPECT_EQ(context_topic(role::learner), "context_exchanger_learner");
  EXPECT_EQ(context_topic(role::collector), "context_exchanger_collector");
  EXPECT_EQ(context_topic(role::evaluator), "context_exchanger_evaluator");
  EXPECT_EQ(context_topic(role::fetcher), "context_exchanger_fetcher");
}

// DI-engine's renew(): what survives an iteration.
TEST(Context, RenewKeepsOnlyDiEngineFields) {
  context ctx;
  ctx.total_step = 4;
  ctx.env_step = 10;
  ctx.env_episode = 2;
  ctx.train_iter = 3;
  ctx.last_eval_iter = 2;
  ctx.last_eval_value = 1.5;
  ctx.wandb_url = "u";
  ctx.eval_value = 9;
  ctx.trajectories = {pack(std::vector<int>{1}, 0)};
  ctx.trajectory_end_idx = {0};
  ctx.scratch["x"] = 1;
  ctx.keep["y"] = 2;
  ctx.renew();
  EXPECT_EQ(ctx.total_step, 5);
  EXPECT_EQ(ctx.env_step, 10);
  EXPECT_EQ(ctx.env_episode, 2);
  EXPECT_EQ(ctx.train_iter, 3);
  EXPECT_EQ(ctx.last_eval_iter, 2);
  EXPECT_EQ(ctx.last_eval_value, 1.5);
  EXPECT_EQ(ctx.wandb_url, "u");
  EXPECT_TRUE(ctx.trajectories.empty());
  EXPECT_TRUE(ctx.trajectory_end_idx.empty());
  EXPECT_TRUE(ctx.scratch.empty());
  EXPECT_EQ(ctx.keep.count("y"), 1u);
  EXPECT_LT(ctx.eval_value, 0);
}

} // namespace
