// CartPole-v1 against values worked out from gymnasium's equations (moved
// from tests/dqn/cartpole_test.cpp), and a vector_env of them against a copy
// of the example's old stepping code, which it must reproduce bit for bit.

#include "dice/env/vector_env.hpp"
#include "dice/envs/cartpole.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <set>

using namespace dice::envs;

namespace {

// -- the old implementation (examples/dqn_cartpole/cartpole.cpp at 807932c) --

namespace legacy {

using obs4 = std::array<float, 4>;

struct step_out {
  obs4 obs{};
  float reward = 1;
  bool terminated = false;
  bool truncated = false;
};

class cartpole {
 public:
  explicit cartpole(std::uint64_t seed = 0) : rng_(seed) {
    reset();
  }

  obs4 reset() {
    std::uniform_real_distribution<double> init{-0.05, 0.05};
    state_.x = init(rng_);
    state_.x_dot = init(rng_);
    state_.theta = init(rng_);
    state_.theta_dot = init(rng_);
    steps_ = 0;
    return observe();
  }

  step_out step(int action) {
    state_ = cartpole_dynamics(state_, action);
    ++steps_;
    step_out r;
    r.obs = observe();
    r.reward = 1;
    r.terminated = cartpole_terminated(state_);
    r.truncated = steps_ >= cartpole_params::max_episode_steps;
    return r;
  }

  obs4 observe() const {
    return {static_cast<float>(state_.x), static_cast<float>(state_.x_dot),
            static_cast<float>(state_.theta),
            static_cast<float>(state_.theta_dot)};
  }

 private:
  std::mt19937_64 rng_;
  cartpole_state state_;
  int steps_ = 0;
};

std::uint64_t mix_seed(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

class vec_cartpole {
 public:
  vec_cartpole(std::size_t n, std::uint64_t seed)
    : returns_(n, 0.0), obs_(n * 4), final_obs_(n * 4), rewards_(n),
      terminated_(n), truncated_(n) {
    envs_.reserve(n);
    for (std::size_t i = 0; i < n; ++i)
      envs_.emplace_back(mix_seed(seed * 1000003 + i));
    for (std::size_t i = 0; i < n; ++i) {
      auto o = envs_[i].reset();
      std::copy(o.begin(), o.end(), obs_.begin() + 4 * i);
    }
    final_obs_ = obs_;
  }

  void step(const std::vector<std::int64_t>& actions) {
    finished_returns_.clear();
    for (std::size_t i = 0; i < envs_.size(); ++i) {
      auto r = envs_[i].step(static_cast<int>(actions[i]));
      std::copy(r.obs.begin(), r.obs.end(), final_obs_.begin() + 4 * i);
      rewards_[i] = r.reward;
      terminated_[i] = r.terminated;
      truncated_[i] = r.truncated;
      returns_[i] += r.reward;
      if (r.terminated || r.truncated) {
        finished_returns_.push_back(returns_[i]);
        returns_[i] = 0;
        auto o = envs_[i].reset();
        std::copy(o.begin(), o.end(), obs_.begin() + 4 * i);
      } else {
        std::copy(r.obs.begin(), r.obs.end(), obs_.begin() + 4 * i);
      }
    }
  }

  std::vector<cartpole> envs_;
  std::vector<double> returns_;
  std::vector<float> obs_;
  std::vector<float> final_obs_;
  std::vector<float> rewards_;
  std::vector<std::uint8_t> terminated_;
  std::vector<std::uint8_t> truncated_;
  std::vector<double> finished_returns_;
};

} // namespace legacy

dice::vector_env make_cartpoles(std::size_t n) {
  auto v = dice::vector_env::make(n, [](std::size_t) {
    return std::make_unique<cartpole>();
  });
  if (!v)
    throw std::runtime_error(dice::render(v.error()));
  return std::move(*v);
}

template <class T>
bool same_bits(const std::vector<T>& x, const std::vector<T>& y) {
  return x.size() == y.size()
    && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// Half the envs act at random, half with a controller that balances for
// the whole 500 steps, so both kinds of episode end are compared.
std::int64_t policy(const float* obs, std::size_t i, std::mt19937_64& rng) {
  if (i % 2 == 0)
    return static_cast<std::int64_t>(rng() & 1);
  auto u = obs[0] * 0.2f + obs[1] * 0.5f + obs[2] * 10.0f + obs[3] * 2.0f;
  return u > 0 ? 1 : 0;
}

TEST(CartpoleVector, ReproducesTheOldVecCartpoleBitExactly) {
  for (std::uint64_t seed : {0ull, 1ull, 42ull, 7919ull * 3 + 1}) {
    const std::size_t n = 6;
    legacy::vec_cartpole old{n, seed};
    auto v = make_cartpoles(n);
    ASSERT_FALSE(v.reset(seed));
    ASSERT_TRUE(same_bits(v.obs(), old.obs_)) << "seed " << seed;
    std::mt19937_64 rng{seed};
    std::vector<std::int64_t> actions(n);
    int truncations = 0;
    int terminations = 0;
    for (int t = 0; t < 2000; ++t) {
      for (std::size_t i = 0; i < n; ++i)
        actions[i] = policy(v.obs().data() + 4 * i, i, rng);
      old.step(actions);
      ASSERT_FALSE(v.step(actions));
      ASSERT_TRUE(same_bits(v.obs(), old.obs_)) << "step " << t;
      ASSERT_TRUE(same_bits(v.final_obs(), old.final_obs_)) << "step " << t;
      ASSERT_TRUE(same_bits(v.rewards(), old.rewards_));
      ASSERT_EQ(v.terminated(), old.terminated_);
      ASSERT_EQ(v.truncated(), old.truncated_);
      ASSERT_EQ(v.episodes().size(), old.finished_returns_.size());
      for (std::size_t k = 0; k < v.episodes().size(); ++k)
        ASSERT_EQ(v.episodes()[k].ret, old.finished_returns_[k]);
      for (std::size_t i = 0; i < n; ++i) {
        truncations += v.truncated()[i];
        terminations += v.terminated()[i];
      }
    }
    EXPECT_GT(truncations, 0) << "the controller should reach 500 steps";
    EXPECT_GT(terminations, 50);
  }
}

// -- gymnasium's equations, moved from tests/dqn/cartpole_test.cpp ------------

// Gymnasium's equations for s = (0.01, 0.02, 0.03, 0.04), push right:
//   temp     = (10 + 0.05 * 0.04^2 * sin 0.03) / 1.1           = 9.0909113
//   thetaacc = (9.8 sin 0.03 - cos 0.03 * temp)
//              / (0.5 * (4/3 - 0.1 cos^2 0.03 / 1.1))          = -14.1534359
//   xacc     = temp - 0.05 * thetaacc * cos 0.03 / 1.1         = 9.7339598
//   x' = 0.01 + 0.02 * 0.02, x_dot' = 0.02 + 0.02 * xacc,
//   theta' = 0.03 + 0.02 * 0.04, theta_dot' = 0.04 + 0.02 * thetaacc.
constexpr cartpole_state s0{0.01, 0.02, 0.03, 0.04};

dice::action_view push(int a) {
  return {a, nullptr, 0};
}

TEST(CartpoleEnv, OneStepPushRightMatchesTheEquations) {
  auto s = cartpole_dynamics(s0, 1);
  EXPECT_NEAR(s.x, 0.0104, 1e-15);
  EXPECT_NEAR(s.x_dot, 0.21467919574755523, 1e-13);
  EXPECT_NEAR(s.theta, 0.0308, 1e-15);
  EXPECT_NEAR(s.theta_dot, -0.2430687179600081, 1e-13);
}

TEST(CartpoleEnv, OneStepPushLeftMatchesTheEquations) {
  auto s = cartpole_dynamics(s0, 0);
  EXPECT_NEAR(s.x, 0.0104, 1e-15);
  EXPECT_NEAR(s.x_dot, -0.17553901710278938, 1e-13);
  EXPECT_NEAR(s.theta, 0.0308, 1e-15);
  EXPECT_NEAR(s.theta_dot, 0.34199522377603914, 1e-13);
}

TEST(CartpoleEnv, StepWritesFloatObservationAndRewardsOne) {
  cartpole env{1};
  env.set_state(s0);
  float obs[4];
  auto r = env.step(push(1), obs);
  EXPECT_EQ(obs[0], static_cast<float>(0.0104));
  EXPECT_EQ(obs[1], static_cast<float>(0.21467919574755523));
  EXPECT_EQ(obs[2], static_cast<float>(0.0308));
  EXPECT_EQ(obs[3], static_cast<float>(-0.2430687179600081));
  EXPECT_EQ(r.reward, 1.0f);
  EXPECT_FALSE(r.terminated);
  EXPECT_FALSE(r.truncated); // the time limit is the vector's
}

TEST(CartpoleEnv, SpacesAndLimitAreGymnasiums) {
  cartpole env;
  EXPECT_EQ(env.name(), "CartPole-v1");
  EXPECT_EQ(env.action_space().to_string(), "Discrete(2)");
  EXPECT_EQ(env.observation_space().to_string(),
            "Box([-4.8000002e+00 -3.4028235e+38 -4.1887903e-01 "
            "-3.4028235e+38], [4.8000002e+00 3.4028235e+38 4.1887903e-01 "
            "3.4028235e+38], (4,), float32)");
  EXPECT_EQ(env.max_episode_steps(), 500);
  EXPECT_DOUBLE_EQ(cartpole_params::theta_threshold, 0.20943951023931953);
}

TEST(CartpoleEnv, TerminatesStrictlyBeyondTheThresholds) {
  const double th = cartpole_params::theta_threshold;
  EXPECT_FALSE(cartpole_terminated({2.4, 0, 0, 0}));
  EXPECT_TRUE(cartpole_terminated({2.4000001, 0, 0, 0}));
  EXPECT_FALSE(cartpole_terminated({-2.4, 0, 0, 0}));
  EXPECT_TRUE(cartpole_terminated({-2.4000001, 0, 0, 0}));
  EXPECT_FALSE(cartpole_terminated({0, 0, th, 0}));
  EXPECT_TRUE(cartpole_terminated({0, 0, th + 1e-9, 0}));
  EXPECT_TRUE(cartpole_terminated({0, 0, -th - 1e-9, 0}));
  // Euler: the position moves with the old velocity, so x = 2.4 stays put
  // with velocity 0, and moves to 2.4 + 0.02 * 0.1 > 2.4 with velocity 0.1.
  cartpole env{1};
  float obs[4];
  env.set_state({2.4, 0.0, 0.0, 0.0});
  EXPECT_FALSE(env.step(push(1), obs).terminated);
  env.set_state({2.4, 0.1, 0.0, 0.0});
  auto r = env.step(push(0), obs);
  EXPECT_TRUE(r.terminated);
  EXPECT_EQ(r.reward, 1.0f); // gymnasium rewards the terminating step too
  env.set_state({0.0, 0.0, th, 0.0});
  EXPECT_FALSE(env.step(push(0), obs).terminated);
  env.set_state({0.0, 0.0, -th, -0.01});
  EXPECT_TRUE(env.step(push(1), obs).terminated);
}

TEST(CartpoleEnv, VectorTruncatesAt500Steps) {
  auto v = make_cartpoles(1);
  ASSERT_FALSE(v.reset(2));
  auto& env = dynamic_cast<cartpole&>(v.at(0));
  for (int i = 1; i <= 500; ++i) {
    env.set_state({}); // upright and still: never terminates
    ASSERT_FALSE(v.step(std::vector<std::int64_t>{i % 2}));
    EXPECT_FALSE(v.terminated()[0]);
    ASSERT_EQ(v.truncated()[0], i == 500 ? 1 : 0) << "step " << i;
  }
  ASSERT_EQ(v.episodes().size(), 1u);
  EXPECT_EQ(v.episodes()[0].length, 500);
  EXPECT_EQ(v.episodes()[0].ret, 500.0);
  EXPECT_EQ(v.episode_lengths()[0], 0);
}

TEST(CartpoleEnv, ResetIsUniformInASmallBoxAndSeeded) {
  cartpole a;
  cartpole b;
  cartpole c;
  std::array<float, 4> oa;
  std::array<float, 4> ob;
  std::array<float, 4> oc;
  a.reset(7, oa.data());
  b.reset(7, ob.data());
  c.reset(8, oc.data());
  std::set<float> seen;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(oa, ob);
    EXPECT_NE(oa, oc);
    for (auto x : oa) {
      EXPECT_GE(x, -0.05f);
      EXPECT_LE(x, 0.05f);
      seen.insert(x);
    }
    a.reset(std::nullopt, oa.data());
    b.reset(std::nullopt, ob.data());
    c.reset(std::nullopt, oc.data());
  }
  EXPECT_GT(seen.size(), 390u);
}

TEST(CartpoleEnv, SeededResetDropsOneDrawLikeTheOldConstructor) {
  // The old env drew a state when built and again when its vector reset.
  std::mt19937_64 rng{5};
  std::uniform_real_distribution<double> init{-0.05, 0.05};
  for (int k = 0; k < 4; ++k)
    init(rng);
  cartpole env;
  float obs[4];
  env.reset(5, obs);
  EXPECT_EQ(env.state().x, init(rng));
  EXPECT_EQ(env.state().x_dot, init(rng));
  EXPECT_EQ(env.state().theta, init(rng));
  EXPECT_EQ(env.state().theta_dot, init(rng));
  EXPECT_EQ(obs[3], static_cast<float>(env.state().theta_dot));
}

TEST(CartpoleEnv, VectorAutoResetsAndKeepsTheFinalObservation) {
  auto v = make_cartpoles(3);
  ASSERT_FALSE(v.reset(5));
  ASSERT_EQ(v.obs().size(), 12u);
  // Always pushing right topples every pole within a few dozen steps.
  std::vector<std::int64_t> right(3, 1);
  int steps = 0;
  bool ended = false;
  std::vector<double> returns(3, 0);
  while (!ended && steps < 200) {
    ASSERT_FALSE(v.step(right));
    ++steps;
    for (std::size_t i = 0; i < 3; ++i) {
      returns[i] += v.rewards()[i];
      if (!v.terminated()[i])
        continue;
      ended = true;
      auto* fin = v.final_obs().data() + 4 * i;
      EXPECT_TRUE(std::abs(fin[2]) > 0.2 || std::abs(fin[0]) > 2.3);
      for (int k = 0; k < 4; ++k) // the new episode starts near upright
        EXPECT_LE(std::abs(v.obs()[4 * i + k]), 0.05f);
      ASSERT_FALSE(v.episodes().empty());
      EXPECT_DOUBLE_EQ(v.episodes().front().ret, returns[i]);
    }
  }
  EXPECT_TRUE(ended);
  EXPECT_LT(steps, 100);
}

TEST(CartpoleEnv, RandomPolicyReturnsAbout22) {
  auto v = make_cartpoles(16);
  ASSERT_FALSE(v.reset(11));
  std::mt19937_64 rng{3};
  std::bernoulli_distribution coin{0.5};
  std::vector<double> returns;
  std::vector<std::int64_t> actions(16);
  while (returns.size() < 2000) {
    for (auto& a : actions)
      a = coin(rng);
    ASSERT_FALSE(v.step(actions));
    for (auto& ep : v.episodes())
      returns.push_back(ep.ret);
  }
  double mean = 0;
  for (auto r : returns)
    mean += r;
  mean /= static_cast<double>(returns.size());
  EXPECT_GT(mean, 19.0);
  EXPECT_LT(mean, 25.0);
}

TEST(CartpoleEnv, ActionOutsideDiscrete2IsRefused) {
  auto v = make_cartpoles(2);
  ASSERT_FALSE(v.reset(1));
  ASSERT_FALSE(v.step(std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(dice::render(v.last_error()),
            "invalid_action: env 1 (CartPole-v1): action 2 outside "
            "Discrete(2) at step 1 of its episode (vector step 1)");
}

} // namespace
