// transition_batch (payload round trips, refusing hostile bytes) and the
// n-step accumulator, for CartPole's 4 floats and for 11.

#include "dice/core/errc.hpp"
#include "dice/messages/payload.hpp"
#include "dice/rl/transitions.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace dice::rl;

namespace {

// One environment, n = 3, gamma = 0.5, obs = (t, 0, 0, 0) before step t.
struct nstep_fixture {
  nstep_accumulator acc{1, 4, 3, 0.5f};
  transition_batch out;
  void step(float t, float reward, bool term = false, bool trunc = false) {
    float obs[4] = {t, 0, 0, 0};
    float next[4] = {t + 1, 0, 0, 0};
    std::int64_t action = static_cast<std::int64_t>(t) % 2;
    std::uint8_t te = term;
    std::uint8_t tr = trunc;
    ASSERT_FALSE(acc.add(obs, &action, &reward, next, &te, &tr, out));
  }
};

TEST(Nstep, SumsThreeDiscountedRewardsAndFlushesOnTermination) {
  nstep_fixture f;
  f.step(1, 1);
  f.step(2, 2);
  EXPECT_EQ(f.out.size(), 0u); // not yet 3 steps old
  EXPECT_EQ(f.acc.pending(), 2u);
  f.step(3, 3);
  ASSERT_EQ(f.out.size(), 1u);
  EXPECT_EQ(f.out.obs_dim, 4);
  EXPECT_FLOAT_EQ(f.out.reward[0], 1 + 0.5f * 2 + 0.25f * 3);
  EXPECT_FLOAT_EQ(f.out.discount[0], 0.125f);
  EXPECT_EQ(f.out.obs[0], 1.0f);
  EXPECT_EQ(f.out.next_obs[0], 4.0f); // bootstrap from s_4
  EXPECT_EQ(f.out.action[0], 1);
  f.step(4, 4, true); // terminates: steps 2, 3, 4 are flushed
  ASSERT_EQ(f.out.size(), 4u);
  EXPECT_EQ(f.acc.pending(), 0u);
  EXPECT_FLOAT_EQ(f.out.reward[1], 2 + 0.5f * 3 + 0.25f * 4);
  EXPECT_FLOAT_EQ(f.out.reward[2], 3 + 0.5f * 4);
  EXPECT_FLOAT_EQ(f.out.reward[3], 4);
  EXPECT_EQ(f.out.obs[4], 2.0f); // rows in step order
  EXPECT_EQ(f.out.obs[8], 3.0f);
  EXPECT_EQ(f.out.obs[12], 4.0f);
  for (int i = 1; i < 4; ++i)
    EXPECT_EQ(f.out.discount[i], 0.0f) << i; // nothing to bootstrap from
  EXPECT_FALSE(validate(f.out));
}

TEST(Nstep, TruncationStillBootstraps) {
  nstep_fixture f;
  f.step(1, 1);
  f.step(2, 1, false, true);
  ASSERT_EQ(f.out.size(), 2u);
  EXPECT_FLOAT_EQ(f.out.reward[0], 1.5f);
  EXPECT_FLOAT_EQ(f.out.discount[0], 0.25f);
  EXPECT_FLOAT_EQ(f.out.reward[1], 1.0f);
  EXPECT_FLOAT_EQ(f.out.discount[1], 0.5f);
  EXPECT_EQ(f.out.next_obs[0], 3.0f);
  EXPECT_EQ(f.out.next_obs[4], 3.0f);
}

TEST(Nstep, RingKeepsTheOrderOverManySteps) {
  // After the window is full every step emits the step n-1 older: the ring
  // wraps several times and must still hand out s_t, a_t in order.
  nstep_fixture f;
  for (int t = 1; t <= 10; ++t)
    f.step(static_cast<float>(t), static_cast<float>(t));
  ASSERT_EQ(f.out.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) {
    auto t = static_cast<float>(i + 1);
    EXPECT_EQ(f.out.obs[4 * i], t);
    EXPECT_EQ(f.out.next_obs[4 * i], t + 3);
    EXPECT_EQ(f.out.action[i], static_cast<std::int64_t>(t) % 2);
    // t + 0.5 (t + 1) + 0.25 (t + 2)
    EXPECT_FLOAT_EQ(f.out.reward[i], t + 0.5f * (t + 1) + 0.25f * (t + 2));
  }
}

TEST(Nstep, ElevenFloatsAndTwoEnvironments) {
  // n = 2, gamma = 0.9; env e's observation before step t is
  // (100 e + t, 100 e + t + 0.5, ..., 100 e + t + 5), 11 floats.
  constexpr std::int64_t dim = 11;
  nstep_accumulator acc{2, dim, 2, 0.9f};
  transition_batch out;
  auto fill = [](float t, std::vector<float>& xs) {
    for (int e = 0; e < 2; ++e)
      for (int k = 0; k < dim; ++k)
        xs[e * dim + k] = 100.0f * e + t + 0.5f * k;
  };
  std::vector<float> obs(2 * dim), next(2 * dim);
  for (int t = 0; t < 3; ++t) {
    fill(static_cast<float>(t), obs);
    fill(static_cast<float>(t + 1), next);
    std::int64_t actions[2] = {t, 10 + t};
    float rewards[2] = {1, 2};
    std::uint8_t term[2] = {0, t == 1};
    std::uint8_t trunc[2] = {0, 0};
    ASSERT_FALSE(
      acc.add(obs.data(), actions, rewards, next.data(), term, trunc, out));
  }
  // t=1: env 0 emits step 0, env 1 terminates (steps 0, 1); t=2: env 0
  // emits step 1; env 1's new episode (step 2) stays pending.
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out.obs_dim, dim);
  EXPECT_EQ(acc.pending(), 2u);
  ASSERT_EQ(out.obs.size(), 4u * dim);
  ASSERT_EQ(out.next_obs.size(), 4u * dim);
  std::vector<float> want_first{0, 100, 101, 1}; // s_0 of each row
  std::vector<float> want_next{2, 102, 102, 3};  // s_{t+n} or final
  std::vector<std::int64_t> want_action{0, 10, 11, 1};
  std::vector<float> want_reward{1 + 0.9f, 2 + 0.9f * 2, 2, 1 + 0.9f};
  std::vector<float> want_discount{0.81f, 0, 0, 0.81f};
  for (std::size_t i = 0; i < 4; ++i) {
    for (int k = 0; k < dim; ++k) {
      EXPECT_EQ(out.obs[i * dim + k], want_first[i] + 0.5f * k) << i;
      EXPECT_EQ(out.next_obs[i * dim + k], want_next[i] + 0.5f * k) << i;
    }
    EXPECT_EQ(out.action[i], want_action[i]);
    EXPECT_FLOAT_EQ(out.reward[i], want_reward[i]);
    EXPECT_FLOAT_EQ(out.discount[i], want_discount[i]);
  }
}

TEST(Nstep, RefusesABatchOfAnotherObsDim) {
  nstep_accumulator acc{1, 4, 1, 0.9f};
  transition_batch out;
  out.obs_dim = 3;
  out.obs = {1, 2, 3};
  out.next_obs = {1, 2, 3};
  out.action = {0};
  out.reward = {0};
  out.discount = {1};
  float obs[4] = {};
  std::int64_t a = 0;
  float r = 0;
  std::uint8_t no = 0;
  auto err = acc.add(obs, &a, &r, obs, &no, &no, out);
  EXPECT_TRUE(dice::is(err, dice::errc::invalid_config));
  EXPECT_EQ(out.size(), 1u);
  EXPECT_EQ(acc.pending(), 0u);
}

transition_batch two_rows(std::int64_t dim) {
  transition_batch xs;
  xs.obs_dim = dim;
  for (std::int64_t i = 0; i < 2 * dim; ++i) {
    xs.obs.push_back(static_cast<float>(i));
    xs.next_obs.push_back(static_cast<float>(-i));
  }
  xs.action = {1, 7};
  xs.reward = {2.5f, -1};
  xs.discount = {0.97f, 0};
  return xs;
}

TEST(TransitionBatch, RoundTripsThroughAPayload) {
  for (std::int64_t dim : {4, 11}) {
    auto xs = two_rows(dim);
    auto p = dice::pack(std::vector<transition_batch>{xs}, 4, 17);
    EXPECT_EQ(p.origin, 4u);
    EXPECT_EQ(p.model_version, 17);
    auto back = dice::unpack<transition_batch>(p);
    ASSERT_TRUE(back) << dice::render(back.error());
    ASSERT_EQ(back->size(), 1u);
    auto& b = (*back)[0];
    EXPECT_EQ(b.obs_dim, dim);
    EXPECT_EQ(b.size(), 2u);
    EXPECT_EQ(b.obs, xs.obs);
    EXPECT_EQ(b.next_obs, xs.next_obs);
    EXPECT_EQ(b.action, xs.action);
    EXPECT_EQ(b.reward, xs.reward);
    EXPECT_EQ(b.discount, xs.discount);
  }
}

TEST(TransitionBatch, ValidateAcceptsEmptyAndGoodBatches) {
  EXPECT_FALSE(validate(transition_batch{}));
  EXPECT_FALSE(validate(two_rows(11)));
}

// Each hostile batch packs fine (save does not check) and must come back as
// errc::malformed_input, never as data or a crash.
TEST(TransitionBatch, HostilePayloadsAreRefused) {
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<std::pair<const char*, transition_batch>> cases;
  auto add = [&](const char* what, auto change) {
    auto xs = two_rows(11);
    change(xs);
    cases.emplace_back(what, std::move(xs));
  };
  add("short obs", [](auto& x) {
    x.obs.pop_back();
  });
  add("long next_obs", [](auto& x) {
    x.next_obs.push_back(0);
  });
  add("missing reward", [](auto& x) {
    x.reward.pop_back();
  });
  add("extra discount", [](auto& x) {
    x.discount.push_back(1);
  });
  add("obs_dim 0", [](auto& x) {
    x.obs_dim = 0;
  });
  add("obs_dim -11", [](auto& x) {
    x.obs_dim = -11;
  });
  add("obs_dim 22", [](auto& x) {
    x.obs_dim = 22;
  });
  add("huge obs_dim", [](auto& x) {
    x.obs_dim = std::numeric_limits<std::int64_t>::max();
  });
  add("NaN obs", [&](auto& x) {
    x.obs[5] = nan;
  });
  add("inf next_obs", [&](auto& x) {
    x.next_obs[21] = -inf;
  });
  add("NaN reward", [&](auto& x) {
    x.reward[1] = nan;
  });
  add("inf reward", [&](auto& x) {
    x.reward[0] = inf;
  });
  add("NaN discount", [&](auto& x) {
    x.discount[0] = nan;
  });
  add("discount 2", [](auto& x) {
    x.discount[1] = 2;
  });
  add("negative discount", [](auto& x) {
    x.discount[1] = -0.5f;
  });
  add("negative action", [](auto& x) {
    x.action[0] = -1;
  });
  add("obs without transitions", [](auto& x) {
    x.action.clear();
    x.reward.clear();
    x.discount.clear();
  });
  for (auto& [what, xs] : cases) {
    EXPECT_TRUE(dice::is(validate(xs), dice::errc::malformed_input)) << what;
    auto p = dice::pack(std::vector<transition_batch>{two_rows(4), xs});
    std::vector<transition_batch> out;
    auto err = dice::unpack_into(p, out);
    EXPECT_TRUE(dice::is(err, dice::errc::malformed_input)) << what;
    EXPECT_TRUE(out.empty()) << what; // the good first item is not kept
  }
}

TEST(TransitionBatch, TruncatedBytesAreRefused) {
  auto p = dice::pack(std::vector<transition_batch>{two_rows(11)});
  std::vector<std::uint8_t> bytes(p.bytes.data(),
                                  p.bytes.data() + p.bytes.size());
  for (std::size_t cut : {bytes.size() / 2, bytes.size() - 1}) {
    dice::payload q = p;
    q.bytes = dice::shared_bytes{
      std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + cut)};
    auto back = dice::unpack<transition_batch>(q);
    ASSERT_FALSE(back) << cut;
    EXPECT_TRUE(dice::is(back.error(), dice::errc::malformed_input));
  }
}

} // namespace
