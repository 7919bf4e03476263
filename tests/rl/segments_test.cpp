// PPO's wire format (steps column by column, episodes as records, each one
// block of bytes) and how a learner cuts a merged context into segments:
// end-index rules, bad payloads, layouts, stale and future data, the lag
// histogram. Moved from tests/ppo/segment_test.cpp and widened to any
// observation size and Box actions.

#include "dice/core/errc.hpp"
#include "dice/rl/segments.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

using namespace dice::rl;

namespace {

const step_layout cartpole_layout{4, 2, 0};

// `n` zero steps of `layout` (logp -0.5, so they check out).
step_columns zero_steps(const step_layout& layout, std::size_t n) {
  step_columns x;
  x.layout = layout;
  auto od = static_cast<std::size_t>(layout.obs_dim);
  x.obs.assign(n * od, 0.0f);
  x.next_obs.assign(n * od, 0.0f);
  x.reward.assign(n, 0.0f);
  x.logp.assign(n, -0.5f);
  x.value.assign(n, 0.0f);
  x.terminated.assign(n, 0);
  x.truncated.assign(n, 0);
  x.has_value.assign(n, 0);
  if (layout.discrete())
    x.discrete_actions.assign(n, 0);
  else
    x.box_actions.assign(n * static_cast<std::size_t>(layout.act_dim), 0.0f);
  return x;
}

// A payload of `envs` x `t` CartPole steps from node `origin` acting with
// `version`; obs[0] encodes (origin, env, t) so tests can tell steps apart.
dice::payload make_payload(std::uint32_t origin, int envs, int t,
                           std::int64_t version,
                           std::vector<std::int64_t>* ends = nullptr) {
  auto xs = zero_steps(cartpole_layout, static_cast<std::size_t>(envs * t));
  for (int e = 0; e < envs; ++e)
    for (int k = 0; k < t; ++k) {
      auto i = static_cast<std::size_t>(e * t + k);
      xs.obs[i * 4] = static_cast<float>(origin * 1000 + e * 100 + k);
      xs.reward[i] = 1;
      xs.discrete_actions[i] = k % 2;
    }
  if (ends != nullptr)
    for (int e = 0; e < envs; ++e)
      ends->push_back((e + 1) * t - 1);
  return pack_steps(xs, origin, version);
}

TEST(StepLayout, OfSpaces) {
  auto obs = dice::space::box({2, 3}, -1.0f, 1.0f);
  auto d = step_layout::of(obs, dice::space::discrete(5));
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, (step_layout{6, 5, 0}));
  EXPECT_EQ(to_string(*d), "obs 6, Discrete(5)");
  auto b = step_layout::of(obs, dice::space::box({3}, -2.0f, 2.0f));
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, (step_layout{6, 0, 3}));
  EXPECT_FALSE(step_layout::of(dice::space::discrete(3), obs));
  EXPECT_FALSE(step_layout::of(obs, dice::space::discrete(0)));
}

TEST(StepColumns, RoundTripsAsBlocksOfBytes) {
  // Eleven floats per observation, Discrete(3).
  step_layout layout{11, 3, 0};
  auto xs = zero_steps(layout, 100);
  for (std::size_t i = 0; i < 100; ++i) {
    xs.obs[i * 11 + 2] = static_cast<float>(i) * 0.5f;
    xs.next_obs[i * 11 + 10] = -static_cast<float>(i);
    xs.reward[i] = 1;
    xs.logp[i] = -0.25f;
    xs.value[i] = 3.5f;
    xs.discrete_actions[i] = static_cast<std::int64_t>(i % 3);
    xs.terminated[i] = i == 50;
    xs.truncated[i] = i == 99;
    xs.has_value[i] = 1;
  }
  auto p = pack_steps(xs, 4, 17);
  EXPECT_EQ(p.count, 100u);
  EXPECT_EQ(p.origin, 4u);
  EXPECT_EQ(p.model_version, 17);
  // Blocks: the archive is the empty one's plus exactly the column bytes,
  // per step 2 x 11 floats + reward, logp, value (floats) + 3 flag bytes +
  // an int64 action = 88 + 12 + 3 + 8 = 111 bytes (a field-by-field
  // encoding would add per-item framing).
  auto empty = pack_steps(zero_steps(layout, 0));
  EXPECT_EQ(p.bytes.size(), empty.bytes.size() + 100 * 111);
  auto back = unpack_steps(p);
  ASSERT_TRUE(back) << dice::render(back.error());
  EXPECT_EQ(back->layout, layout);
  EXPECT_EQ(back->obs, xs.obs);
  EXPECT_EQ(back->next_obs, xs.next_obs);
  EXPECT_EQ(back->reward, xs.reward);
  EXPECT_EQ(back->logp, xs.logp);
  EXPECT_EQ(back->value, xs.value);
  EXPECT_EQ(back->discrete_actions, xs.discrete_actions);
  EXPECT_EQ(back->terminated, xs.terminated);
  EXPECT_EQ(back->truncated, xs.truncated);
  EXPECT_EQ(back->has_value, xs.has_value);
}

TEST(StepColumns, BoxActionsRoundTrip) {
  step_layout layout{3, 0, 2};
  auto xs = zero_steps(layout, 5);
  for (std::size_t i = 0; i < 10; ++i)
    xs.box_actions[i] = static_cast<float>(i) - 4.5f;
  xs.logp[0] = 1.5f; // a density above 1: fine for Box actions
  auto back = unpack_steps(pack_steps(xs, 1, 2));
  ASSERT_TRUE(back) << dice::render(back.error());
  EXPECT_EQ(back->layout, layout);
  EXPECT_EQ(back->box_actions, xs.box_actions);
  EXPECT_TRUE(back->discrete_actions.empty());
}

TEST(StepColumns, CheckRefusesWhatNoCollectorSends) {
  auto ok = zero_steps(cartpole_layout, 3);
  EXPECT_EQ(check(ok), "");
  auto bad = [&](const std::function<void(step_columns&)>& mutate) {
    auto x = ok;
    mutate(x);
    return check(x);
  };
  EXPECT_NE(bad([](step_columns& x) {
              x.obs[5] = std::nanf("");
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.next_obs[0] = INFINITY;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.reward[1] = -INFINITY;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.logp[2] = 0.5f;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.logp[0] = -INFINITY;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.discrete_actions[1] = 2;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.discrete_actions[1] = -1;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.terminated[0] = 2;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.truncated[2] = 255;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.has_value[1] = 1;
              x.value[1] = std::nanf("");
            }),
            "");
  // Lengths and layout.
  EXPECT_NE(bad([](step_columns& x) {
              x.obs.pop_back();
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.logp.pop_back();
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.discrete_actions.pop_back();
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.box_actions.push_back(0);
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.layout.obs_dim = 0;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.layout.act_dim = 1;
            }),
            "");
  EXPECT_NE(bad([](step_columns& x) {
              x.layout.obs_dim = 2;
            }),
            "");
  // The error says which step.
  EXPECT_EQ(bad([](step_columns& x) {
              x.reward[2] = NAN;
            }),
            "step 2: non-finite reward");
  // A value that was not sent may hold anything.
  EXPECT_EQ(bad([](step_columns& x) {
              x.value[0] = std::nanf("");
            }),
            "");
  // Box actions must be finite.
  auto box = zero_steps(step_layout{4, 0, 2}, 2);
  box.box_actions[3] = NAN;
  EXPECT_NE(check(box), "");
}

TEST(StepColumns, UnpackRefusesWhatCheckRefusesAndCountsThatDisagree) {
  auto xs = zero_steps(cartpole_layout, 2);
  xs.discrete_actions[1] = 9;
  auto r = unpack_steps(pack_steps(xs));
  ASSERT_FALSE(r);
  EXPECT_TRUE(dice::is(r.error(), dice::errc::malformed_input));
  auto p = pack_steps(zero_steps(cartpole_layout, 2));
  p.count = 3;
  EXPECT_FALSE(unpack_steps(p));
  p.count = 2;
  EXPECT_TRUE(unpack_steps(p));
  EXPECT_FALSE(unpack_steps(dice::payload{}));
}

TEST(EpisodeRecord, RoundTrips) {
  std::vector<episode_record> xs{{21.0, 21}, {500.0, 500}};
  auto p = dice::pack(xs, 2, 3);
  auto back = dice::unpack<episode_record>(p);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[1].ret, 500.0);
  EXPECT_EQ((*back)[1].length, 500);
  EXPECT_EQ(check((*back)[0]), "");
  EXPECT_NE(check(episode_record{std::nan(""), 3}), "");
  EXPECT_NE(check(episode_record{3, 0}), "");
}

struct intake {
  intake_options opts;
  intake_counters counters;
  lag_summary lags;
  caf::expected<segment_batch> cut(const std::vector<dice::payload>& ps,
                                   const std::vector<std::int64_t>& ends) {
    return cut_segments(ps, ends, opts, counters, lags);
  }
};

TEST(CutSegments, TwoCollectorsMergedWithOffsets) {
  std::vector<dice::payload> merged;
  std::vector<std::int64_t> merged_ends;
  std::vector<std::int64_t> a_ends, b_ends;
  auto a = make_payload(2, 2, 3, 0, &a_ends);
  auto b = make_payload(3, 1, 4, 0, &b_ends);
  merge_context(merged, merged_ends, {a}, a_ends);
  merge_context(merged, merged_ends, {b}, b_ends);
  EXPECT_EQ(merged_ends, (std::vector<std::int64_t>{2, 5, 9}));
  intake in;
  auto r = in.cut(merged, merged_ends);
  ASSERT_TRUE(r) << dice::render(r.error());
  EXPECT_EQ(r->size(), 10u);
  EXPECT_EQ(r->segments, 3);
  EXPECT_EQ(r->segment_end,
            (std::vector<std::uint8_t>{0, 0, 1, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(r->steps.obs[3 * 4], 2100.0f);     // node 2, env 1, step 0
  EXPECT_EQ(r->steps.obs[6 * 4], 3000.0f);     // node 3, env 0, step 0
  EXPECT_EQ(r->steps.layout, cartpole_layout); // adopted from the first payload
  EXPECT_EQ(check(r->steps), "");
  EXPECT_EQ(in.counters.steps_received, 10);
  EXPECT_EQ(in.counters.segments_received, 3);
}

TEST(CutSegments, DingEngineUnoffsetIndicesAreRefusedWhole) {
  std::vector<dice::payload> merged;
  std::vector<std::int64_t> ends, a_ends, b_ends;
  auto a = make_payload(2, 2, 3, 0, &a_ends);
  auto b = make_payload(3, 1, 4, 0, &b_ends);
  merge_context(merged, ends, {a}, a_ends, false);
  merge_context(merged, ends, {b}, b_ends, false);
  EXPECT_EQ(ends, (std::vector<std::int64_t>{2, 5, 3}));
  intake in;
  auto r = in.cut(merged, ends);
  ASSERT_FALSE(r);
  EXPECT_TRUE(dice::is(r.error(), dice::errc::malformed_input));
  EXPECT_NE(in.counters.last_error.find("not increasing"), std::string::npos);
  EXPECT_EQ(in.counters.batches_rejected, 1);
}

TEST(CutSegments, EndIndicesMustCoverEveryPayloadEnd) {
  auto a = make_payload(2, 1, 3, 0);
  auto b = make_payload(3, 1, 3, 0);
  intake in;
  // Out of range, missing the last step, a segment across two payloads.
  EXPECT_FALSE(in.cut({a, b}, {2, 6}));
  EXPECT_FALSE(in.cut({a, b}, {-1, 5}));
  EXPECT_FALSE(in.cut({a, b}, {2, 4}));
  EXPECT_FALSE(in.cut({a, b}, {5}));
  EXPECT_FALSE(in.cut({a, b}, {2, 2, 5}));
  EXPECT_EQ(in.counters.batches_rejected, 5);
  EXPECT_TRUE(in.cut({a, b}, {2, 5}));
  EXPECT_TRUE(in.cut({a, b}, {0, 2, 3, 5}));
  EXPECT_TRUE(in.cut({}, {}));
}

TEST(CutSegments, ABadPayloadIsDroppedAndTheOthersKept) {
  auto a = make_payload(2, 1, 3, 0);
  // Node 3 sends an action that does not exist.
  auto xs = zero_steps(cartpole_layout, 2);
  xs.discrete_actions[1] = 9;
  auto b = pack_steps(xs, 3, 0);
  // Node 4's bytes are cut short (claimed count kept).
  auto c = make_payload(4, 1, 2, 0);
  std::vector<std::uint8_t> cut(c.bytes.data(),
                                c.bytes.data() + c.bytes.size() - 10);
  c.bytes = dice::shared_bytes{std::move(cut)};
  auto d = make_payload(5, 1, 2, 0);
  intake in;
  auto r = in.cut({a, b, c, d}, {2, 4, 6, 8});
  ASSERT_TRUE(r) << dice::render(r.error());
  EXPECT_EQ(r->size(), 5u); // a (3) and d (2)
  EXPECT_EQ(r->steps.obs[3 * 4], 5000.0f);
  EXPECT_EQ(in.counters.payloads_rejected, 2);
  EXPECT_EQ(in.counters.steps_rejected, 4);
  EXPECT_NE(in.counters.last_error.find("node 4"), std::string::npos);
}

TEST(CutSegments, APayloadOfAnotherLayoutIsDropped) {
  std::vector<std::int64_t> e;
  auto a = make_payload(2, 1, 3, 0, &e);
  // Node 3 steps an env with 5-float observations.
  auto b = pack_steps(zero_steps(step_layout{5, 2, 0}, 2), 3, 0);
  // Node 4 sends Box actions.
  auto c = pack_steps(zero_steps(step_layout{4, 0, 2}, 2), 4, 0);
  intake in;
  in.opts.layout = cartpole_layout;
  auto r = in.cut({b, a, c}, {1, 4, 6});
  ASSERT_TRUE(r) << dice::render(r.error());
  EXPECT_EQ(r->size(), 3u);
  EXPECT_EQ(r->steps.obs[0], 2000.0f);
  EXPECT_EQ(in.counters.payloads_rejected, 2);
  EXPECT_NE(in.counters.last_error.find("expected obs 4, Discrete(2)"),
            std::string::npos)
    << in.counters.last_error;
  // Without a layout given, the first good payload's is the batch's.
  intake adopt;
  auto s = adopt.cut({b, a, c}, {1, 4, 6});
  ASSERT_TRUE(s);
  EXPECT_EQ(s->steps.layout, (step_layout{5, 2, 0}));
  EXPECT_EQ(s->size(), 2u);
  EXPECT_EQ(adopt.counters.payloads_rejected, 2);
}

TEST(CutSegments, StaleDataBeyondMaxLagIsDroppedAndCounted) {
  // Six payloads acting with versions 0..5 (2 envs x 4 steps each); the
  // learner is at version 5 and keeps lag <= 2.
  std::vector<dice::payload> merged;
  std::vector<std::int64_t> ends;
  for (std::int64_t v = 0; v < 6; ++v) {
    std::vector<std::int64_t> e;
    auto p = make_payload(static_cast<std::uint32_t>(10 + v), 2, 4, v, &e);
    merge_context(merged, ends, {p}, e);
  }
  intake in;
  in.opts.learner_version = 5;
  in.opts.max_lag = 2;
  auto r = in.cut(merged, ends);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->size(), 24u);
  EXPECT_EQ(r->segments, 6);
  for (auto lag : r->lag)
    EXPECT_LE(lag, 2);
  EXPECT_EQ(r->steps.obs.front(), 13000.0f); // version 3 is the oldest
  EXPECT_EQ(in.counters.steps_dropped_stale, 24);
  EXPECT_EQ(in.counters.segments_dropped_stale, 6);
  EXPECT_EQ(in.counters.steps_received, 48);
  // Every received sample is in the lag histogram, dropped or not.
  EXPECT_EQ(in.lags.count(), 48);
  EXPECT_EQ(in.lags.min(), 0);
  EXPECT_EQ(in.lags.max(), 5);
  EXPECT_DOUBLE_EQ(in.lags.mean(), 2.5);
  for (int k = 0; k < 6; ++k)
    EXPECT_EQ(in.lags.histogram()[static_cast<std::size_t>(k)], 8);
  EXPECT_EQ(in.lags.quantile(0.5), 2);
  EXPECT_EQ(in.lags.quantile(0.9), 5);
  // Without max_lag nothing is dropped.
  intake all;
  all.opts.learner_version = 5;
  auto r2 = all.cut(merged, ends);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->size(), 48u);
  EXPECT_EQ(all.counters.steps_dropped_stale, 0);
}

TEST(CutSegments, DataFromAFutureModelIsDroppedAndCounted) {
  std::vector<std::int64_t> e;
  auto p = make_payload(2, 1, 3, 9, &e);
  intake in;
  in.opts.learner_version = 4;
  auto r = in.cut({p}, e);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->size(), 0u);
  EXPECT_EQ(in.counters.steps_dropped_future, 3);
  EXPECT_EQ(in.lags.count(), 0);
}

TEST(CutSegments, UnknownVersionCountsAsVersionZero) {
  std::vector<std::int64_t> e;
  auto p = make_payload(2, 1, 3, -1, &e);
  intake in;
  in.opts.learner_version = 3;
  auto r = in.cut({p}, e);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->lag, (std::vector<std::int64_t>{3, 3, 3}));
}

TEST(LagSummary, LargeLagsShareTheLastBucket) {
  lag_summary s;
  s.add(0, 3);
  s.add(1000);
  EXPECT_EQ(s.count(), 4);
  EXPECT_EQ(s.max(), 1000);
  EXPECT_EQ(s.histogram().back(), 1);
  EXPECT_EQ(s.quantile(1.0), lag_summary::buckets);
  lag_summary t;
  t.add(2, 2);
  t.merge(s);
  EXPECT_EQ(t.count(), 6);
  EXPECT_EQ(t.min(), 0);
  EXPECT_NEAR(t.mean(), 1004.0 / 6, 1e-9);
  EXPECT_EQ(lag_summary{}.str(), "0/0.00/0 (p50 0, p90 0)");
}

TEST(TrajectoryFlags, SegmentEndsTerminationsAndTruncations) {
  segment_batch b;
  b.steps = zero_steps(cartpole_layout, 4);
  b.steps.terminated[1] = 1;
  b.steps.truncated[2] = 1;
  b.segment_end = {0, 0, 0, 1};
  EXPECT_EQ(trajectory_flags(b), (std::vector<std::uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(dingengine_flags(b.steps, {0, 7, -1}),
            (std::vector<std::uint8_t>{1, 1, 1, 0}));
}

} // namespace
