#pragma once

// Test environments for the PPO tests and a collector loop over them:
// N CartPoles (gymnasium's CartPole-v1 dynamics, same-step auto-reset, as
// examples/dqn_cartpole/cartpole.cpp) for Discrete actions and N "reach"
// tasks for Box actions (observe a 2-D target, act a 2-D point, reward
// minus the squared distance, 8 steps per episode). The library's own envs
// are dice::env's; these keep the rl tests free of it.

#include "dice/rl/actor_critic.hpp"
#include "dice/rl/segment_builder.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

namespace dice::rl::test {

/// What both test envs expose after a step (one value per env).
struct vec_buffers {
  std::vector<float> obs, final_obs, rewards;
  std::vector<std::uint8_t> terminated, truncated;
};

/// N CartPole-v1s.
class cartpoles : public vec_buffers {
 public:
  static constexpr std::int64_t obs_dim = 4;

  cartpoles(std::size_t n, std::uint64_t seed) : rng_(seed), s_(n), steps_(n) {
    obs.resize(4 * n);
    final_obs.resize(4 * n);
    rewards.resize(n);
    terminated.resize(n);
    truncated.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      reset(i);
  }

  std::size_t size() const {
    return s_.size();
  }

  void step(const torch::Tensor& actions) {
    auto* a = actions.data_ptr<std::int64_t>();
    for (std::size_t i = 0; i < size(); ++i) {
      auto& s = s_[i];
      // gymnasium's constants and Euler integration.
      double force = a[i] == 1 ? 10.0 : -10.0;
      double c = std::cos(s[2]), sn = std::sin(s[2]);
      double temp = (force + 0.05 * s[3] * s[3] * sn) / 1.1;
      double tacc = (9.8 * sn - c * temp)
        / (0.5 * (4.0 / 3.0 - 0.1 * c * c / 1.1));
      double xacc = temp - 0.05 * tacc * c / 1.1;
      s = {s[0] + 0.02 * s[1], s[1] + 0.02 * xacc, s[2] + 0.02 * s[3],
           s[3] + 0.02 * tacc};
      ++steps_[i];
      write(i, final_obs);
      rewards[i] = 1;
      terminated[i] = std::abs(s[0]) > 2.4 || std::abs(s[2]) > 0.2094395102;
      truncated[i] = steps_[i] >= 500;
      if (terminated[i] || truncated[i])
        reset(i);
      else
        write(i, obs);
    }
  }

 private:
  void reset(std::size_t i) {
    std::uniform_real_distribution<double> u{-0.05, 0.05};
    for (auto& x : s_[i])
      x = u(rng_);
    steps_[i] = 0;
    write(i, obs);
  }

  void write(std::size_t i, std::vector<float>& out) {
    for (std::size_t k = 0; k < 4; ++k)
      out[4 * i + k] = static_cast<float>(s_[i][k]);
  }

  std::mt19937_64 rng_;
  std::vector<std::array<double, 4>> s_;
  std::vector<int> steps_;
};

/// N reach tasks: obs (tx, ty, steps left / 8), action (x, y) clipped to
/// [-1, 1], reward -((x - tx)^2 + (y - ty)^2), truncated after 8 steps.
class reaches : public vec_buffers {
 public:
  static constexpr std::int64_t obs_dim = 3;
  static constexpr std::int64_t act_dim = 2;

  reaches(std::size_t n, std::uint64_t seed) : rng_(seed), steps_(n) {
    obs.resize(3 * n);
    final_obs.resize(3 * n);
    rewards.resize(n);
    terminated.resize(n);
    truncated.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      reset(i);
  }

  std::size_t size() const {
    return steps_.size();
  }

  void step(const torch::Tensor& actions) {
    auto* a = actions.data_ptr<float>();
    for (std::size_t i = 0; i < size(); ++i) {
      // Clipping to the bounds is the collector's (here: the env's) job.
      float x = std::clamp(a[2 * i], -1.0f, 1.0f);
      float y = std::clamp(a[2 * i + 1], -1.0f, 1.0f);
      float dx = x - obs[3 * i], dy = y - obs[3 * i + 1];
      rewards[i] = -(dx * dx + dy * dy);
      ++steps_[i];
      final_obs[3 * i] = obs[3 * i];
      final_obs[3 * i + 1] = obs[3 * i + 1];
      final_obs[3 * i + 2] = static_cast<float>(8 - steps_[i]) / 8;
      terminated[i] = 0;
      truncated[i] = steps_[i] >= 8;
      if (truncated[i])
        reset(i);
      else
        obs[3 * i + 2] = final_obs[3 * i + 2];
    }
  }

 private:
  void reset(std::size_t i) {
    std::uniform_real_distribution<float> u{-0.8f, 0.8f};
    obs[3 * i] = u(rng_);
    obs[3 * i + 1] = u(rng_);
    obs[3 * i + 2] = 1;
    steps_[i] = 0;
  }

  std::mt19937_64 rng_;
  std::vector<int> steps_;
};

/// A collector: `envs`, its sampling generator and its segment builder.
template <class Env>
struct collector {
  Env envs;
  std::mt19937_64 gen;
  segment_builder builder;

  collector(std::size_t n, std::uint64_t seed, const step_layout& layout)
    : envs(n, seed), gen(seed * 0x9E3779B97F4A7C15ull + 1),
      builder(*segment_builder::make(n, layout)) {
    // nop
  }

  /// T steps of every env with `net`, as one iteration's payloads.
  collected_segments collect(actor_critic& net, std::int64_t steps,
                             std::uint32_t origin, std::int64_t version) {
    auto n = static_cast<std::int64_t>(envs.size());
    for (std::int64_t t = 0; t < steps; ++t) {
      auto obs = envs.obs; // the env overwrites it in step()
      torch::Tensor x = torch::from_blob(obs.data(), {n, Env::obs_dim});
      act_result r = net->act(x, gen);
      envs.step(r.actions);
      step_arrays s;
      s.obs = obs.data();
      if (net->discrete())
        s.discrete_actions = r.actions.data_ptr<std::int64_t>();
      else
        s.box_actions = r.actions.data_ptr<float>();
      s.logp = r.log_prob.data_ptr<float>();
      s.value = r.value.data_ptr<float>();
      s.reward = envs.rewards.data();
      s.next_obs = envs.final_obs.data();
      s.terminated = envs.terminated.data();
      s.truncated = envs.truncated.data();
      if (auto err = builder.add(s))
        throw std::runtime_error(dice::render(err));
    }
    return builder.finish(origin, version);
  }
};

/// The CartPole spaces.
inline space cartpole_obs_space() {
  return space::box({4}, -INFINITY, INFINITY);
}

/// The reach spaces.
inline space reach_obs_space() {
  return space::box({3}, -1.0f, 1.0f);
}

/// The reach action space.
inline space reach_act_space() {
  return space::box({2}, -1.0f, 1.0f);
}

/// CartPole collectors.
using cartpole_collector = collector<cartpoles>;

/// Reach collectors.
using reach_collector = collector<reaches>;

/// A CartPole collector (Discrete(2)).
inline cartpole_collector make_cartpole_collector(std::size_t n,
                                                  std::uint64_t seed) {
  return cartpole_collector{n, seed, step_layout{4, 2, 0}};
}

/// A reach collector (Box(2)).
inline reach_collector make_reach_collector(std::size_t n, std::uint64_t seed) {
  return reach_collector{n, seed, step_layout{3, 0, 2}};
}

} // namespace dice::rl::test
