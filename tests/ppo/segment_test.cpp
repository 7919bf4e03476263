// The PPO wire format (steps and episodes as payload items, one block of
// bytes) and how a learner cuts a merged context into segments: end-index
// rules, bad payloads, stale and future data, the lag histogram.

#include "dice/core/errc.hpp"

#include "segment.hpp"
#include <gtest/gtest.h>

#include <cstring>

using namespace ppo;

namespace {

// A payload of `envs` x `t` steps from node `origin` acting with `version`;
// step values encode (origin, env, t) so tests can tell them apart.
dice::payload make_payload(std::uint32_t origin, int envs, int t,
                           std::int64_t version,
                           std::vector<std::int64_t>* ends = nullptr) {
  std::vector<step_record> xs(static_cast<std::size_t>(envs * t),
                              step_record{});
  for (int e = 0; e < envs; ++e)
    for (int k = 0; k < t; ++k) {
      auto& r = xs[static_cast<std::size_t>(e * t + k)];
      r.obs[0] = static_cast<float>(origin * 1000 + e * 100 + k);
      r.reward = 1;
      r.logp = -0.5f;
      r.action = static_cast<std::uint8_t>(k % 2);
    }
  if (ends != nullptr)
    for (int e = 0; e < envs; ++e)
      ends->push_back((e + 1) * t - 1);
  return dice::pack(xs, origin, version);
}

TEST(StepRecord, RoundTripsAsOneBlockOfBytes) {
  std::vector<step_record> xs(100, step_record{});
  for (std::size_t i = 0; i < xs.size(); ++i) {
    xs[i].obs[2] = static_cast<float>(i) * 0.5f;
    xs[i].next_obs[3] = -static_cast<float>(i);
    xs[i].reward = 1;
    xs[i].logp = -0.25f;
    xs[i].value = 3.5f;
    xs[i].action = i % 2;
    xs[i].terminated = i == 50;
    xs[i].truncated = i == 99;
    xs[i].has_value = 1;
  }
  auto p = dice::pack(xs, 4, 17);
  EXPECT_EQ(p.count, 100u);
  EXPECT_EQ(p.origin, 4u);
  EXPECT_EQ(p.model_version, 17);
  // One block: the archive is its header plus exactly 48 bytes per step
  // (a field-by-field encoding would add per-item framing).
  auto empty = dice::pack(std::vector<step_record>{});
  EXPECT_EQ(p.bytes.size(), empty.bytes.size() + 100 * sizeof(step_record));
  auto back = dice::unpack<step_record>(p);
  ASSERT_TRUE(back) << dice::render(back.error());
  ASSERT_EQ(back->size(), xs.size());
  EXPECT_EQ(std::memcmp(back->data(), xs.data(), 100 * sizeof(step_record)), 0);
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

TEST(StepRecord, CheckRefusesWhatNoCollectorSends) {
  step_record ok{};
  ok.logp = -0.1f;
  EXPECT_EQ(check(ok), "");
  auto bad = [&](auto mutate) {
    auto x = ok;
    mutate(x);
    return check(x);
  };
  EXPECT_NE(bad([](step_record& x) {
              x.obs[1] = std::nanf("");
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.next_obs[0] = INFINITY;
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.reward = -INFINITY;
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.logp = 0.5f;
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.logp = -INFINITY;
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.action = 2;
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.terminated = 2;
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.truncated = 255;
            }),
            "");
  EXPECT_NE(bad([](step_record& x) {
              x.has_value = 1;
              x.value = std::nanf("");
            }),
            "");
  // A value that was not sent may hold anything.
  EXPECT_EQ(bad([](step_record& x) {
              x.value = std::nanf("");
            }),
            "");
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
  EXPECT_EQ(r->steps[3].obs[0], 2100.0f); // node 2, env 1, step 0
  EXPECT_EQ(r->steps[6].obs[0], 3000.0f); // node 3, env 0, step 0
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
  std::vector<std::int64_t> ends;
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
  std::vector<step_record> xs(2, step_record{});
  xs[1].action = 9;
  auto b = dice::pack(xs, 3, 0);
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
  EXPECT_EQ(r->steps[3].obs[0], 5000.0f);
  EXPECT_EQ(in.counters.payloads_rejected, 2);
  EXPECT_EQ(in.counters.steps_rejected, 4);
  EXPECT_NE(in.counters.last_error.find("node 4"), std::string::npos);
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
  EXPECT_EQ(r->steps.front().obs[0], 13000.0f); // version 3 is the oldest
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
}

TEST(TrajectoryFlags, SegmentEndsTerminationsAndTruncations) {
  segment_batch b;
  b.steps.resize(4, step_record{});
  b.steps[1].terminated = 1;
  b.steps[2].truncated = 1;
  b.segment_end = {0, 0, 0, 1};
  EXPECT_EQ(trajectory_flags(b), (std::vector<std::uint8_t>{0, 1, 1, 1}));
  EXPECT_EQ(dingengine_flags(b.steps, {0, 7, -1}),
            (std::vector<std::uint8_t>{1, 1, 1, 0}));
}

} // namespace
