#pragma once

// A deterministic test environment whose episodes end, and whose resets and
// steps fail, exactly where a test says. Its observation is (episode, step):
// the number of successful resets and the step within the episode, so a test
// can read off which episode an env is in and how far it got.

#include "dice/core/errc.hpp"
#include "dice/env/env.hpp"
#include "dice/env/vector_env.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dice::test {

/// Where a scripted_env ends episodes and fails (steps count from 1 within
/// an episode; 0 disables an entry).
struct script {
  /// Step at which an episode terminates.
  std::int64_t terminate_at = 0;
  /// Step at which the env itself truncates an episode.
  std::int64_t truncate_at = 0;
  /// max_episode_steps() (the vector's time limit).
  std::int64_t time_limit = 0;
  /// Step whose step() throws (after scribbling on the observation).
  std::int64_t throw_step_at = 0;
  /// The episode (1-based) in which throw_step_at applies.
  std::int64_t throw_step_episode = 1;
  /// The reset() call (1-based, counting failed calls) that first throws.
  int throw_reset_on = 0;
  /// How many reset() calls in a row throw from throw_reset_on on.
  int throw_reset_times = 1;
  /// Box(-1, 1, (2,)) actions instead of Discrete(3).
  bool box_actions = false;
  /// Observation bound (a different value makes a different space).
  float obs_bound = 1e6f;
};

/// Observation (episode, step); reward 10 * step + action (the index, or the
/// first value of a Box action).
class scripted_env : public env {
 public:
  explicit scripted_env(script s = {}) : script_(s) {
    // nop
  }

  std::string name() const override {
    return "scripted";
  }

  space observation_space() const override {
    return space::box({2}, -script_.obs_bound, script_.obs_bound);
  }

  space action_space() const override {
    return script_.box_actions ? space::box({2}, -1.0f, 1.0f)
                               : space::discrete(3);
  }

  void reset(std::optional<std::uint64_t> seed, float* obs) override {
    ++reset_calls;
    seeds.push_back(seed);
    if (script_.throw_reset_on > 0 && reset_calls >= script_.throw_reset_on
        && reset_calls < script_.throw_reset_on + script_.throw_reset_times) {
      obs[0] = -999; // a half-done reset
      throw std::runtime_error("reset boom");
    }
    ++episode;
    t = 0;
    obs[0] = static_cast<float>(episode);
    obs[1] = 0;
  }

  step_result step(const action_view& a, float* obs) override {
    ++t;
    ++step_calls;
    if (t == script_.throw_step_at && episode == script_.throw_step_episode) {
      obs[0] = -999; // a half-written observation must not leak out
      obs[1] = -999;
      throw std::runtime_error("step boom");
    }
    last_action = script_.box_actions ? a.values[0]
                                      : static_cast<float>(a.index);
    obs[0] = static_cast<float>(episode);
    obs[1] = static_cast<float>(t);
    return {static_cast<float>(10 * t) + last_action, t == script_.terminate_at,
            t == script_.truncate_at};
  }

  std::int64_t max_episode_steps() const override {
    return script_.time_limit;
  }

  /// Successful resets so far.
  std::int64_t episode = 0;
  /// Step within the episode.
  std::int64_t t = 0;
  /// reset() calls, failed ones included.
  int reset_calls = 0;
  /// step() calls, failed ones included.
  int step_calls = 0;
  /// The seed of each reset() call.
  std::vector<std::optional<std::uint64_t>> seeds;
  /// The action of the last successful step.
  float last_action = -1;

 private:
  script script_;
};

/// A vector of scripted envs, env i following scripts[i] (throws on a bad
/// batch: the tests that call it expect a valid one).
inline vector_env make_scripted(std::vector<script> scripts,
                                vector_env_options opts = {}) {
  auto v = vector_env::make(
    scripts.size(),
    [&](std::size_t i) {
      return std::make_unique<scripted_env>(scripts[i]);
    },
    opts);
  if (!v)
    throw std::runtime_error(render(v.error()));
  return std::move(*v);
}

/// Env i of a vector made by make_scripted.
inline scripted_env& scripted(vector_env& v, std::size_t i) {
  return dynamic_cast<scripted_env&>(v.at(i));
}

/// Row i of a buffer with two floats per env.
inline std::vector<float> row(const std::vector<float>& xs, std::size_t i) {
  return {xs[2 * i], xs[2 * i + 1]};
}

} // namespace dice::test
