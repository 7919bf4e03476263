#pragma once

// What the Hopper-v4 tests share: actions, a random policy of their own, a
// recorded trajectory and bit-exact comparison.

#include "dice/env/env.hpp"
#include "dice/mujoco/hopper.hpp"

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace dice::test {

using dice::envs::hopper;

constexpr std::size_t obs_dim = 11;

inline dice::action_view act(const float* u) {
  return {0, u, 3};
}

// Random actions in [-1, 1] from their own generator (not the env's).
struct random_policy {
  std::mt19937_64 rng;
  std::uniform_real_distribution<float> u{-1.0f, 1.0f};
  explicit random_policy(std::uint64_t seed) : rng(seed) {}
  void operator()(float* a) {
    for (int i = 0; i < 3; ++i)
      a[i] = u(rng);
  }
};

// Runs `steps` random steps from reset(seed) and records everything.
inline std::vector<float> trajectory(hopper& env, std::uint64_t seed,
                                     int steps) {
  std::vector<float> out;
  float obs[obs_dim];
  env.reset(seed, obs);
  out.insert(out.end(), obs, obs + obs_dim);
  random_policy pi{42};
  float u[3];
  for (int t = 0; t < steps; ++t) {
    pi(u);
    auto r = env.step(act(u), obs);
    out.insert(out.end(), obs, obs + obs_dim);
    out.push_back(r.reward);
    out.push_back(r.terminated ? 1.0f : 0.0f);
    if (r.terminated)
      env.reset(std::nullopt, obs);
  }
  return out;
}

inline bool bit_equal(const std::vector<float>& x,
                      const std::vector<float>& y) {
  return x.size() == y.size()
    && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

} // namespace dice::test
